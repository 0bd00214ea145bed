// Owns `calbridge demo`: the real daemon against the built-in simulators, with sample therapists and bookings
// flowing in, moved and cancelled (and a therapist moving an event in the calendar), and a live summary.
import { mkdtempSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { eventIdFor } from "../calendar/ids.ts";
import { type App, createApp } from "../daemon/app.ts";
import type { Logger } from "../log.ts";
import { startWorld, WORLD_WEBHOOK_SECRET, type World } from "../simulator/world.ts";

export interface DemoOptions {
  /** Stop after this many seconds (0: until interrupted). */
  durationSec: number;
  /** One booking change every this many ms. */
  intervalMs?: number;
  logger: Logger;
  write?: (line: string) => void;
  signal?: AbortSignal;
}

export interface DemoResult {
  steps: number;
  converged: boolean;
  bookings: number;
  events: number;
}

const THERAPISTS = ["th_anna", "th_ben", "th_chen"];
const HOUR = 3_600_000;

export async function runDemo(options: DemoOptions): Promise<DemoResult> {
  const write = options.write ?? ((l: string) => process.stdout.write(`${l}\n`));
  const dir = mkdtempSync(join(tmpdir(), "calbridge-demo-"));
  const world = await startWorld({
    therapists: THERAPISTS,
    dir,
    rateLimit: { limit: 300, windowMs: 60_000 },
    configure: (c) => {
      // A short grace period before a therapist's move is written back, so a one-minute demo shows it happen.
      c.sync = {
        ...c.sync,
        calendar_poll_seconds: 5,
        reconcile_cron: "*/1 * * * *",
        writeback: { cancel_grace_seconds: 5, reschedule_grace_seconds: 5 },
      };
    },
  });
  const now = Date.now();
  world.booking.seed({ therapists: THERAPISTS, count: 24, from: now + HOUR, to: now + 14 * 24 * HOUR });
  const app = await createApp(world.config, { logger: options.logger, listen: "127.0.0.1:0" });
  await app.start();
  world.booking.addWebhookEndpoint({
    url: `${app.http!.url}${world.config.webhooks.path}`,
    secret: WORLD_WEBHOOK_SECRET,
    events: [
      "appointment.created",
      "appointment.updated",
      "appointment.cancelled",
      "appointment.completed",
      "appointment.no_show",
      "customer.updated",
    ],
    description: "calbridge demo",
  });
  write(`calbridge demo: booking simulator ${world.booking.url}, calendar emulator ${world.google.rootUrl}`);
  write(`daemon at ${app.http!.url} (status: ${app.admin!.url}/status, metrics: ${app.admin!.url}/metrics)`);
  write("bookings are created, moved and cancelled every few seconds; a therapist moves an event now and then.\n");

  let steps = 0;
  const interval = options.intervalMs ?? 2000;
  const deadline = options.durationSec > 0 ? Date.now() + options.durationSec * 1000 : Number.POSITIVE_INFINITY;
  try {
    await waitFor(() => app.sync.activity.of(THERAPISTS[0]!)?.lastSyncAt !== undefined, 15_000);
    while (Date.now() < deadline && !options.signal?.aborted) {
      const what = step(world, app, steps++);
      await sleep(Math.min(interval, Math.max(0, deadline - Date.now())), options.signal);
      write(`${new Date().toISOString().slice(11, 19)}  ${what.padEnd(52)} ${summary(world)}`);
    }
    // Let webhooks, polls and write-backs settle, then check that both sides agree.
    await world.booking.webhooksIdle();
    for (const t of THERAPISTS) await app.poller.poll(t);
    // Moves in their grace period are written back when it ends.
    await Promise.race([app.engine.drained(), sleep(15_000)]);
    await app.reconcile();
    const converged = agree(world);
    const result = { steps, converged, bookings: confirmed(world).length, events: liveEvents(world).length };
    write(
      `\n${converged ? "calendars match the bookings" : "calendars do NOT match the bookings yet"}: ${result.bookings} confirmed bookings, ${result.events} events`,
    );
    return result;
  } finally {
    await app.stop(5000);
    await world.close();
  }
}

function step(world: World, app: App, n: number): string {
  const sim = world.booking;
  const upcoming = confirmed(world).filter((a) => Date.parse(String(a.start_time)) > Date.now() + HOUR);
  const pick = upcoming[(n * 7) % Math.max(1, upcoming.length)];
  const kind = n % 5;
  try {
    if (kind === 0 || !pick) {
      const t = THERAPISTS[n % THERAPISTS.length]!;
      const start = new Date(Date.now() + (2 + (n % 10)) * 24 * HOUR);
      start.setUTCHours(8 + (n % 8), 0, 0, 0);
      const a = sim.create({ therapist_id: t, start_time: start.toISOString() }, { force: true });
      return `booked ${a.id} with ${t}`;
    }
    if (kind === 1) {
      const to = new Date(Date.parse(String(pick.start_time)) + 24 * HOUR).toISOString();
      sim.move(String(pick.id), to, { force: true });
      return `moved ${pick.id} by a day (booking side)`;
    }
    if (kind === 2) {
      sim.cancel(String(pick.id), "customer asked");
      return `cancelled ${pick.id} (booking side)`;
    }
    if (kind === 3) {
      // The therapist drags the event two hours later in Google Calendar: calbridge reschedules the booking.
      const cal = world.calendarOf(String(pick.therapist_id));
      const ev = world.google.event(cal, eventIdFor(String(pick.id)));
      if (!ev || ev.status === "cancelled") return "therapist move skipped (event not mirrored yet)";
      const shift = (t: { dateTime?: string }) => ({
        dateTime: new Date(Date.parse(String(t.dateTime)) + 2 * HOUR).toISOString(),
      });
      world.google.userEdit(cal, String(ev.id), { start: shift(ev.start as never), end: shift(ev.end as never) });
      void app.poller.poll(String(pick.therapist_id));
      return `therapist moved ${pick.id} +2h in the calendar`;
    }
    sim.complete(String(pick.id));
    return `completed ${pick.id}`;
  } catch (err) {
    return `step skipped: ${(err as Error).message}`;
  }
}

function confirmed(world: World) {
  return world.booking.all().filter((a) => a.status === "confirmed" || a.status === "completed");
}

function liveEvents(world: World) {
  return THERAPISTS.flatMap((t) => world.google.events(world.calendarOf(t)).filter((e) => e.status !== "cancelled"));
}

function summary(world: World): string {
  return THERAPISTS.map((t) => {
    const b = confirmed(world).filter((a) => a.therapist_id === t).length;
    const e = world.google.events(world.calendarOf(t)).filter((x) => x.status !== "cancelled").length;
    return `${t.slice(3)} ${e}/${b}`;
  }).join("  ");
}

/** Every confirmed or completed booking in the window has exactly one event at its time, and nothing else is there. */
function agree(world: World): boolean {
  const horizon = Date.now() + 90 * 24 * HOUR;
  const wanted = confirmed(world).filter((a) => Date.parse(String(a.start_time)) < horizon);
  const events = liveEvents(world);
  if (events.length !== wanted.length) return false;
  return wanted.every((a) => {
    const ev = world.google.event(world.calendarOf(String(a.therapist_id)), eventIdFor(String(a.id)));
    const start = (ev?.start as { dateTime?: string } | undefined)?.dateTime;
    return (
      ev?.status === "confirmed" &&
      start !== undefined &&
      Date.parse(start) === Math.floor(Date.parse(String(a.start_time)) / 1000) * 1000
    );
  });
}

async function waitFor(cond: () => boolean, ms: number): Promise<void> {
  const until = Date.now() + ms;
  while (!cond() && Date.now() < until) await sleep(100);
}

function sleep(ms: number, signal?: AbortSignal): Promise<void> {
  return new Promise((resolve) => {
    const t = setTimeout(resolve, ms);
    signal?.addEventListener("abort", () => {
      clearTimeout(t);
      resolve();
    });
  });
}
