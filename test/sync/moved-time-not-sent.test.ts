// A therapist changes the event's time and moves it to another calendar in one save of Google's editor. Where the move
// is undone (to a calendar of their own account: moved back; to a colleague's with reassigning off: put back), the
// event comes back at the booking's time, and the new time is not sent with a move. It was dropped without a word, the
// note saying only that the event was moved back, and the therapist took the appointment for rescheduled.
import { afterEach, expect, it } from "vitest";
import { cancels, daemonHarness, type Harness, liveOf, mirrored, settle, twoWay } from "./support.ts";

const HOUR = 3_600_000;
const NOT_SENT = "The new time saved with the move was not sent: move the event here to reschedule.";
const at = (ms: number) => ({
  start: { dateTime: new Date(ms).toISOString() },
  end: { dateTime: new Date(ms + HOUR).toISOString() },
});

let h: Harness | undefined;
afterEach(async () => {
  await h?.close();
  h = undefined;
});

async function movedWithNewTime(x: Harness, to: string) {
  const m = await mirrored(x);
  x.world.google.userEdit(m.cal, m.eventId, at(m.start + 2 * HOUR));
  x.world.google.userMove(m.cal, m.eventId, to);
  await settle(x);
  const [event] = liveOf(x, m.cal, m.id);
  return { m, event, booked: Date.parse(String(x.world.booking.get(m.id)!.start_time)) };
}

it("moved to a calendar of the therapist's own account: back at the booking's time, saying the new time was not sent", async () => {
  h = await daemonHarness({
    therapists: 2,
    configure: (c) => {
      c.sync = { ...c.sync, writeback: { cancel_grace_seconds: 0, reschedule_grace_seconds: 0 } };
    },
  });
  const own = "th1private@group.calendar.google.com";
  h.world.google.createCalendar(own, h.world.calendarOf("th_1"), { summary: "Private", timeZone: "Europe/Berlin" });
  const { m, event, booked } = await movedWithNewTime(h, own);
  expect(booked).toBe(m.start);
  expect(String(event?.description)).toContain(NOT_SENT);
  expect(cancels(h)).toBe(0);
});

it("moved to a colleague's calendar with reassigning off: put back, saying the new time was not sent", async () => {
  h = await twoWay({ reassign: false });
  const { m, event, booked } = await movedWithNewTime(h, h.world.calendarOf("th_2"));
  expect(booked).toBe(m.start);
  expect(String(event?.description)).toContain(NOT_SENT);
  expect(cancels(h)).toBe(0);
});

it("a move alone says nothing of a time", async () => {
  h = await twoWay({ reassign: false });
  const m = await mirrored(h);
  h.world.google.userMove(m.cal, m.eventId, h.world.calendarOf("th_2"));
  await settle(h);
  const [event] = liveOf(h, m.cal, m.id);
  expect(String(event?.description)).toContain("writeback.reassign is off");
  expect(String(event?.description)).not.toContain("new time");
});
