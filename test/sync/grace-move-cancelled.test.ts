// A therapist moves the event to a colleague's calendar ("Change calendar"), and the move waits out its grace period
// before anything is written back; meanwhile the customer cancels in the booking service. calbridge removed the
// event from the therapist's calendar (already gone there) and the copy in its own account's calendars, but not the
// one in the colleague's calendar: the cancelled appointment stayed there as a live event for good, even after
// `calbridge reconcile --force` (its link says the event is gone). Nothing is ever cancelled from the calendar here.
import { afterEach, expect, it } from "vitest";
import { eventIdFor } from "../../src/calendar/ids.ts";
import { cancels, DAY, type Harness, liveOf, settle, twoWay } from "./support.ts";

let h: Harness | undefined;
afterEach(async () => {
  await h?.close();
  h = undefined;
});

const live = (x: Harness, id: string) =>
  x.world.therapists.flatMap((t) => liveOf(x, x.world.calendarOf(t), id).map(() => t));

for (const reassign of [true, false]) {
  it(`the copy in the colleague's calendar goes with the cancelled appointment (reassign ${reassign})`, async () => {
    h = await twoWay({ reassign, cancel_grace_seconds: 3600 });
    const start = new Date(Date.now() + 3 * DAY);
    start.setUTCHours(10, 0, 0, 0);
    const id = String(h.world.booking.create({ therapist_id: "th_1", start_time: start.toISOString() }).id);
    await settle(h);
    expect(live(h, id)).toEqual(["th_1"]);
    h.world.google.userMove(h.world.calendarOf("th_1"), eventIdFor(id), h.world.calendarOf("th_2"));
    await settle(h); // the move, read as a deletion for now, waits out its grace period
    expect(live(h, id)).toEqual(["th_2"]);
    h.world.booking.cancel(id, "customer");
    await settle(h);
    expect(h.world.booking.get(id)!.status).toBe("cancelled");
    expect(live(h, id)).toEqual([]);
    expect(cancels(h)).toBe(0); // calbridge sent none: the customer cancelled in the booking service
  });
}
