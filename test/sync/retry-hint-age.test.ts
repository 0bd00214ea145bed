// A sync that fails because the calendar is unavailable keeps the booking state it read as the retry's hint (no booking
// read per retry for hours). It was stamped with the time of the failure, not of the read: a reconciliation listing
// read after the sync's read (newer state) but before the failure merged into the retry and lost to that stale state
// (the later read wins), and the retry wrote the old times into the calendar until the next reconciliation.
import { afterEach, expect, it } from "vitest";
import type { Appointment } from "../../src/booking/schemas.ts";
import { eventIdFor } from "../../src/calendar/ids.ts";
import { ManualClock } from "../../src/clock.ts";
import { DAY, type Harness, harness } from "./support.ts";

let h: Harness | undefined;
afterEach(async () => {
  await h?.close();
  h = undefined;
});

it("a retry after an unavailable calendar does not apply a booking state older than a listing merged into it", async () => {
  const clock = new ManualClock(Date.now());
  h = await harness({
    therapists: 1,
    clock,
    engine: { maxAttempts: 5, baseMs: 1_000 },
    configure: (c) => {
      c.google = { ...c.google, quota_pause_seconds: 60 };
    },
  });
  const x = h;
  const cal = x.world.calendarOf("th_1");
  const s0 = new Date(clock.now() + 3 * DAY);
  s0.setUTCHours(10, 0, 0, 0);
  const s1 = new Date(s0.getTime() + 2 * 3_600_000); // 12:00
  const appt = x.world.booking.create({ therapist_id: "th_1", start_time: s0.toISOString() }, { force: true });
  const id = String(appt.id);

  let listed = false;
  // The sync's insert is in flight (it read the booking at 10:00) when the booking is moved to 12:00 and a
  // reconciliation lists it (readAt = now) and asks for a sync; the insert then meets Google's quotaExceeded.
  x.world.google.faults.holdNext(/^POST .*\/events$/, async () => {
    x.world.booking.move(id, s1.toISOString(), { force: true });
    const item = x.world.booking.get(id) as unknown as Appointment;
    void x.app.engine
      .syncAppointment(id, {
        reason: "reconcile",
        priority: "reconcile",
        origin: "reconcile",
        booking: { appt: item, readAt: clock.now() },
      })
      .catch(() => {});
    listed = true;
    await clock.advance(1_000); // the insert's round trip
    x.world.google.faults.next(1, { status: 403, reason: "quotaExceeded", match: /^POST .*\/events$/ });
  });
  void x.app.engine
    .syncAppointment(id, { reason: "appointment.created", priority: "webhook", origin: "booking" })
    .catch(() => {});

  // Time passes: the quota pause (60 s) ends and the retries go through.
  for (let i = 0; i < 120 && !x.world.google.event(cal, eventIdFor(id)); i++) {
    await clock.advance(5_000);
    await new Promise((r) => setTimeout(r, 10));
    await x.app.engine.idle();
  }
  expect(listed).toBe(true);
  const event = x.world.google.event(cal, eventIdFor(id)) as { start?: { dateTime?: string } } | undefined;
  expect(event).toBeDefined();
  expect(new Date(x.world.booking.get(id)!.start_time as string).getTime()).toBe(s1.getTime());
  // The newer listing's 12:00, not the 10:00 read before the move.
  expect(new Date(event!.start!.dateTime!).getTime()).toBe(s1.getTime());
});
