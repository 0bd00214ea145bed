// A therapist invites a colleague to an appointment's event: Google puts a guest's copy in the colleague's calendar
// under the same event id (invitations.ts in the emulator), without calbridge's private marks, with the colleague's
// calendar not its organizer. That copy is the colleague's invitation, never the appointment's event: the colleague
// declining it, the organizer dropping them from the guests, or an appointment later reassigned to them must not be
// read as a cancellation, a "Change calendar" or an event to adopt. (Adopting it and then deleting the organizer's
// event, as a reassignment does, cancels the copy: read as the new therapist deleting the event, the appointment was
// cancelled.)
import { afterEach, expect, it } from "vitest";
import { eventIdFor } from "../../src/calendar/ids.ts";
import { captureLog } from "../support/log-capture.ts";
import { cancels, type Harness, mirrored, settle, twoWay } from "./support.ts";

let h: Harness | undefined;
afterEach(async () => {
  await h?.close();
  h = undefined;
});

/** th_1's appointment mirrored, and th_2 (whose calendar is their address) invited to its event. */
async function invited(x: Harness) {
  const m = await mirrored(x);
  x.world.google.userEdit(m.cal, m.eventId, { attendees: [{ email: x.world.calendarOf("th_2") }] });
  await settle(x);
  return { id: m.id, eventId: m.eventId, own: m.cal, guest: x.world.calendarOf("th_2") };
}

const bookingWrites = (x: Harness) => x.world.booking.requests.filter((r) => r.method !== "GET").length;
const organizerOf = (x: Harness, cal: string, eventId: string) =>
  (x.world.google.event(cal, eventId)?.organizer as { email?: string } | undefined)?.email;

it("the colleague's copy is left alone and changes nothing: polls, a reconciliation, their declining it", async () => {
  h = await twoWay();
  const m = await invited(h);
  expect(h.world.google.event(m.guest, m.eventId)).toMatchObject({ status: "confirmed", organizer: { email: m.own } });
  // The organizer's change reaches th_2's copy: th_2's poll takes it for no change of an appointment.
  h.world.google.userEdit(m.own, m.eventId, { location: "Room 2" });
  await h.app.poller.poll("th_1");
  expect(await h.app.poller.poll("th_2")).toMatchObject({ changes: 0 });
  await settle(h);
  const writes = h.writes();
  await h.app.reconcile();
  await settle(h);
  expect(h.writes()).toBe(writes);
  expect(h.world.google.event(m.guest, m.eventId)?.status).toBe("confirmed");
  expect(bookingWrites(h)).toBe(0);

  // th_2 deletes the invitation from their calendar (declines it): no cancellation, no reassignment.
  h.world.google.userDelete(m.guest, m.eventId);
  await settle(h);
  await h.app.reconcile();
  await settle(h);
  expect(bookingWrites(h)).toBe(0);
  expect(h.world.booking.get(m.id)).toMatchObject({ status: "confirmed", therapist_id: "th_1" });
  expect(h.world.google.event(m.own, m.eventId)?.status).toBe("confirmed");
});

it("the organizer dropping the colleague from the guests cancels the copy: not a cancellation either", async () => {
  h = await twoWay();
  const m = await invited(h);
  h.world.google.userEdit(m.own, m.eventId, { attendees: [] });
  expect(h.world.google.event(m.guest, m.eventId)?.status).toBe("cancelled");
  await settle(h);
  await h.app.reconcile();
  await settle(h);
  expect(bookingWrites(h)).toBe(0);
  expect(h.world.google.event(m.own, m.eventId)?.status).toBe("confirmed");
});

it.each(["kept", "declined"])(
  "an appointment reassigned to the invited colleague (invitation %s) gets an event of its own there; nothing is cancelled",
  async (answer) => {
    const log = captureLog("info");
    h = await twoWay({}, log.logger);
    const m = await invited(h);
    if (answer === "declined") {
      h.world.google.userDelete(m.guest, m.eventId);
      await settle(h);
    }
    h.world.booking.reassign(m.id, "th_2");
    await settle(h);
    await h.app.reconcile();
    await settle(h);
    expect(cancels(h)).toBe(0);
    expect(h.world.booking.get(m.id)).toMatchObject({ status: "confirmed", therapist_id: "th_2" });
    // The invitation (under the first id) went with the organizer's event; the appointment's event in th_2's calendar
    // is th_2's own, under another generation of the id.
    const live = h.live("th_2");
    expect(live).toHaveLength(1);
    expect(live[0]).toMatchObject({
      id: eventIdFor(m.id, 1),
      organizer: { email: m.guest, self: true },
      extendedProperties: { private: { calbridge_appointment_id: m.id, calbridge_managed: "1" } },
    });
    if (answer === "kept") {
      const line = log.find((l) => String(l.msg).startsWith("the event id is taken in this calendar by an invitation"));
      expect(line).toMatchObject({ calendar_id: m.guest, event_id: m.eventId, organizer: m.own });
    }
    // No notice: nobody's deletion was refused (the first id was only taken by the invitation).
    expect(String(live[0]?.description ?? "")).not.toMatch(/calbridge:/);
    expect(h.live("th_1")).toHaveLength(0);
    expect(organizerOf(h, m.guest, m.eventId)).toBe(m.own);
    expect(h.world.google.event(m.guest, m.eventId)?.status).toBe("cancelled");
    // Settled: nothing more to write.
    const writes = h.writes();
    await h.app.reconcile();
    await settle(h);
    expect(h.writes()).toBe(writes);
  },
);

it("the organizer deleting the event still cancels the appointment: the colleague's copy is no 'Change calendar'", async () => {
  h = await twoWay();
  const m = await invited(h);
  h.world.google.userDelete(m.own, m.eventId);
  await settle(h);
  expect(cancels(h)).toBe(1);
  expect(h.world.booking.get(m.id)?.status).toBe("cancelled");
  expect(h.world.booking.get(m.id)?.therapist_id).toBe("th_1");
});

it("moved to the organizer's own unmapped calendar, the event is not taken for one moved to the invited colleague's", async () => {
  h = await twoWay();
  const PRIVATE = "th1private@group.calendar.google.com";
  h.world.google.createCalendar(PRIVATE, "th_1@clinic.test", { summary: "Private", timeZone: "Europe/Berlin" });
  const m = await invited(h);
  // "Change calendar" to "Private": the invitation follows the event (its organizer is now PRIVATE) and stays in
  // th_2's calendar under the appointment's id.
  h.world.google.userMove(m.own, m.eventId, PRIVATE);
  expect(h.world.google.event(m.guest, m.eventId)).toMatchObject({
    status: "confirmed",
    organizer: { email: PRIVATE },
  });
  await settle(h);
  expect(bookingWrites(h)).toBe(0);
  expect(h.world.booking.get(m.id)).toMatchObject({ status: "confirmed", therapist_id: "th_1" });
  expect(h.live("th_1").map((e) => e.id)).toHaveLength(1);
});

it.each([false, true])(
  "moved to a calendar the organizer does not own, the event is not taken for one moved to the invited colleague's (writeback.reassign %s)",
  async (reassign) => {
    h = await twoWay({ reassign });
    const TEAM = "team@group.calendar.google.com";
    h.world.google.createCalendar(TEAM, "boss@clinic.test", { summary: "Team", timeZone: "Europe/Berlin" });
    h.world.google.shareCalendar(TEAM, "th_1@clinic.test", "writer");
    const m = await invited(h);
    h.world.google.userMove(m.own, m.eventId, TEAM);
    expect(h.world.google.event(m.guest, m.eventId)).toMatchObject({ status: "confirmed", organizer: { email: TEAM } });
    await settle(h);
    // Not reassigned to th_2, and th_2's invitation is not deleted (that would decline it for them).
    expect(h.world.booking.get(m.id)?.therapist_id).toBe("th_1");
    expect(h.world.booking.requests.filter((r) => r.method === "PATCH")).toEqual([]);
    expect(h.world.google.event(m.guest, m.eventId)?.status).toBe("confirmed");
    expect(h.world.google.event(TEAM, m.eventId)?.status).toBe("confirmed");
  },
);
