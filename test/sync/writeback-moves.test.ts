// Moves written back while something else happens to the event: a new time saved together with "Change calendar",
// and a move made while the write-back of the one before is on its way and refused.
import { afterEach, expect, it } from "vitest";
import { eventIdFor } from "../../src/calendar/ids.ts";
import { ManualClock } from "../../src/clock.ts";
import {
  DAY,
  daemonHarness,
  type Harness,
  iso,
  liveOf,
  mirrored,
  pass,
  pollAll,
  quiet,
  settle,
  twoWay,
} from "./support.ts";

let h: Harness | undefined;
afterEach(async () => {
  await h?.close();
  h = undefined;
});

const HOUR = 3_600_000;

/** A running daemon with two therapists and no grace periods (these tests are about what is sent, not when). */
const at = (ms: number) => ({ start: { dateTime: iso(ms) }, end: { dateTime: iso(ms + HOUR) } });
const startOf = (ev: Record<string, unknown> | undefined) =>
  Date.parse(String((ev?.start as { dateTime?: string } | undefined)?.dateTime));
const patches = (x: Harness) => x.world.booking.requests.filter((r) => r.method === "PATCH").length;

it("a new time saved together with 'Change calendar' is sent with the reassignment, in one PATCH", async () => {
  h = await twoWay({ reassign: true });
  const m = await mirrored(h);
  // One save in Google's event editor: a new time and another therapist's calendar.
  h.world.google.userEdit(m.cal, m.eventId, at(m.start + 2 * HOUR));
  h.world.google.userMove(m.cal, m.eventId, h.world.calendarOf("th_2"));
  await settle(h);
  const appt = h.world.booking.get(m.id)!;
  expect({ therapist: appt.therapist_id, start: Date.parse(String(appt.start_time)), patches: patches(h) }).toEqual({
    therapist: "th_2",
    start: m.start + 2 * HOUR,
    patches: 1,
  });
  const [ev] = liveOf(h, h.world.calendarOf("th_2"), m.id);
  expect(startOf(ev)).toBe(m.start + 2 * HOUR);
  expect(String(ev?.description ?? "")).not.toContain("calbridge:");
  expect(liveOf(h, m.cal, m.id)).toHaveLength(0);
});

it("with rescheduling from the calendar off, the reassignment is sent and the new time put back with a note", async () => {
  h = await twoWay({ reassign: true, reschedule: false });
  const m = await mirrored(h);
  h.world.google.userEdit(m.cal, m.eventId, at(m.start + 2 * HOUR));
  h.world.google.userMove(m.cal, m.eventId, h.world.calendarOf("th_2"));
  await settle(h);
  const appt = h.world.booking.get(m.id)!;
  expect({ therapist: appt.therapist_id, start: Date.parse(String(appt.start_time)) }).toEqual({
    therapist: "th_2",
    start: m.start,
  });
  const [ev] = liveOf(h, h.world.calendarOf("th_2"), m.id);
  expect(startOf(ev)).toBe(m.start);
  expect(String(ev?.description)).toContain("your new time was not sent: rescheduling from the calendar is turned off");
});

it("a move made while the previous move's PATCH is on its way and refused is not overwritten, but sent", async () => {
  h = await twoWay();
  const m = await mirrored(h);
  // The booking service refuses B; while that PATCH is on its way, the therapist drags the event on to C.
  h.world.booking.faults.refuseNext(1, "slot_unavailable", {
    match: {
      method: "PATCH",
      path: `/v1/appointments/${m.id}`,
      when: () => {
        h!.world.google.userEdit(m.cal, m.eventId, at(m.start + 4 * HOUR));
        return true;
      },
    },
  });
  h.world.google.userEdit(m.cal, m.eventId, at(m.start + 2 * HOUR)); // B
  await settle(h);
  expect({ patches: patches(h), booked: Date.parse(String(h.world.booking.get(m.id)!.start_time)) }).toEqual({
    patches: 2,
    booked: m.start + 4 * HOUR,
  });
  expect(startOf(h.world.google.event(m.cal, m.eventId))).toBe(m.start + 4 * HOUR);
});

it("with calendar_wins, a move waiting its grace when the booking service reassigns the appointment: the event goes to the new therapist at once, nothing sent", async () => {
  const clock = new ManualClock(Date.now());
  const x = await daemonHarness({
    therapists: 2,
    clock,
    configure: (c) => {
      c.sync = { ...c.sync, conflict: "calendar_wins", writeback: { reschedule_grace_seconds: 30 } };
    },
  });
  h = x;
  const start = new Date(clock.now() + 3 * DAY);
  start.setUTCHours(10, 0, 0, 0);
  const id = String(
    x.world.booking.create({ therapist_id: "th_1", start_time: start.toISOString() }, { force: true }).id,
  );
  await quiet(x);
  await x.app.reconcile();
  await pollAll(x);
  const [cal1, cal2] = [x.world.calendarOf("th_1"), x.world.calendarOf("th_2")];
  x.world.google.userEdit(cal1, eventIdFor(id), at(start.getTime() + 2 * HOUR)); // th_1 drags it
  await pollAll(x);
  await pass(x, clock, 10_000);
  x.world.booking.reassign(id, "th_2", { force: true }); // the front desk gives it to th_2 (webhook delivered)
  await pass(x, clock, 60_000);
  await pollAll(x);
  // Not th_1's to move any more: no PATCH, and the event is in th_2's calendar at the booking's time now, not left in
  // th_1's until the next reconciliation.
  expect(patches(x)).toBe(0);
  expect(liveOf(x, cal1, id)).toEqual([]);
  expect(liveOf(x, cal2, id).map(startOf)).toEqual([start.getTime()]);
});
