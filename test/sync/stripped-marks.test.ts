// calbridge's marks (the private extended properties calbridge_appointment_id and calbridge_managed) stripped from its
// event by another client's full update: events.update is a PUT that replaces the event's extended properties
// wholesale, as Thunderbird's Provider for Google Calendar did on dismissing a reminder (kewisch/gdata-provider #747,
// keeping only its own X-MOZ-LASTACK). calbridge owns the marks (README, "What calbridge owns in an event"): a poll or
// a reconciliation puts them back, and an event without them under calbridge's own id is still the appointment's
// (a "Change calendar" to a colleague is no cancellation). `calbridge purge` of such an event: test/cli/purge.test.ts.
import { afterEach, expect, it } from "vitest";
import { cancels, type Harness, mirrored, settle, twoWay } from "./support.ts";

let h: Harness | undefined;
afterEach(async () => {
  await h?.close();
  h = undefined;
});

/** What the other client's PUT left: its own private property only (same times, same text). */
const strip = (x: Harness, cal: string, eventId: string) =>
  x.world.google.userEdit(cal, eventId, {
    extendedProperties: {
      private: { calbridge_appointment_id: null, calbridge_managed: null, "X-MOZ-LASTACK": "20260101T000000Z" },
    },
  });

const privateOf = (x: Harness, cal: string, eventId: string) =>
  (x.world.google.event(cal, eventId)?.extendedProperties as { private?: Record<string, string> } | undefined)?.private;
const bookingWrites = (x: Harness) => x.world.booking.requests.filter((r) => r.method !== "GET").length;

it("a poll puts the marks another client's full update stripped back, keeping that client's own property", async () => {
  h = await twoWay();
  const m = await mirrored(h);
  const before = bookingWrites(h);
  strip(h, m.cal, m.eventId);
  await settle(h);
  expect(privateOf(h, m.cal, m.eventId)).toEqual({
    calbridge_appointment_id: m.id,
    calbridge_managed: "1",
    calbridge_times: expect.stringMatching(/^\S+Z\/\S+Z@/), // the times of the write that put them back
    "X-MOZ-LASTACK": "20260101T000000Z",
  });
  expect(bookingWrites(h)).toBe(before);
  // Put back once: the next poll and reconciliation see calbridge's own write, and write nothing.
  const writes = h.writes();
  await settle(h);
  await h.app.reconcile();
  expect(h.writes()).toBe(writes);
});

it("a reconciliation puts them back (the listing by the mark misses the event; its look-up finds it)", async () => {
  h = await twoWay();
  const m = await mirrored(h);
  strip(h, m.cal, m.eventId);
  await h.app.reconcile();
  expect(privateOf(h, m.cal, m.eventId)).toMatchObject({ calbridge_appointment_id: m.id, calbridge_managed: "1" });
});

it("an event adopted without its marks (its link has the event's etag) gets them back at the next reconciliation", async () => {
  h = await twoWay();
  const m = await mirrored(h);
  strip(h, m.cal, m.eventId);
  // What an earlier version left: the stripped event taken for calbridge's own ("calendar already matches").
  const link = (await h.app.sync.links.get(m.id))!;
  await h.app.sync.links.save({ ...link, etag: String(h.world.google.event(m.cal, m.eventId)?.etag) });
  await h.app.reconcile();
  expect(privateOf(h, m.cal, m.eventId)).toMatchObject({ calbridge_appointment_id: m.id, calbridge_managed: "1" });
});

it("'Change calendar' to a colleague right after the marks were stripped is no cancellation (reassign off: put back)", async () => {
  h = await twoWay();
  const m = await mirrored(h);
  const cal2 = h.world.calendarOf("th_2");
  strip(h, m.cal, m.eventId);
  h.world.google.userMove(m.cal, m.eventId, cal2);
  await settle(h);
  expect({ cancels: cancels(h), status: h.world.booking.get(m.id)!.status }).toEqual({
    cancels: 0,
    status: "confirmed",
  });
  expect(h.live("th_2")).toHaveLength(0);
  expect(h.live("th_1").map((e) => privateOf(h!, m.cal, String(e.id))?.calbridge_appointment_id)).toEqual([m.id]);
});

it("'Change calendar' to a colleague right after the marks were stripped reassigns (reassign on)", async () => {
  h = await twoWay({ reassign: true });
  const m = await mirrored(h);
  const cal2 = h.world.calendarOf("th_2");
  strip(h, m.cal, m.eventId);
  h.world.google.userMove(m.cal, m.eventId, cal2);
  await settle(h);
  await h.app.reconcile();
  expect({ cancels: cancels(h), appt: h.world.booking.get(m.id) }).toMatchObject({
    cancels: 0,
    appt: { status: "confirmed", therapist_id: "th_2" },
  });
  expect(privateOf(h, cal2, m.eventId)).toMatchObject({ calbridge_appointment_id: m.id, calbridge_managed: "1" });
});

it("an event under the appointment's id that names another appointment is not taken for its move", async () => {
  h = await twoWay();
  const m = await mirrored(h);
  const cal2 = h.world.calendarOf("th_2");
  h.world.google.userEdit(m.cal, m.eventId, { extendedProperties: { private: { calbridge_appointment_id: "other" } } });
  h.world.google.userMove(m.cal, m.eventId, cal2);
  await settle(h);
  // Not this appointment's event: the move reads as its deletion (cancelling from the calendar is on by default).
  expect(h.world.google.event(cal2, m.eventId)?.status).not.toBe("cancelled");
});
