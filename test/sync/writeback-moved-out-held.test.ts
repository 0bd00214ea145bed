// The moved-out look-up (moved-out.ts) beside the write-back guard, `calbridge writeback held` and copies calbridge
// itself left: only calendars the therapist's account owns are taken for a "Change calendar" move; a held "deletion"
// that was such a move is never reported as a cancellation, its restore leaves no stale copy, a cancellation by the
// customer meanwhile leaves none either, and a move undone (nothing sent) does not use up the guard's budget.
import { afterEach, expect, it } from "vitest";
import { APPOINTMENT_ID_PROPERTY, eventIdFor } from "../../src/calendar/ids.ts";
import { writebackHeld } from "../../src/cli/writeback-held.ts";
import type { ConfigInput } from "../../src/config/schema.ts";
import { cancels, DAY, daemonHarness, type Harness, liveOf, settle } from "./support.ts";

let h: Harness | undefined;
afterEach(async () => {
  await h?.close();
  h = undefined;
});

/** th_1's own calendar besides the mapped one. */
const PRIVATE = "th1private@group.calendar.google.com";

async function world(o: { configure?: (c: ConfigInput) => void; mapped?: string[] } = {}): Promise<Harness> {
  const x = await daemonHarness({
    therapists: 2,
    ...(o.mapped ? { mapped: o.mapped } : {}),
    configure: (c) => {
      c.sync = { ...c.sync, writeback: { cancel_grace_seconds: 0, reschedule_grace_seconds: 0 } };
      o.configure?.(c);
    },
  });
  x.world.google.createCalendar(PRIVATE, "th_1@clinic.test", { summary: "Private", timeZone: "Europe/Berlin" });
  return x;
}

/** Every write-back is held for a person to decide. */
const holdAll = (c: ConfigInput) => {
  c.sync = { ...c.sync, writeback_guard: { floor: 0, max_ratio: 0 } };
};

async function mirrored(x: Harness, dayOffset = 3, hour = 10) {
  const start = new Date(Date.now() + dayOffset * DAY);
  start.setUTCHours(hour, 0, 0, 0);
  const appt = x.world.booking.create({ therapist_id: "th_1", start_time: start.toISOString() }, { force: true });
  const id = String(appt.id);
  return { id, cal: x.world.calendarOf("th_1"), eventId: eventIdFor(id) };
}

/** A copy of the appointment's event under its id, as calbridge wrote it, in `calendarId`. */
function copyIn(x: Harness, calendarId: string, m: Awaited<ReturnType<typeof mirrored>>): void {
  const [ev] = liveOf(x, m.cal, m.id);
  x.world.google.userInsert(calendarId, {
    id: m.eventId,
    summary: ev!.summary,
    start: ev!.start,
    end: ev!.end,
    extendedProperties: { private: { [APPOINTMENT_ID_PROPERTY]: m.id } },
  });
}

it("a genuine deletion is cancelled though a left-behind copy stays in an unmapped colleague's calendar the therapist may edit", async () => {
  h = await world({ mapped: ["th_1"] }); // th_2 left the mapping; their calendar is left alone
  const OLD = h.world.calendarOf("th_2");
  h.world.google.shareCalendar(OLD, "th_1@clinic.test", "writer"); // the practice owner edits colleagues' calendars
  const m = await mirrored(h);
  await settle(h);
  copyIn(h, OLD, m); // the event calbridge wrote there before the appointment was reassigned to th_1
  h.world.google.userDelete(m.cal, m.eventId);
  await settle(h);
  expect(cancels(h)).toBe(1);
  expect(h.world.booking.get(m.id)!.status).toBe("cancelled");
  expect(liveOf(h, OLD, m.id)).toHaveLength(1); // not calbridge's to remove
});

it("a genuine deletion is cancelled though a copy calbridge left behind stays in an old calendar the therapist owns", async () => {
  h = await world();
  const m = await mirrored(h);
  await settle(h);
  copyIn(h, PRIVATE, m);
  await h.app.sync.leftBehind.add("th_1", PRIVATE, "403 forbidden"); // th_1's mapping named PRIVATE before
  h.world.google.userDelete(m.cal, m.eventId);
  await settle(h);
  expect(cancels(h)).toBe(1);
  expect(h.world.booking.get(m.id)!.status).toBe("cancelled");
});

it("writeback held --apply of a held 'deletion' that was a move to the Private calendar says it was moved back, not cancelled", async () => {
  h = await world({ configure: holdAll });
  const m = await mirrored(h);
  await settle(h);
  h.world.google.userMove(m.cal, m.eventId, PRIVATE);
  await settle(h);
  expect((await writebackHeld(h.app, {})).held).toEqual([
    expect.objectContaining({ appointmentId: m.id, kind: "cancel" }),
  ]);
  const r = await writebackHeld(h.app, { decision: "apply" });
  expect(h.world.booking.get(m.id)!.status).toBe("confirmed");
  expect(cancels(h)).toBe(0);
  expect(liveOf(h, m.cal, m.id)).toHaveLength(1);
  expect(r.decided).toHaveLength(1);
  expect(r.decided[0]!.did).not.toMatch(/cancelled in the booking service/);
  expect(r.decided[0]!.did).toMatch(
    new RegExp(`^not cancelled, nothing sent: the event had been moved to calendar ${PRIVATE.replace(/\./g, "\\.")}`),
  );
  expect(await writebackHeld(h.app, {})).toMatchObject({ held: [] });
});

it("writeback held --restore of a held 'deletion' that was a move to the Private calendar leaves one live event, no copy in Private", async () => {
  h = await world({ configure: holdAll });
  const m = await mirrored(h);
  await settle(h);
  h.world.google.userMove(m.cal, m.eventId, PRIVATE);
  await settle(h);
  await writebackHeld(h.app, { decision: "restore" });
  await settle(h);
  expect(h.world.booking.get(m.id)!.status).toBe("confirmed");
  expect(cancels(h)).toBe(0);
  expect(liveOf(h, m.cal, m.id)).toHaveLength(1);
  expect(liveOf(h, PRIVATE, m.id)).toHaveLength(0);
});

it("an appointment the customer cancels while the therapist's move to Private is held does not stay live in Private", async () => {
  h = await world({ configure: holdAll });
  const m = await mirrored(h);
  const other = await mirrored(h, 4, 11);
  await settle(h);
  h.world.google.userMove(m.cal, m.eventId, PRIVATE);
  // An event of the therapist's own in Private, and another appointment's copy: neither is touched.
  h.world.google.userInsert(PRIVATE, {
    summary: "Dentist",
    start: { dateTime: new Date(Date.now() + DAY).toISOString() },
    end: { dateTime: new Date(Date.now() + DAY + 3_600_000).toISOString() },
  });
  copyIn(h, PRIVATE, other);
  await settle(h);
  h.world.booking.cancel(m.id);
  await settle(h);
  await h.app.reconcile();
  await settle(h);
  expect(h.world.booking.get(m.id)!.status).toBe("cancelled");
  expect(liveOf(h, PRIVATE, m.id)).toHaveLength(0);
  expect(liveOf(h, PRIVATE, other.id)).toHaveLength(1);
  expect(
    h.world.google.events(PRIVATE).filter((e) => e.summary === "Dentist" && e.status !== "cancelled"),
  ).toHaveLength(1);
});

it("moves to Private that calbridge moved back (nothing sent) do not get the therapist's next real deletion held by the guard", async () => {
  h = await world(); // guard defaults: floor 3, max_ratio 0.2
  const ms = [];
  for (let i = 0; i < 4; i++) ms.push(await mirrored(h, 3 + i, 9 + i));
  await settle(h);
  for (const m of ms.slice(0, 3)) {
    h.world.google.userMove(m.cal, m.eventId, PRIVATE);
    await settle(h);
  }
  expect(cancels(h)).toBe(0);
  for (const m of ms.slice(0, 3)) expect(liveOf(h, m.cal, m.id)).toHaveLength(1);
  const real = ms[3]!;
  h.world.google.userDelete(real.cal, real.eventId);
  await settle(h);
  expect(await writebackHeld(h.app, {})).toMatchObject({ held: [] });
  expect(h.world.booking.get(real.id)!.status).toBe("cancelled");
});
