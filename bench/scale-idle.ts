// Owns the idle-cost benchmark: the daemon's leader work (poller, push channels, the reconciliation every 15 minutes)
// in this process on a manual clock shared with the simulators, over two simulated days with nothing happening,
// counting Google requests at the emulator; once with push notifications reaching the daemon, once polling only.
// Then, with push: how long a change takes to be seen through a notification (real ms), and, when its notification is
// lost, after how many simulated minutes the safety poll finds it.
import { rmSync } from "node:fs";
import { eventIdFor } from "../src/calendar/ids.ts";
import { ManualClock } from "../src/clock.ts";
import { createApp } from "../src/daemon/app.ts";
import { silentLogger } from "../src/log.ts";
import { startWorld } from "../src/simulator/world.ts";
import { DAY, round, waitFor } from "./support.ts";

const MINUTE = 60_000;
const HOUR = 60 * MINUTE;
/** The default reconcile_cron: every 15 minutes. */
const RECONCILE_EVERY_MS = 15 * MINUTE;

export interface BenchIdleOptions {
  therapists?: number;
  /** Appointments per therapist, mirrored before the idle period. */
  appointments?: number;
  /** Simulated idle time (default two days: the daily full listing falls in it whatever its jitter). */
  days?: number;
}

interface IdleRun {
  perTherapistDay: number;
  byMethod: Record<string, number>;
  changeViaPushMs?: number;
  unannouncedChangeAfterMin?: number;
}

async function idleRun(push: boolean, o: Required<BenchIdleOptions>): Promise<IdleRun> {
  const clock = new ManualClock(Date.now());
  const world = await startWorld({
    therapists: o.therapists,
    clock,
    seed: 31,
    // google-auth-library judges a token's expiry by the wall clock, the emulator by the simulated one: with the
    // default hour, every simulated hour would cost each calendar a 401 and a retry that production never sees (it
    // refreshes tokens before they expire).
    google: { accessTokenTtlSeconds: 30 * 24 * 3600 },
    configure: (c) => {
      c.sync = { writeback: { reschedule_grace_seconds: 0 } };
      if (push) c.google.push = { public_url: "http://127.0.0.1:1/webhooks/google" };
    },
  });
  const app = await createApp(world.config, { clock, logger: silentLogger, listen: "127.0.0.1:0", oneShot: true });
  const settle = async () => {
    await waitFor(() => app.poller.busy === 0, 10_000, 1);
    await app.engine.idle();
  };
  try {
    const now = clock.now();
    world.booking.seed({
      therapists: world.therapists,
      count: o.therapists * o.appointments,
      from: now + DAY,
      to: now + 30 * DAY,
    });
    // The appointment the change checks move: past the seeded range, so its moves overlap nothing.
    const at = new Date(now + 40 * DAY);
    at.setUTCHours(10, 0, 0, 0);
    const moved = String(
      world.booking.create({ therapist_id: world.therapists[0]!, start_time: at.toISOString() }, { force: true }).id,
    );
    await app.start();
    if (push) world.config.google.push!.public_url = `${app.http!.url}/webhooks/google`;
    // The leader's work as `calbridge run` starts it; the cron is driven by the simulated clock below.
    await app.reconcile();
    app.poller.start();
    if (push) {
      await app.push.start();
      await world.google.settleNotifications();
    }
    await settle();
    world.google.resetUsage();
    const minutes = o.days * 24 * 60;
    for (let m = 1; m <= minutes; m++) {
      await clock.advance(MINUTE);
      if ((m * MINUTE) % RECONCILE_EVERY_MS === 0) await app.reconcile();
      await settle();
    }
    const usage = world.google.usage;
    const run: IdleRun = {
      perTherapistDay: round(usage.requests / o.therapists / o.days, 1),
      byMethod: usage.byMethod,
    };
    if (push) {
      // A therapist moves an event: Google's notification reaches the daemon, which polls and writes it back.
      const id = moved;
      const appt = world.booking.get(id)!;
      const cal = world.calendarOf(String(appt.therapist_id));
      const moveBy = async (hours: number) => {
        const start = Date.parse(String(world.booking.get(id)!.start_time));
        const end = Date.parse(String(world.booking.get(id)!.end_time));
        world.google.userEdit(cal, eventIdFor(id), {
          start: { dateTime: new Date(start + hours * HOUR).toISOString() },
          end: { dateTime: new Date(end + hours * HOUR).toISOString() },
        });
        return start + hours * HOUR;
      };
      const movedTo = (ms: number) => Date.parse(String(world.booking.get(id)!.start_time)) === ms;
      let target = await moveBy(1);
      const t0 = performance.now();
      await world.google.notify(cal);
      await waitFor(() => movedTo(target), 10_000, 1);
      run.changeViaPushMs = round(performance.now() - t0, 1);
      // The same with the notification lost: found by the safety poll. First the engine finishes with the last change
      // (its follow-up write a minute later would find this one by chance).
      for (let m = 0; m < 10; m++) {
        await clock.advance(MINUTE);
        await settle();
      }
      target = await moveBy(1);
      const lostAt = clock.now();
      for (let m = 0; m < 60 && !movedTo(target); m++) {
        await clock.advance(MINUTE);
        await settle();
      }
      run.unannouncedChangeAfterMin = movedTo(target) ? round((clock.now() - lostAt) / MINUTE, 0) : Number.NaN;
    }
    return run;
  } finally {
    app.poller.stop();
    app.push.stop();
    await app.stop(2_000).catch(() => {});
    await world.close();
    rmSync(world.dir, { recursive: true, force: true });
  }
}

export async function benchIdle(opts: BenchIdleOptions = {}) {
  const o: Required<BenchIdleOptions> = {
    therapists: opts.therapists ?? 4,
    appointments: opts.appointments ?? 25,
    days: opts.days ?? 2,
  };
  const push = await idleRun(true, o);
  const pollOnly = await idleRun(false, o);
  return { ...o, push, poll_only: pollOnly };
}

if (import.meta.main) {
  console.log(JSON.stringify(await benchIdle(), null, 2));
}
