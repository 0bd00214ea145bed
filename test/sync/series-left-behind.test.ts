// A therapist makes the appointment's event weekly, splits it ("This and following events": Google makes a series
// <id>_R<time> that keeps calbridge's marks) or moves one occurrence on its own, then deletes or moves the event.
// calbridge removed what the series left only when the event in hand was a live series: an event put back (its
// deletion not written back: cancelling from the calendar off, or a move to a colleague's calendar with reassigning
// off) and a reassignment from the calendar left the split-off series, or the moved occurrence, showing the customer's
// appointment weekly for good beside the one event. An appointment is one event: they go.
import { afterEach, expect, it } from "vitest";
import { basicUtc } from "../../src/simulator/calendar/recurrence.ts";
import { DAY, type Harness, iso, liveOf, mirrored, pollAll, settle, twoWay } from "./support.ts";

const HOUR = 3_600_000;
let h: Harness | undefined;
afterEach(async () => {
  await h?.close();
  h = undefined;
});
const ids = (x: Harness, cal: string, id: string) =>
  liveOf(x, cal, id)
    .map((e) => String(e.id))
    .sort();

it("writeback.cancel off: the deleted first part is put back, and the series split off it goes", async () => {
  h = await twoWay({ cancel: false });
  const m = await mirrored(h);
  h.world.google.userEdit(m.cal, m.eventId, { recurrence: ["RRULE:FREQ=WEEKLY;COUNT=6"] });
  const tail = String(h.world.google.userSplitSeries(m.cal, m.eventId, m.start + 14 * DAY, {}).id);
  h.world.google.userDelete(m.cal, m.eventId);
  await settle(h);
  await h.app.reconcile();
  await pollAll(h);
  expect(h.world.booking.get(m.id)!.status).toBe("confirmed");
  const live = ids(h, m.cal, m.id);
  expect(live).toHaveLength(1); // the restored event (possibly under the next generation of the id)
  expect(live).not.toContain(tail);
});

it("reassign off, the first part moved to a colleague's calendar: put back, and the series split off it goes", async () => {
  h = await twoWay({ reassign: false });
  const m = await mirrored(h);
  h.world.google.userEdit(m.cal, m.eventId, { recurrence: ["RRULE:FREQ=WEEKLY;COUNT=6"] });
  const tail = String(h.world.google.userSplitSeries(m.cal, m.eventId, m.start + 14 * DAY, {}).id);
  h.world.google.userMove(m.cal, m.eventId, h.world.calendarOf("th_2"));
  await settle(h);
  await h.app.reconcile();
  await pollAll(h);
  expect(h.world.booking.get(m.id)).toMatchObject({ status: "confirmed", therapist_id: "th_1" });
  const live = ids(h, m.cal, m.id);
  expect(live).toHaveLength(1);
  expect(live).not.toContain(tail);
});

it("a reassignment from the calendar removes the series split off the event in the old therapist's calendar", async () => {
  h = await twoWay({ reassign: true });
  const m = await mirrored(h);
  h.world.google.userEdit(m.cal, m.eventId, { recurrence: ["RRULE:FREQ=WEEKLY;COUNT=6"] });
  const tail = String(h.world.google.userSplitSeries(m.cal, m.eventId, m.start + 14 * DAY, {}).id);
  const cal2 = h.world.calendarOf("th_2");
  h.world.google.userMove(m.cal, m.eventId, cal2);
  await settle(h);
  await h.app.reconcile();
  await pollAll(h);
  expect(h.world.booking.get(m.id)!.therapist_id).toBe("th_2");
  expect(h.world.google.event(cal2, m.eventId)!.recurrence ?? []).toEqual([]); // made single in th_2's calendar
  // The booking is cancelled later: nothing of the appointment is left in either calendar.
  h.world.booking.cancel(m.id, "customer ill");
  await settle(h);
  expect(ids(h, cal2, m.id)).toEqual([]);
  expect(h.world.google.event(m.cal, tail)!.status).toBe("cancelled");
});

it("a reassignment removes an occurrence moved on its own beside the event in the colleague's calendar", async () => {
  h = await twoWay({ reassign: true });
  const m = await mirrored(h);
  h.world.google.userEdit(m.cal, m.eventId, { recurrence: ["RRULE:FREQ=WEEKLY;COUNT=4"] });
  const occ = `${m.eventId}_${basicUtc(m.start + 7 * DAY)}`;
  h.world.google.userEdit(m.cal, occ, {
    start: { dateTime: iso(m.start + 7 * DAY + HOUR) },
    end: { dateTime: iso(m.start + 7 * DAY + 2 * HOUR) },
  });
  const cal2 = h.world.calendarOf("th_2");
  h.world.google.userMove(m.cal, m.eventId, cal2);
  await settle(h);
  expect(h.world.booking.get(m.id)!.therapist_id).toBe("th_2");
  expect(h.world.google.event(cal2, m.eventId)!.recurrence ?? []).toEqual([]);
  // As when the event is made single in its own calendar (test/sync/series-tail.test.ts).
  expect(ids(h, cal2, m.id)).toEqual([m.eventId]);
});
