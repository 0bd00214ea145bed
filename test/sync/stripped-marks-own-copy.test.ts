// Two rules meet: every restore of a deleted event removes the copy the therapist moved to a calendar of their own,
// and an event under calbridge's id without calbridge's marks (another client's full update stripped them) is still
// the appointment's. A therapist whose client stripped the marks (Thunderbird dismissing a reminder) moves the event to
// their Private calendar with cancelling from the calendar turned off: the event is put back in the mapped calendar,
// and the unmarked copy in the Private calendar must not stay live beside it.
import { afterEach, expect, it } from "vitest";
import { eventIdFor } from "../../src/calendar/ids.ts";
import { ManualClock } from "../../src/clock.ts";
import { cancels, DAY, daemonHarness, type Harness, pass, quiet } from "./support.ts";

let h: Harness | undefined;
afterEach(async () => {
  await h?.close();
  h = undefined;
});

const PRIVATE = "th1private@group.calendar.google.com";

it("cancel off, marks stripped, event moved to the Private calendar: put back, and no second live copy stays there", async () => {
  const clock = new ManualClock(Date.now());
  h = await daemonHarness({
    therapists: 2,
    clock,
    configure: (c) => {
      c.sync = { ...c.sync, writeback: { cancel_grace_seconds: 60, cancel: false } };
    },
  });
  h.world.google.createCalendar(PRIVATE, "th_1@clinic.test", { summary: "Private", timeZone: "Europe/Berlin" });
  const start = new Date(clock.now() + 3 * DAY);
  start.setUTCHours(10, 0, 0, 0);
  const id = String(
    h.world.booking.create({ therapist_id: "th_1", start_time: start.toISOString() }, { force: true }).id,
  );
  await quiet(h);
  await h.app.poller.poll("th_1");
  await quiet(h);
  const cal = h.world.calendarOf("th_1");
  const eventId = eventIdFor(id);
  // Another client's full update (a PUT) stripped the marks; the therapist then moved the event to "Private".
  h.world.google.userEdit(cal, eventId, {
    extendedProperties: {
      private: { calbridge_appointment_id: null, calbridge_managed: null, "X-MOZ-LASTACK": "20260101T000000Z" },
    },
  });
  h.world.google.userMove(cal, eventId, PRIVATE);
  await h.app.poller.poll("th_1");
  await quiet(h);
  await pass(h, clock, 10_000);
  const live = (c: string) => h!.world.google.events(c).filter((e) => e.status !== "cancelled").length;
  expect({
    booking: h.world.booking.get(id)!.status,
    cancels: cancels(h),
    liveInMapped: live(cal),
    liveInPrivate: live(PRIVATE),
  }).toEqual({ booking: "confirmed", cancels: 0, liveInMapped: 1, liveInPrivate: 0 });
});
