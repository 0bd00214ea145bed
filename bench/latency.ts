// Owns the webhook-to-calendar latency benchmark: the daemon (`calbridge run`, a child process) receives the booking
// simulator's signed webhooks while this process creates and moves appointments at a steady rate, and measures for
// each change the time until the Calendar emulator shows the new state.
import { rmSync } from "node:fs";
import { monitorEventLoopDelay } from "node:perf_hooks";
import { eventIdFor } from "../src/calendar/ids.ts";
import { startWorld, WORLD_WEBHOOK_SECRET } from "../src/simulator/world.ts";
import {
  bookingCounts,
  DAY,
  freePort,
  googleCounts,
  mb,
  percentile,
  round,
  spawnCli,
  stopChild,
  waitFor,
  writeConfigYaml,
} from "./support.ts";

const HOUR = 3_600_000;
/** How often the emulator's events are looked at: the resolution of every latency figure. */
const POLL_MS = 2;

export interface BenchLatencyOptions {
  /** Appointment changes per second (default 50). */
  rate?: number;
  /** Seconds of load (default 25). */
  seconds?: number;
  therapists?: number;
  /** Booking rate limit (default the Pro plan's 300 a minute, the minute scaled to 1 s). */
  rateLimit?: { limit: number; windowMs: number } | false;
  /** How long to wait after the load for the last changes to appear (default 30 s). */
  drainMs?: number;
}

interface Pending {
  kind: "create" | "move";
  id: string;
  calendarId: string;
  eventId: string;
  startMs: number;
  t0: number;
}

export async function benchLatency(opts: BenchLatencyOptions = {}): Promise<Record<string, number | string>> {
  const rate = opts.rate ?? 50;
  const seconds = opts.seconds ?? 25;
  const therapists = opts.therapists ?? 10;
  const rateLimit = opts.rateLimit ?? { limit: 300, windowMs: 1_000 };
  const drainMs = opts.drainMs ?? 30_000;
  const world = await startWorld({ therapists, rateLimit, seed: 23 });
  const port = await freePort();
  const adminPort = await freePort();
  const config = {
    ...world.config,
    webhooks: { ...world.config.webhooks, listen: `127.0.0.1:${port}` },
    admin: { ...world.config.admin, listen: `127.0.0.1:${adminPort}` },
  };
  const configFile = writeConfigYaml(config, world.dir);
  const daemon = spawnCli(configFile, ["run"]);
  const base = `http://127.0.0.1:${port}`;
  const admin = `http://127.0.0.1:${adminPort}`;
  let stopped: Awaited<ReturnType<typeof stopChild>> | undefined;
  try {
    const ready = await waitFor(async () => {
      if (daemon.child.exitCode !== null) throw new Error(`daemon exited with ${daemon.child.exitCode}`);
      try {
        return (await fetch(`${admin}/readyz`)).ok;
      } catch {
        return false;
      }
    }, 30_000);
    if (!ready) throw new Error("the daemon did not become ready within 30 s");
    world.booking.addWebhookEndpoint({
      url: `${base}${config.webhooks.path}`,
      secret: WORLD_WEBHOOK_SECRET,
      events: ["*"],
    });
    const b0 = world.booking.requests.length;
    const g0 = world.google.requestLog.length;

    // The watcher: every POLL_MS, each change not yet seen is looked up in the emulator's in-memory calendar.
    const pending = new Map<string, Pending>();
    const latencies: { create: number[]; move: number[] } = { create: [], move: [] };
    const movable: string[] = []; // mirrored appointments with no change in flight: candidates for a move
    const look = () => {
      const now = performance.now();
      for (const [id, p] of pending) {
        const ev = world.google.event(p.calendarId, p.eventId) as
          | { status?: string; start?: { dateTime?: string } }
          | undefined;
        if (ev?.status === "confirmed" && Date.parse(ev.start?.dateTime ?? "") === p.startMs) {
          latencies[p.kind].push(now - p.t0);
          pending.delete(id);
          movable.push(id);
        }
      }
    };
    const watcher = setInterval(look, POLL_MS);

    // The load: change i is due at start + i/rate; a late timer fires the overdue ones at once (no drift).
    let seed = 0x2545f491;
    const rand = (k: number) => {
      // mulberry32
      seed = (seed + 0x6d2b79f5) | 0;
      let t = Math.imul(seed ^ (seed >>> 15), 1 | seed);
      t = (t + Math.imul(t ^ (t >>> 7), 61 | t)) ^ t;
      return ((t ^ (t >>> 14)) >>> 0) % k;
    };
    const slot = () => {
      const day = Math.floor(Date.now() / DAY) * DAY + (1 + rand(60)) * DAY;
      return day + (7 + rand(12)) * HOUR + rand(2) * 30 * 60_000;
    };
    const total = Math.round(rate * seconds);
    let sent = 0;
    let creates = 0;
    let moves = 0;
    let behindMaxMs = 0;
    const loopDelay = monitorEventLoopDelay({ resolution: 10 });
    loopDelay.enable();
    const loadStart = performance.now();
    while (sent < total) {
      const due = loadStart + (sent * 1000) / rate;
      const now = performance.now();
      if (now < due) {
        await new Promise((r) => setTimeout(r, due - now));
        continue;
      }
      behindMaxMs = Math.max(behindMaxMs, now - due);
      let startMs = slot();
      if (sent % 2 === 1 && movable.length > 0) {
        const id = movable.splice(rand(movable.length), 1)[0]!;
        const current = world.booking.get(id)!;
        const therapist = String(current.therapist_id);
        // A move to where it already is would change nothing: move it half an hour later instead.
        if (Date.parse(String(current.start_time)) === startMs) startMs += 30 * 60_000;
        const t0 = performance.now();
        world.booking.move(id, startMs);
        pending.set(id, {
          kind: "move",
          id,
          calendarId: world.calendarOf(therapist),
          eventId: eventIdFor(id),
          startMs,
          t0,
        });
        moves++;
      } else {
        const therapist = world.therapists[rand(world.therapists.length)]!;
        const t0 = performance.now();
        const appt = world.booking.create(
          { therapist_id: therapist, start_time: new Date(startMs).toISOString() },
          { force: true },
        );
        const id = String(appt.id);
        pending.set(id, {
          kind: "create",
          id,
          calendarId: world.calendarOf(therapist),
          eventId: eventIdFor(id),
          startMs,
          t0,
        });
        creates++;
      }
      sent++;
    }
    const loadSeconds = (performance.now() - loadStart) / 1000;
    loopDelay.disable();
    const drainStart = performance.now();
    await waitFor(() => pending.size === 0, drainMs, 10);
    const drainWaitMs = performance.now() - drainStart;
    clearInterval(watcher);
    look();

    const status = (await fetch(`${admin}/status`, { headers: { accept: "application/json" } })
      .then((r) => r.json())
      .catch(() => undefined)) as { deadLetters?: number } | undefined;
    const booking = bookingCounts(world.booking.requests.slice(b0));
    const google = googleCounts(world.google.requestLog.slice(g0));
    const failedDeliveries = world.booking.deliveries.filter((d) => d.state !== "delivered").length;
    const all = [...latencies.create, ...latencies.move].sort((a, b) => a - b);
    const sorted = (xs: number[]) => [...xs].sort((a, b) => a - b);
    const appointmentEvents = world.booking.events.filter((e) => String(e.type).startsWith("appointment.")).length;

    // Shutdown: when the daemon logs that it stopped, and when its process is gone.
    let stopLoggedMs = Number.NaN;
    const sigterm = performance.now();
    daemon.child.stdout!.on("data", (d: string) => {
      if (Number.isNaN(stopLoggedMs) && d.includes('"msg":"calbridge stopped"')) {
        stopLoggedMs = performance.now() - sigterm;
      }
    });
    stopped = await stopChild(daemon, 30_000);
    const exitMs = performance.now() - sigterm;
    return {
      rate_per_s: rate,
      load_seconds: round(loadSeconds, 1),
      achieved_rate_per_s: round(sent / loadSeconds, 1),
      generator_max_behind_ms: round(behindMaxMs, 1),
      bench_loop_delay_p99_ms: round(loopDelay.percentile(99) / 1e6, 1),
      bench_loop_delay_max_ms: round(loopDelay.max / 1e6, 1),
      therapists,
      booking_rate_limit: rateLimit
        ? `${rateLimit.limit}/${rateLimit.windowMs} ms: Pro plan, minute scaled`
        : "unlimited",
      changes: sent,
      creates,
      moves,
      applied: all.length,
      not_applied: pending.size,
      p50_ms: round(percentile(all, 50)),
      p90_ms: round(percentile(all, 90)),
      p99_ms: round(percentile(all, 99)),
      max_ms: round(all.at(-1) ?? Number.NaN),
      create_p50_ms: round(percentile(sorted(latencies.create), 50)),
      create_p99_ms: round(percentile(sorted(latencies.create), 99)),
      move_p50_ms: round(percentile(sorted(latencies.move), 50)),
      move_p99_ms: round(percentile(sorted(latencies.move), 99)),
      drain_after_load_ms: round(drainWaitMs),
      poll_resolution_ms: POLL_MS,
      appointment_events_emitted: appointmentEvents,
      webhook_deliveries: world.booking.deliveries.length,
      webhook_deliveries_not_delivered: failedDeliveries,
      booking_requests: booking.total,
      booking_get_requests: booking.get,
      booking_429s: booking.rateLimited,
      google_requests: google.total,
      google_writes: google.writes,
      google_reads: google.reads,
      google_token_requests: google.token,
      dead_letters: status?.deadLetters ?? "n/a",
      daemon_peak_rss_mb: stopped.probe ? mb(stopped.probe.maxRssKb) : Number.NaN,
      daemon_cpu_ms: stopped.probe ? stopped.probe.userCpuMs + stopped.probe.systemCpuMs : Number.NaN,
      daemon_lifetime_ms: stopped.probe ? stopped.probe.wallMs : Number.NaN,
      daemon_exit: stopped.code ?? `signal ${stopped.signal}`,
      daemon_stopped_logged_after_sigterm_ms: round(stopLoggedMs, 0),
      daemon_process_exit_after_sigterm_ms: round(exitMs, 0),
    };
  } finally {
    if (!stopped) {
      const s = await stopChild(daemon, 5_000);
      if (s.code !== 0) process.stderr.write(`latency bench: daemon output: ${s.stderr.slice(-2000)}\n`);
    }
    await world.close();
    rmSync(world.dir, { recursive: true, force: true });
  }
}

if (import.meta.main) {
  const seconds = process.argv[2] ? Number(process.argv[2]) : undefined;
  const result = await benchLatency(seconds === undefined ? {} : { seconds });
  console.log("webhook-to-calendar latency benchmark");
  for (const [k, v] of Object.entries(result)) console.log(`  ${k.padEnd(34)} ${v}`);
}
