// The look-up a reconciliation sends for an event missing from its calendar's listing (here: one the therapist
// deleted) can fail. A failure leaves that calendar (quota, credentials) or that appointment (anything else) alone this
// run; it never stops the run for the other therapists, and is never read as "the event is gone".
import { afterEach, describe, expect, it } from "vitest";
import { eventIdFor } from "../../src/calendar/ids.ts";
import { ManualClock } from "../../src/clock.ts";
import { captureLog } from "../support/log-capture.ts";
import { cancels, DAY, type Harness, harness } from "./support.ts";

let h: Harness | undefined;
afterEach(async () => {
  await h?.close();
  h = undefined;
});

/** Two therapists, one appointment of th_1 mirrored, then deleted by the therapist, then a booking of th_2 whose
 * webhook was lost (the reconciliation is its only way into the calendar). */
async function deletedAndLost(x: Harness, now: number) {
  const sim = x.world.booking;
  const start = (d: number) => {
    const s = new Date(now + d * DAY);
    s.setUTCHours(10, 0, 0, 0);
    return s.toISOString();
  };
  const a = String(sim.create({ therapist_id: "th_1", start_time: start(3) }, { force: true }).id);
  expect((await x.app.reconcile()).ok).toBe(true);
  const cal1 = x.world.calendarOf("th_1");
  x.world.google.userDelete(cal1, eventIdFor(a));
  const b = String(sim.create({ therapist_id: "th_2", start_time: start(4) }, { force: true }).id);
  const c = String(sim.create({ therapist_id: "th_1", start_time: start(5) }, { force: true }).id);
  const lookUp = new RegExp(`^GET .*/events/${eventIdFor(a)}$`);
  return { a, b, c, cal1, cal2: x.world.calendarOf("th_2"), lookUp, start };
}

describe("a failed look-up of an event missing from its calendar's listing", () => {
  it("quotaExceeded: that therapist's calendar is left alone this run, the others are repaired", async () => {
    const log = captureLog("info");
    h = await harness({
      therapists: 2,
      logger: log.logger,
      configure: (c) => {
        c.sync = { ...c.sync, calendar_full_listing_hours: 0 };
      },
    });
    const { a, b, c, cal1, cal2, lookUp } = await deletedAndLost(h, Date.now());
    h.world.google.faults.next(1, { status: 403, reason: "quotaExceeded", match: lookUp });

    const report = await h.app.reconcile();
    expect(h.world.google.faults.pending).toBe(0);
    expect(h.world.google.event(cal2, eventIdFor(b))?.status, "th_2's booking is mirrored").toBe("confirmed");
    expect(Object.keys(report.calendarErrors)).toEqual(["th_1"]);
    expect(report.waitingForCalendar).toBe(2); // a and c wait for th_1's calendar
    expect(report.ok).toBe(false);
    // Nothing read from the failed look-up: no cancellation, no event made again, nothing new in th_1's calendar.
    expect(cancels(h)).toBe(0);
    expect(h.world.booking.get(a)?.status).not.toBe("cancelled");
    expect(h.world.google.event(cal1, eventIdFor(a))?.status).toBe("cancelled");
    expect(h.world.google.event(cal1, eventIdFor(c))).toBeUndefined();
    expect(report.plan.map((p) => p.appointmentId)).toEqual([b]);
    expect(log.find((l) => l.msg === "calendar could not be read; left alone this run")).toMatchObject({
      therapist_id: "th_1",
    });
  });

  it("a 503 through every try: that appointment alone is left for the next run, its calendar is still repaired", async () => {
    const log = captureLog("info");
    const clock = new ManualClock(Date.now());
    h = await harness({
      therapists: 2,
      clock,
      logger: log.logger,
      configure: (c) => {
        c.sync = { ...c.sync, calendar_full_listing_hours: 0 };
      },
    });
    const { a, b, c, cal1, cal2, lookUp } = await deletedAndLost(h, clock.now());
    // Every try of the runner (6) is answered 503; its backoff sleeps on the manual clock.
    h.world.google.faults.next(6, { status: 503, reason: "backendError", match: lookUp });

    const run = h.app.reconcile();
    const end = Date.now() + 20_000; // real time, not 200 steps (the clock runs on while HTTP is in flight)
    while (h.world.google.faults.pending > 0 && Date.now() < end) {
      await clock.advance(1_000);
      await new Promise((r) => setTimeout(r, 5));
    }
    const report = await run;
    expect(h.world.google.faults.pending).toBe(0);
    expect(h.world.google.event(cal2, eventIdFor(b))?.status, "th_2's booking is mirrored").toBe("confirmed");
    expect(h.world.google.event(cal1, eventIdFor(c))?.status, "th_1's new booking is mirrored").toBe("confirmed");
    expect(report.failed).toBe(1);
    expect(report.calendarErrors).toEqual({});
    expect(report.plan.map((p) => p.appointmentId)).not.toContain(a);
    expect(cancels(h)).toBe(0);
    expect(h.world.booking.get(a)?.status).not.toBe("cancelled");
    expect(h.world.google.event(cal1, eventIdFor(a))?.status, "not made again").toBe("cancelled");
    const failures = log.lines.filter((l) => l.appointment_id === a && l.level === 50);
    expect(failures).toHaveLength(1);
    expect(failures[0]).toMatchObject({ therapist_id: "th_1", event_id: eventIdFor(a) });
    // Ids and the error only: nothing of the customer.
    expect(Object.keys(failures[0]!).sort()).toEqual(
      ["appointment_id", "component", "err", "event_id", "level", "msg", "name", "therapist_id", "time"].sort(),
    );

    // The next run looks again and decides as for any deleted event.
    const again = await h.app.reconcile({ dryRun: true });
    expect(again.failed).toBe(0);
    expect(again.plan.find((p) => p.appointmentId === a)?.kind).toBe("writeback_cancel");
  });
});
