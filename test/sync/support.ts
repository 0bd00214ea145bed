// Test support for the sync engine: a simulated world plus an App built from its config by the production wiring.
import { eventIdFor } from "../../src/calendar/ids.ts";
import type { ManualClock } from "../../src/clock.ts";
import type { ConfigInput } from "../../src/config/schema.ts";
import { type App, type AppOptions, createApp } from "../../src/daemon/app.ts";
import { type Logger, silentLogger } from "../../src/log.ts";
import { startWorld, WORLD_WEBHOOK_SECRET, type World, type WorldOptions } from "../../src/simulator/world.ts";

export interface Harness {
  world: World;
  app: App;
  /** Live (not deleted) events of a therapist's calendar. */
  live(therapistId: string): Record<string, unknown>[];
  /** Live events over every calendar. */
  allLive(): Record<string, unknown>[];
  /** Calendar writes made by calbridge so far (inserts, updates, patches, deletes). */
  writes(): number;
  close(): Promise<void>;
}

export async function harness(
  options: WorldOptions & {
    logger?: import("../../src/log.ts").Logger;
    engine?: Partial<import("../../src/sync/retry.ts").RetryPolicy>;
    /** More options of the App (its own clock, a reconnect-link maker, ...). */
    app?: Pick<AppOptions, "clock" | "reconnectLink">;
  } = {},
): Promise<Harness> {
  const world = await startWorld(options);
  const app = await createApp(world.config, {
    ...(options.clock ? { clock: options.clock } : {}),
    logger: options.logger ?? silentLogger,
    oneShot: true,
    listen: "127.0.0.1:0",
    ...(options.engine ? { engine: options.engine } : {}),
    ...options.app,
  });
  const live = (t: string) => world.google.events(world.calendarOf(t)).filter((e) => e.status !== "cancelled");
  return {
    world,
    app,
    live,
    allLive: () => world.therapists.flatMap((t) => live(t)),
    writes: () => world.google.writes,
    async close() {
      await app.stop(2000).catch(() => {});
      await world.close();
    },
  };
}

/** A harness whose daemon runs (HTTP server, inbox processor) and receives the simulator's webhooks. */
export async function daemonHarness(options: Parameters<typeof harness>[0] = {}): Promise<Harness> {
  const x = await harness(options);
  await x.app.start();
  x.world.booking.addWebhookEndpoint({
    url: `${x.app.http!.url}${x.world.config.webhooks.path}`,
    secret: WORLD_WEBHOOK_SECRET,
    events: ["*"],
  });
  return x;
}

/** The live events of a calendar that carry the appointment's mark (whatever generation of its id). */
export function liveOf(x: Harness, cal: string, appointmentId: string): Record<string, unknown>[] {
  return x.world.google
    .events(cal)
    .filter(
      (e) =>
        e.status !== "cancelled" &&
        (e.extendedProperties as { private?: Record<string, string> } | undefined)?.private
          ?.calbridge_appointment_id === appointmentId,
    );
}

export const DAY = 86_400_000;
export const iso = (ms: number) => new Date(ms).toISOString();

/** Real I/O done for now: webhooks delivered, inbox processed, the engine idle. */
export async function quiet(x: Harness): Promise<void> {
  for (let i = 0; i < 2; i++) {
    await x.world.booking.webhooksIdle();
    await x.app.processor.idle();
    await x.app.engine.idle();
  }
}

/** Moves the manual clock on in steps, with real I/O finishing between them. */
export async function pass(x: Harness, clock: ManualClock, ms: number, step = 5_000): Promise<void> {
  for (let t = 0; t < ms; t += step) {
    await clock.advance(Math.min(step, ms - t));
    await quiet(x);
  }
}

/** Two therapists, the daemon running, write-backs without grace periods (`writeback` adds to or overrides that). */
export function twoWay(
  writeback: NonNullable<NonNullable<ConfigInput["sync"]>["writeback"]> = {},
  logger?: Logger,
): Promise<Harness> {
  return daemonHarness({
    therapists: 2,
    ...(logger ? { logger } : {}),
    configure: (c) => {
      c.sync = { ...c.sync, writeback: { cancel_grace_seconds: 0, reschedule_grace_seconds: 0, ...writeback } };
    },
  });
}

/** An appointment of th_1 three days ahead at 10:00 UTC, mirrored into th_1's calendar (settled). */
export async function mirrored(x: Harness): Promise<{ id: string; cal: string; eventId: string; start: number }> {
  const start = new Date(Date.now() + 3 * DAY);
  start.setUTCHours(10, 0, 0, 0);
  const appt = x.world.booking.create({ therapist_id: "th_1", start_time: start.toISOString() }, { force: true });
  await settle(x);
  const id = String(appt.id);
  return { id, cal: x.world.calendarOf("th_1"), eventId: eventIdFor(id), start: start.getTime() };
}

/** Webhooks, the inbox, a poll of every calendar calbridge can use, the engine: three times over (no reconciliation). */
export async function settle(x: Harness): Promise<void> {
  for (let i = 0; i < 3; i++) {
    await x.world.booking.webhooksIdle();
    await x.app.processor.idle();
    for (const t of x.world.therapists) if (x.app.sync.mapping.calendarIfAny(t)) await x.app.poller.poll(t);
    await x.app.engine.idle();
  }
}

/** Polls every calendar calbridge can use (a therapist not connected yet has none to poll). */
export async function pollAll(x: Harness): Promise<void> {
  for (const t of x.world.therapists) if (x.app.sync.mapping.calendarIfAny(t)) await x.app.poller.poll(t);
  await quiet(x);
}

/** Cancellations sent to the booking service so far. */
export const cancels = (x: Harness): number =>
  x.world.booking.requests.filter((r) => r.route.endsWith("/cancel")).length;

/** Reschedules (PATCH) sent to the booking service so far. */
export const patches = (x: Harness): number => x.world.booking.requests.filter((r) => r.method === "PATCH").length;

/** An event's start in ms (NaN without one). */
export const startOf = (ev: Record<string, unknown> | undefined): number =>
  Date.parse(String((ev?.start as { dateTime?: string } | undefined)?.dateTime));

/** `count` appointments of th_1, one a day from the day after tomorrow at fixed hours, mirrored and polled. */
export async function mirroredMany(x: Harness, clock: ManualClock, count: number): Promise<string[]> {
  const ids: string[] = [];
  for (let i = 0; i < count; i++) {
    const s = new Date(clock.now() + (i + 2) * DAY);
    s.setUTCHours(9 + (i % 8), 0, 0, 0);
    ids.push(String(x.world.booking.create({ therapist_id: "th_1", start_time: s.toISOString() }, { force: true }).id));
  }
  await quiet(x);
  await x.app.reconcile();
  await pollAll(x);
  return ids;
}
