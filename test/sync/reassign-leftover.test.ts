// The booking service reassigns th_1's appointment to th_2; calbridge writes the event in th_2's calendar, but removing
// the old one from th_1's fails (a Google error), so it stays until a reconciliation. th_2 then deletes the event: they
// mean to cancel. A "deletion" is first looked for as a move to a colleague's calendar, and the old event under the
// appointment's id in th_1's calendar was taken for the moved one: with reassigning on, the appointment went back to
// th_1 (a PATCH nobody meant) instead of being cancelled; with it off, the deletion was put back with a note about
// reassigning. calbridge's own old event, unchanged since it wrote it, is now known for what it is (leftovers.ts).
import { afterEach, expect, it } from "vitest";
import { type Harness, liveOf, mirrored, settle, twoWay } from "./support.ts";

let h: Harness | undefined;
afterEach(async () => {
  await h?.close();
  h = undefined;
});

const inPath = (calendarId: string) => encodeURIComponent(calendarId).replace(/\./g, "\\.");
const writes = (x: Harness, method: string, from = 0) =>
  x.world.booking.requests.slice(from).filter((r) => r.method === method).length;

for (const reassign of [true, false]) {
  it(`a deletion beside calbridge's old event in the previous therapist's calendar cancels (reassign ${reassign})`, async () => {
    h = await twoWay({ reassign });
    const m = await mirrored(h);
    const cal2 = h.world.calendarOf("th_2");
    // Refused at once (not retried), as a 503 is after its retries.
    h.world.google.faults.next(1, {
      status: 400,
      reason: "badRequest",
      match: new RegExp(`DELETE .*/calendars/${inPath(m.cal)}/events/${m.eventId}`),
    });
    h.world.booking.reassign(m.id, "th_2", { force: true }); // the front desk gives it to th_2
    await settle(h);
    h.world.google.faults.reset();
    expect(liveOf(h, m.cal, m.id)).toHaveLength(1); // the old event stayed in th_1's calendar
    expect(liveOf(h, cal2, m.id)).toHaveLength(1);
    const sent = h.world.booking.requests.length;

    h.world.google.userDelete(cal2, m.eventId);
    await settle(h);
    expect(h.world.booking.get(m.id)).toMatchObject({ status: "cancelled", therapist_id: "th_2" });
    expect(writes(h, "PATCH", sent)).toBe(0);
    // The old event, showing a cancelled appointment, goes too.
    expect(liveOf(h, m.cal, m.id)).toEqual([]);
  });
}
