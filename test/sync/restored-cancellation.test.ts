// Tests a cancellation the booking service's staff take back (the customer changed their mind): the appointment is
// confirmed again. The therapist had cleared the cancelled appointment's event away (a kept "Cancelled" marker, or the
// event deleted while the customer cancelled); that deletion was left in the link as an unhandled calendar change, and
// once the booking was confirmed again it was sent as a fresh write-back under sync.conflict: calendar_wins (the
// appointment cancelled again: the customer told, maybe refunded), or under booking_wins it brought the event back
// with a false "changed at the same time" note. Now such a deletion is recorded as the therapist's removal of a
// cancelled appointment's event, and the restored appointment's event comes back with nothing sent.
// Also: an appointment that has begun, whose event a person deleted while calbridge had lost its records of it, came
// back saying "Delete it again to cancel it", which never cancels a begun appointment.
import { afterEach, expect, it } from "vitest";
import { ManualClock } from "../../src/clock.ts";
import { cancels, daemonHarness, type Harness, iso, liveOf, mirrored, pass, quiet, settle } from "./support.ts";

let h: Harness | undefined;
afterEach(async () => {
  await h?.close();
  h = undefined;
});

for (const conflict of ["calendar_wins", "booking_wins"] as const) {
  it(`${conflict}: a kept "Cancelled" marker cleared away, then the booking restored: the event is back, nothing is cancelled`, async () => {
    h = await daemonHarness({
      therapists: 1,
      configure: (c) => {
        c.sync = {
          ...c.sync,
          cancelled_events: "keep",
          conflict,
          writeback: { cancel_grace_seconds: 0, reschedule_grace_seconds: 0 },
        };
      },
    });
    const m = await mirrored(h);
    h.world.booking.cancel(m.id, "customer asked");
    await settle(h);
    expect(String(h.world.google.event(m.cal, m.eventId)!.summary)).toMatch(/^Cancelled: /);
    h.world.google.userDelete(m.cal, m.eventId); // the therapist tidies the calendar
    await settle(h);
    h.world.booking.restoreCancelled(m.id);
    await settle(h);
    await h.app.reconcile();
    await settle(h);
    expect(h.world.booking.get(m.id)!.status).toBe("confirmed");
    expect(cancels(h)).toBe(0);
    const live = liveOf(h, m.cal, m.id);
    expect(live).toHaveLength(1);
    expect(String(live[0]!.summary)).not.toMatch(/^Cancelled/);
    expect(String(live[0]!.description)).not.toContain("at the same time");
    // Quiet afterwards: nothing more to write.
    const writes = h.writes();
    expect((await h.app.reconcile()).plan).toEqual([]);
    expect(h.writes()).toBe(writes);
  });
}

it("calendar_wins: an event deleted while the customer cancelled, then the booking restored: nothing is cancelled", async () => {
  const clock = new ManualClock(Date.now());
  h = await daemonHarness({
    therapists: 1,
    clock,
    configure: (c) => {
      c.sync = { ...c.sync, conflict: "calendar_wins", writeback: { cancel_grace_seconds: 3600 } };
    },
  });
  const m = await mirrored(h);
  h.world.google.userDelete(m.cal, m.eventId); // its cancellation waits out the grace period...
  await settle(h);
  h.world.booking.cancel(m.id, "customer asked"); // ...and meanwhile the customer cancels
  await settle(h);
  await h.app.reconcile();
  await settle(h);
  h.world.booking.restoreCancelled(m.id);
  await settle(h);
  await h.app.reconcile();
  await settle(h);
  await pass(h, clock, 3_700_000, 60_000); // past the grace period
  await h.app.reconcile();
  await settle(h);
  expect(h.world.booking.get(m.id)!.status).toBe("confirmed");
  expect(cancels(h)).toBe(0);
  expect(liveOf(h, m.cal, m.id)).toHaveLength(1);
});

it("a begun appointment's event deleted while calbridge had lost its records comes back without 'Delete it again to cancel it'", async () => {
  h = await daemonHarness({
    therapists: 1,
    configure: (c) => {
      c.sync = { ...c.sync, writeback: { cancel_grace_seconds: 0, reschedule_grace_seconds: 0 } };
    },
  });
  // In progress: began 20 minutes ago (a 90-minute session).
  const appt = h.world.booking.create(
    { therapist_id: "th_1", start_time: iso(Date.now() - 20 * 60_000), service_id: "svc_massage_90" },
    { force: true },
  );
  const id = String(appt.id);
  await quiet(h);
  const cal = h.world.calendarOf("th_1");
  expect(liveOf(h, cal, id)).toHaveLength(1);
  // The store loses the record; the therapist deletes the event (no poll sees it); reception adds a note.
  await h.app.sync.links.forget((await h.app.sync.links.get(id))!);
  h.world.google.userDelete(cal, String(liveOf(h, cal, id)[0]!.id));
  h.world.booking.setNotes(id, "parking at the back");
  await quiet(h);
  const live = liveOf(h, cal, id);
  expect(live).toHaveLength(1);
  expect(String(live[0]!.description)).not.toContain("Delete it again to cancel it");
  expect(String(live[0]!.description)).toContain("The appointment has begun, so deleting its event does not cancel it");
  expect(cancels(h)).toBe(0);
});
