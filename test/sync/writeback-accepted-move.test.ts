// A move the booking service took, whose Google update after the PATCH was given up by a stop (a deploy; equally a
// failed write or a crash before the link was saved): the link still holds the old booking and the old event time, so
// the booking's webhook for the PATCH itself, replayed after the restart, finds both sides changed. They agree (the
// event is at the booking's new time): no conflict. The event used to say "your change to this event was undone", a
// falsehood (the move was applied); under calendar_wins the move could be written back a second time.
import { afterEach, expect, it } from "vitest";
import { eventIdFor } from "../../src/calendar/ids.ts";
import { ManualClock } from "../../src/clock.ts";
import { type App, createApp } from "../../src/daemon/app.ts";
import { silentLogger } from "../../src/log.ts";
import { waitFor } from "../support/wait-for.ts";
import { DAY, daemonHarness, type Harness, liveOf } from "./support.ts";

let h: Harness | undefined;
let next: App | undefined;
afterEach(async () => {
  await next?.stop(2000).catch(() => {});
  next = undefined;
  await h?.close();
  h = undefined;
});

async function quiet(x: Harness, app: App) {
  for (let i = 0; i < 2; i++) {
    await x.world.booking.webhooksIdle();
    await app.processor.idle();
    await app.engine.idle();
  }
}

async function pollAll(x: Harness, app: App) {
  for (const t of x.world.therapists) if (app.sync.mapping.calendarIfAny(t)) await app.poller.poll(t);
  await quiet(x, app);
}

async function pass(x: Harness, app: App, clock: ManualClock, ms: number, step: number) {
  for (let t = 0; t < ms; t += step) {
    await clock.advance(step);
    await quiet(x, app);
  }
}

const patches = (x: Harness) => x.world.booking.requests.filter((r) => r.method === "PATCH").length;
const cancels = (x: Harness) => x.world.booking.requests.filter((r) => r.route.endsWith("/cancel")).length;
const waits = async (app: App) => {
  const metric = await app.registry.getSingleMetric("calbridge_google_quota_waits_total")?.get();
  return (metric?.values ?? []).reduce((n, v) => n + v.value, 0);
};
const at = (ms: number) => ({
  start: { dateTime: new Date(ms).toISOString() },
  end: { dateTime: new Date(ms + 3_600_000).toISOString() },
});
const startOf = (e: Record<string, unknown> | undefined) =>
  Date.parse(String((e?.start as { dateTime: string } | undefined)?.dateTime));

it.each(["booking_wins", "calendar_wins"] as const)(
  "%s: a move taken by the booking service, its Google update given up by a stop: no 'undone' note, nothing sent again",
  async (conflict) => {
    const clock = new ManualClock(Date.now());
    const x = await daemonHarness({
      therapists: 2,
      clock,
      configure: (c) => {
        c.google.quota = { user_per_minute: 600, project_per_minute: 1_000 };
        c.sync = { ...c.sync, conflict } as typeof c.sync;
        // The description shows the time, so the move taken needs an update of the event after the PATCH. A drag
        // keeps the event's zone (the emulator's userEdit, as Google's UI): the event is otherwise as calbridge
        // writes it, and needs none.
        c.event = { ...c.event, description: "Booking {id} at {start_local}" };
      },
    });
    h = x;
    const startAt = new Date(clock.now() + 2 * DAY);
    startAt.setUTCHours(9, 0, 0, 0);
    const a = String(
      x.world.booking.create({ therapist_id: "th_1", start_time: startAt.toISOString() }, { force: true }).id,
    );
    await quiet(x, x.app);
    await x.app.reconcile();
    await pollAll(x, x.app);
    await pass(x, x.app, clock, 65_000, 5_000); // th_1's quota minute is free again
    const cal = x.world.calendarOf("th_1");
    const evId = eventIdFor(a);
    const moved = startOf(x.world.google.event(cal, evId)) + 2 * 3_600_000;

    x.world.google.userEdit(cal, evId, at(moved));
    await pollAll(x, x.app);
    // Google answers the event update after the PATCH rateLimitExceeded: its retry waits at the quota gate.
    x.world.google.faults.next(1, { status: 403, reason: "rateLimitExceeded", match: /^(PATCH|PUT) .*th_1/ });
    // Bounded in real time as well as in clock time: under load the clock runs on while a request is in flight.
    const end = Date.now() + 20_000;
    for (let t = 0; (t < 60_000 || Date.now() < end) && patches(x) === 0; t += 1_000) {
      await clock.advance(1_000);
      await new Promise((r) => setTimeout(r, 20));
    }
    // The PATCH's answer, then Google's refusal of the update: two round trips, waited for with the clock still.
    await waitFor("the Google update to wait at the gate", async () => (await waits(x.app)) > 0, 10_000);
    expect(patches(x), "the move was written back").toBe(1);
    expect(await waits(x.app), "the Google update after it waits at the gate").toBeGreaterThan(0);
    await x.app.stop(2_000); // gives the update up: the link still holds the old booking and the old time

    await clock.advance(65_000);
    next = await createApp(x.world.config, {
      clock,
      logger: silentLogger,
      listen: "127.0.0.1:0",
      adminListen: "127.0.0.1:0",
    });
    await next.start();
    await new Promise((r) => setTimeout(r, 300));
    await quiet(x, next);
    await next.reconcile();
    await pollAll(x, next);
    await pass(x, next, clock, 120_000, 5_000); // past any grace period
    await pollAll(x, next);

    expect(patches(x), "no second PATCH").toBe(1);
    expect(cancels(x)).toBe(0);
    expect(Date.parse(String(x.world.booking.get(a)?.start_time))).toBe(moved);
    const ev = x.world.google.event(cal, evId);
    expect(liveOf(x, cal, a).length, "one event for the appointment").toBe(1);
    expect(ev?.status).toBe("confirmed");
    expect(startOf(ev), "the event shows the booking's (new) time").toBe(moved);
    expect(String(ev?.description ?? ""), "the move was applied: no note saying it was undone").not.toMatch(
      /was undone|was not applied/,
    );
    expect(await next.sync.pendingWritebacks.all()).toEqual([]);
  },
  90_000,
);
