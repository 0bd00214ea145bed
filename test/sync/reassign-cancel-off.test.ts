// writeback.reassign on with writeback.cancel off: a clinic that lets therapists hand appointments over by moving the
// event to a colleague's calendar, but never cancel from the calendar. A "Change calendar" reads as a deletion in the
// therapist's calendar, and with cancelling off a deletion was put back at once, before the colleague's calendar was
// looked at: the move was undone (its copy there removed) with a note that cancelling is off, and nothing reassigned.
// The move is now looked for as when cancelling is on; a real deletion is still put back, and nothing is cancelled.
import { afterEach, expect, it } from "vitest";
import { historyCommand } from "../../src/cli/history.ts";
import { cancels, type Harness, liveOf, mirrored, settle, twoWay } from "./support.ts";

let h: Harness | undefined;
afterEach(async () => {
  await h?.close();
  h = undefined;
});

const live = (x: Harness, id: string) =>
  x.world.therapists.flatMap((t) => liveOf(x, x.world.calendarOf(t), id).map((e) => ({ t, note: e.description })));

it("a move to a colleague's calendar reassigns the appointment", async () => {
  h = await twoWay({ reassign: true, cancel: false });
  const m = await mirrored(h);
  h.world.google.userMove(m.cal, m.eventId, h.world.calendarOf("th_2"));
  await settle(h);
  expect(h.world.booking.get(m.id)!.therapist_id).toBe("th_2");
  const events = live(h, m.id);
  expect(events.map((e) => e.t)).toEqual(["th_2"]);
  expect(String(events[0]!.note)).not.toContain("undone");
  expect(cancels(h)).toBe(0);
});

it("a deletion is put back, saying that cancelling from the calendar is off; nothing is cancelled", async () => {
  h = await twoWay({ reassign: true, cancel: false });
  const m = await mirrored(h);
  h.world.google.userDelete(m.cal, m.eventId);
  await settle(h);
  expect(h.world.booking.get(m.id)).toMatchObject({ therapist_id: "th_1", status: "confirmed" });
  const events = live(h, m.id);
  expect(events.map((e) => e.t)).toEqual(["th_1"]);
  expect(String(events[0]!.note)).toContain("cancelling from the calendar is turned off");
  expect(cancels(h)).toBe(0);
  // The history tells a deletion not sent, not a move to a colleague.
  await h.app.sync.history.log.flush();
  const history = (await historyCommand(h.world.config, m.id, false)).output;
  expect(history).toContain("the cancellation is not sent; the event is put back (event deleted in the calendar)");
  expect(history).not.toContain("reassigning");
});
