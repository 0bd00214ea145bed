// Tests that a therapist's text typed into an event's description is quoted whenever calbridge writes over it, also
// when something else changed at the same time (review24). It was quoted only when nothing else had changed: a booking
// rescheduled meanwhile, a move of theirs undone (rescheduling from the calendar off) or written back to the booking,
// each rewrote the description without a quote, so a note typed in the same save as a drag vanished unseen.
import { afterEach, expect, it } from "vitest";
import { eventIdFor } from "../../src/calendar/ids.ts";
import { DAY, daemonHarness, type Harness, mirrored, pollAll, quiet, settle, twoWay } from "./support.ts";

let h: Harness | undefined;
afterEach(async () => {
  await h?.close();
  h = undefined;
});

const QUOTED = "The text you added: “session 3: left shoulder, refer to GP”";

it("a note typed while the booking was rescheduled is quoted", async () => {
  h = await daemonHarness({ therapists: 1 });
  const start = new Date(Date.now() + 3 * DAY);
  start.setUTCHours(10, 0, 0, 0);
  const appt = h.world.booking.create({ therapist_id: "th_1", start_time: start.toISOString() }, { force: true });
  await settle(h);
  const id = String(appt.id);
  const cal = h.world.calendarOf("th_1");
  const eventId = eventIdFor(id);
  const desc = () => String(h!.world.google.event(cal, eventId)!.description);
  h.world.google.userEdit(cal, eventId, { description: `${desc()}\nsession 3: left shoulder, refer to GP` });
  h.world.booking.move(id, start.getTime() + 2 * 3_600_000);
  await quiet(h);
  await pollAll(h);
  await settle(h);
  expect(desc()).toContain(QUOTED);
  const moved = h.world.google.event(cal, eventId)!.start as { dateTime: string };
  expect(Date.parse(moved.dateTime)).toBe(start.getTime() + 2 * 3_600_000);
});

it("the booking rescheduled while the therapist changed only the colour: rewritten without a note, as before", async () => {
  h = await daemonHarness({ therapists: 1 });
  const m = await mirrored(h);
  h.world.google.userEdit(m.cal, m.eventId, { colorId: "5" });
  h.world.booking.move(m.id, m.start + 2 * 3_600_000);
  await quiet(h);
  await pollAll(h);
  await settle(h);
  expect(String(h.world.google.event(m.cal, m.eventId)!.description)).not.toContain("calbridge:");
});

for (const reschedule of [true, false]) {
  it(`a move saved together with a typed note (reschedule ${reschedule}): the note is quoted`, async () => {
    h = await twoWay({ reschedule });
    const m = await mirrored(h);
    const ev = () => h!.world.google.event(m.cal, m.eventId)!;
    const at = (ms: number) => ({ dateTime: new Date(ms).toISOString() });
    h.world.google.userEdit(m.cal, m.eventId, {
      description: `${String(ev().description)}\nsession 3: left shoulder, refer to GP`,
      start: at(m.start + 2 * 3_600_000),
      end: at(m.start + 3 * 3_600_000),
    });
    await pollAll(h);
    await settle(h);
    await settle(h);
    expect(String(ev().description)).toContain(QUOTED);
    const booked = Date.parse(String(h.world.booking.get(m.id)!.start_time));
    expect(booked).toBe(reschedule ? m.start + 2 * 3_600_000 : m.start);
    expect((await h.app.sync.links.get(m.id))?.notice?.text).toContain("left shoulder");
  });
}

it("a move the booking service refuses, saved together with a typed note: the note is quoted in the refusal's", async () => {
  h = await twoWay({ reschedule: true });
  const m = await mirrored(h);
  const ev = () => h!.world.google.event(m.cal, m.eventId)!;
  const at = (ms: number) => ({ dateTime: new Date(ms).toISOString() });
  h.world.booking.faults.refuseNext(1, "slot_unavailable", { match: { method: "PATCH" } });
  h.world.google.userEdit(m.cal, m.eventId, {
    description: `${String(ev().description)}\nsession 3: left shoulder, refer to GP`,
    start: at(m.start + 2 * 3_600_000),
    end: at(m.start + 3 * 3_600_000),
  });
  await pollAll(h);
  await settle(h);
  await settle(h);
  expect(String(ev().description)).toMatch(/not applied: the booking service refused it/);
  expect(String(ev().description)).toContain(QUOTED);
  expect(Date.parse(String(h.world.booking.get(m.id)!.start_time))).toBe(m.start);
});
