// decide() and isEcho() as tables: link x event state x appointment state x conflict policy -> the one action, plus
// invariants over the whole cross product (nothing is written back to the booking service on a read error).
import { describe, expect, it } from "vitest";
import { fingerprint } from "../../src/calendar/fingerprint.ts";
import { type EventConfig, renderEvent } from "../../src/calendar/render.ts";
import type { WritebackConfig } from "../../src/config/schema.ts";
import { type DecideInput, decide } from "../../src/sync/decide.ts";
import { isEcho } from "../../src/sync/echo.ts";
import type { Action, CalEvent, Link, Snapshot } from "../../src/sync/types.ts";

const T0 = Date.UTC(2026, 11, 1, 10);
const H = 3_600_000;
const iso = (ms: number) => new Date(ms).toISOString();
const EID = "cbeventid0123";
const MAPPED = new Set(["th_1", "th_2"]);
const WB: WritebackConfig = {
  reschedule: true,
  cancel: true,
  reassign: false,
  notify_customer: true,
  reason: "x",
  cancel_grace_seconds: 60,
  reschedule_grace_seconds: 30,
};

const cfg = (cancelled: "delete" | "keep"): EventConfig => ({
  title: "{service_name}: {customer_name}",
  description: "Booking {id}",
  include_customer_contact: false,
  colors: { completed: "2", no_show: "11" },
  cancelled_events: cancelled,
});

const appt = (over: Partial<Snapshot> = {}): Snapshot => ({
  id: "apt_1",
  therapist_id: "th_1",
  service_name: "Massage",
  customer_name: "Ann",
  start_time: iso(T0),
  end_time: iso(T0 + H),
  status: "confirmed",
  ...over,
});

const body = (a: Snapshot, cancelled: "delete" | "keep" = "delete") =>
  renderEvent(a, { therapist_id: a.therapist_id ?? "", timezone: "UTC", calendar_id: "c" }, cfg(cancelled));

/** The event as calbridge wrote it for `a`, with changes a therapist (or Google) made. */
const event = (a: Snapshot, over: Partial<CalEvent> = {}): CalEvent => ({
  ...body(a)!,
  id: EID,
  etag: '"1"',
  ...over,
});

const link = (a: Snapshot, over: Partial<Link> = {}): Link => ({
  appointmentId: "apt_1",
  therapistId: "th_1",
  calendarId: "c",
  eventId: EID,
  present: true,
  etag: '"1"',
  fingerprint: fingerprint(body(a, "keep")!),
  eventStart: T0,
  eventEnd: T0 + H,
  booking: a,
  sourceAt: 1,
  syncedAt: 1,
  ...over,
});

const at = (start: number, end = start + H) => ({ start: { dateTime: iso(start) }, end: { dateTime: iso(end) } });

interface Case {
  name: string;
  appt: Snapshot | null;
  link?: Link;
  event?: CalEvent | null;
  seenIn?: string;
  conflict?: DecideInput["conflict"];
  writeback?: Partial<WritebackConfig>;
  cancelled?: "delete" | "keep";
  /** Epoch ms now; a day before the appointment unless given. */
  now?: number;
  expect: Partial<Action> & { kind: Action["kind"] };
}

function input(c: Case): DecideInput {
  const target = c.appt?.therapist_id && MAPPED.has(c.appt.therapist_id) ? c.appt.therapist_id : undefined;
  return {
    appointmentId: "apt_1",
    appt: c.appt,
    link: c.link,
    event: c.event,
    targetTherapistId: target,
    seenIn: c.event === undefined ? undefined : (c.seenIn ?? c.link?.therapistId ?? target ?? "th_1"),
    desired: c.appt && target ? body(c.appt, c.cancelled) : null,
    eventId: EID,
    writeback: { ...WB, ...c.writeback },
    conflict: c.conflict ?? "booking_wins",
    now: c.now ?? T0 - 24 * H,
  };
}

const A = appt();
const MOVED = appt({ start_time: iso(T0 + 2 * H), end_time: iso(T0 + 3 * H) });
const CANCELLED = appt({ status: "cancelled" });

const cases: Case[] = [
  // Nothing of ours in a calendar yet.
  { name: "new appointment, event not read", appt: A, expect: { kind: "create", reason: "new appointment" } },
  { name: "new appointment, event absent", appt: A, event: null, expect: { kind: "create" } },
  { name: "no link, the event already matches", appt: A, event: event(A), expect: { kind: "adopt" } },
  {
    name: "no link, the event matches but lacks calbridge's marks: written, not adopted",
    appt: A,
    event: event(A, { extendedProperties: null }),
    expect: { kind: "update", reason: "event exists without a record" },
  },
  {
    name: "no link, an event of ours that differs",
    appt: A,
    event: event(A, { summary: "other" }),
    expect: { kind: "update", reason: "event exists without a record", ifMatch: '"1"' },
  },
  { name: "no link, therapist not mapped", appt: appt({ therapist_id: "th_x" }), expect: { kind: "none" } },
  {
    name: "no link, unmapped therapist's event seen",
    appt: appt({ therapist_id: "th_x" }),
    event: event(A),
    seenIn: "th_1",
    expect: { kind: "delete", therapistId: "th_1" },
  },
  { name: "no link, cancelled", appt: CANCELLED, expect: { kind: "none", reason: "cancelled" } },
  {
    name: "no link, cancelled, its event left behind",
    appt: CANCELLED,
    event: event(A),
    expect: { kind: "delete", reason: "event left behind for a cancelled appointment" },
  },
  { name: "no link, cancelled, kept as a marker", appt: CANCELLED, cancelled: "keep", expect: { kind: "create" } },
  // The booking service does not know the appointment.
  { name: "gone, nothing of ours", appt: null, expect: { kind: "none" } },
  { name: "gone, linked event", appt: null, link: link(A), expect: { kind: "delete", therapistId: "th_1" } },
  { name: "gone, an orphan event seen", appt: null, event: event(A), expect: { kind: "delete" } },
  { name: "gone, removed already", appt: null, link: link(A, { present: false }), expect: { kind: "none" } },
  // Linked, event not read.
  { name: "unchanged, event not read", appt: A, link: link(A), expect: { kind: "none", reason: "unchanged" } },
  {
    name: "booking moved, event not read",
    appt: MOVED,
    link: link(A),
    expect: { kind: "update", reason: "booking changed", ifMatch: '"1"' },
  },
  { name: "booking completed: colour", appt: appt({ status: "completed" }), link: link(A), expect: { kind: "update" } },
  { name: "booking cancelled", appt: CANCELLED, link: link(A), expect: { kind: "delete", reason: "cancelled" } },
  { name: "booking cancelled, kept", appt: CANCELLED, link: link(A), cancelled: "keep", expect: { kind: "update" } },
  // Linked, event read.
  { name: "both unchanged", appt: A, link: link(A), event: event(A), expect: { kind: "none" } },
  { name: "booking moved, event as written", appt: MOVED, link: link(A), event: event(A), expect: { kind: "update" } },
  {
    name: "event missing (404 or another calendar): put back, never written back",
    appt: A,
    link: link(A),
    event: null,
    expect: { kind: "restore", reason: "event missing from the calendar" },
  },
  {
    name: "event deleted by the therapist",
    appt: A,
    link: link(A),
    event: event(A, { status: "cancelled" }),
    expect: { kind: "writeback_cancel", therapistId: "th_1" },
  },
  {
    name: "event deleted once the appointment began: put back, never cancelled (the customer would be told)",
    appt: A,
    link: link(A),
    event: event(A, { status: "cancelled" }),
    now: T0 + 10 * 60_000,
    expect: {
      kind: "restore",
      notice: expect.stringMatching(
        /the appointment has begun, so taking its event out of this calendar \(deleting it, or moving it to another calendar\) changes nothing in the booking/,
      ),
    },
  },
  {
    name: "event deleted after the appointment ended: put back, never cancelled",
    appt: A,
    link: link(A),
    event: event(A, { status: "cancelled" }),
    now: T0 + 20 * 24 * H,
    writeback: { cancel_grace_seconds: 0 },
    expect: { kind: "restore" },
  },
  {
    name: "event deleted a minute before the appointment: cancelled",
    appt: A,
    link: link(A),
    event: event(A, { status: "cancelled" }),
    now: T0 - 60_000,
    expect: { kind: "writeback_cancel" },
  },
  {
    name: "no link, the event deleted, the appointment ahead: put back saying the deletion was not sent",
    appt: A,
    event: event(A, { status: "cancelled" }),
    expect: { kind: "create", unsent: expect.stringContaining("Delete it again to cancel it") },
  },
  {
    name: "no link (expired with the window), the event deleted, the appointment over: left deleted",
    appt: A,
    event: event(A, { status: "cancelled" }),
    now: T0 + 20 * 24 * H,
    expect: { kind: "none", reason: expect.stringContaining("the appointment has begun: left deleted") },
  },
  {
    name: "no link, a completed appointment's event deleted: left deleted",
    appt: appt({ status: "completed" }),
    event: event(A, { status: "cancelled" }),
    now: T0 + 2 * H,
    expect: { kind: "none" },
  },
  {
    name: "event deleted, cancelling from the calendar off",
    appt: A,
    link: link(A),
    event: event(A, { status: "cancelled" }),
    writeback: { cancel: false },
    expect: { kind: "restore" },
  },
  {
    name: "event deleted, booking cancelled too",
    appt: CANCELLED,
    link: link(A),
    event: event(A, { status: "cancelled" }),
    expect: { kind: "delete" },
  },
  {
    // Restored after calbridge deleted its event ambiguously (the delete answered a failure): the link names the
    // event again, and taken as unchanged without a look, the deletion was later read as the therapist's.
    name: "booking confirmed again, rendering the same, event not read: written (its 412 reads the calendar)",
    appt: A,
    link: link(A, { booking: { ...A, status: "cancelled" } }),
    expect: { kind: "update", ifMatch: '"1"' },
  },
  {
    name: "the same without an etag: unchanged (a write without If-Match could go over a move not polled yet)",
    appt: A,
    link: link(A, { booking: { ...A, status: "cancelled" }, etag: undefined }),
    expect: { kind: "none" },
  },
  {
    name: "event deleted, booking moved too (booking wins): put back with a notice",
    appt: MOVED,
    link: link(A),
    event: event(A, { status: "cancelled" }),
    expect: { kind: "restore" },
  },
  {
    name: "event deleted, booking moved too (calendar wins)",
    appt: MOVED,
    link: link(A),
    event: event(A, { status: "cancelled" }),
    conflict: "calendar_wins",
    expect: { kind: "writeback_cancel" },
  },
  {
    name: "event moved by the therapist",
    appt: A,
    link: link(A),
    event: event(A, at(T0 + 5 * H)),
    expect: { kind: "writeback_reschedule", startTime: iso(T0 + 5 * H) },
  },
  {
    name: "event moved, rescheduling from the calendar off",
    appt: A,
    link: link(A),
    event: event(A, at(T0 + 5 * H)),
    writeback: { reschedule: false },
    expect: { kind: "restore" },
  },
  {
    name: "event resized: the booking keeps durations",
    appt: A,
    link: link(A),
    event: event(A, at(T0, T0 + 2 * H)),
    expect: { kind: "restore" },
  },
  {
    name: "event made all-day",
    appt: A,
    link: link(A),
    event: event(A, { start: { date: "2026-12-01" }, end: { date: "2026-12-02" } }),
    expect: { kind: "restore" },
  },
  {
    name: "event moved, but the appointment is completed",
    appt: appt({ status: "completed" }),
    link: link(appt({ status: "completed" })),
    event: event(A, at(T0 + 5 * H)),
    expect: { kind: "restore" },
  },
  {
    name: "event moved, booking moved too (booking wins)",
    appt: MOVED,
    link: link(A),
    event: event(A, at(T0 + 5 * H)),
    expect: { kind: "update" },
  },
  {
    name: "event moved, booking moved too (calendar wins)",
    appt: MOVED,
    link: link(A),
    event: event(A, at(T0 + 5 * H)),
    conflict: "calendar_wins",
    expect: { kind: "writeback_reschedule", startTime: iso(T0 + 5 * H) },
  },
  {
    name: "event's title edited: calbridge's fields restored",
    appt: A,
    link: link(A),
    event: event(A, { summary: "my title", etag: '"2"' }),
    expect: { kind: "update", reason: "event edited in the calendar; restored", ifMatch: '"2"' },
  },
  // calbridge's marks stripped by another client's full update (events.update replaces extended properties whole).
  {
    name: "marks stripped, the event otherwise as written: they are put back",
    appt: A,
    link: link(A),
    event: event(A, { extendedProperties: { private: { other: "1" } }, etag: '"2"' }),
    expect: { kind: "update", reason: "marks put back", ifMatch: '"2"' },
  },
  {
    name: "marks stripped from an event adopted so (its etag is the link's): they are put back",
    appt: A,
    link: link(A),
    event: event(A, { extendedProperties: {} }),
    expect: { kind: "update", reason: "marks put back", ifMatch: '"1"' },
  },
  {
    name: "marks stripped, booking state new and shown already: updated, not adopted",
    appt: MOVED,
    link: link(A),
    event: event(MOVED, { extendedProperties: {}, etag: '"2"' }),
    expect: { kind: "update", reason: "booking changed" },
  },
  {
    name: "calendar already matches a new booking state",
    appt: MOVED,
    link: link(A),
    event: event(MOVED, { etag: '"2"' }),
    expect: { kind: "adopt" },
  },
  {
    name: "event made a series by the therapist: a single event again",
    appt: A,
    link: link(A),
    event: event(A, { recurrence: ["RRULE:FREQ=WEEKLY;COUNT=4"], etag: '"2"' }),
    expect: { kind: "restore", reason: expect.stringMatching(/does not repeat/) as unknown as string },
  },
  {
    name: "a refused deletion: the event is put back (a new event, never the cancel again)",
    appt: A,
    link: link(A, { present: false, removedBy: "refused" }),
    event: event(A, { status: "cancelled" }),
    expect: { kind: "create" },
  },
  {
    name: "a refused move: the event is put back where the booking has it",
    appt: A,
    link: link(A, { present: false, removedBy: "refused" }),
    event: event(A, at(T0 + 5 * H)),
    expect: { kind: "update" },
  },
  // Reassignments.
  {
    name: "reassigned to another mapped therapist",
    appt: appt({ therapist_id: "th_2" }),
    link: link(A),
    expect: { kind: "move" },
  },
  {
    name: "reassigned and cancelled",
    appt: appt({ therapist_id: "th_2", status: "cancelled" }),
    link: link(A),
    expect: { kind: "delete", reason: "reassigned and cancelled" },
  },
  {
    name: "reassigned to an unmapped therapist",
    appt: appt({ therapist_id: "th_x" }),
    link: link(A),
    expect: { kind: "delete", reason: "therapist not mapped any more" },
  },
  {
    name: "moved in the calendar while reassigned (calendar wins): not theirs any more, the event goes to th_2",
    appt: appt({ therapist_id: "th_2" }),
    link: link(A),
    event: event(A, at(T0 + 5 * H)),
    conflict: "calendar_wins",
    expect: { kind: "move", to: { therapistId: "th_2", eventId: EID } },
  },
  {
    name: "deleted in the calendar while reassigned (calendar wins): no cancellation, the event goes to th_2",
    appt: appt({ therapist_id: "th_2" }),
    link: link(A),
    event: event(A, { status: "cancelled" }),
    conflict: "calendar_wins",
    expect: { kind: "move", to: { therapistId: "th_2", eventId: EID } },
  },
  // Removed on purpose.
  {
    name: "deleted by the therapist, write-back pending or declined",
    appt: A,
    link: link(A, { present: false, removedBy: "calendar" }),
    expect: { kind: "none" },
  },
  {
    name: "deleted by the therapist and cancelled since",
    appt: CANCELLED,
    link: link(A, { present: false, removedBy: "calendar" }),
    expect: { kind: "none" },
  },
  {
    name: "deleted by a purge of a therapist still mapped (it died before forgetting the link): written again, not sent",
    appt: A,
    link: link(A, { present: false, removedBy: "purge" }),
    event: event(A, { status: "cancelled" }),
    expect: { kind: "create", reason: "recreated" },
  },
  {
    name: "removed after a cancellation, booked again",
    appt: A,
    link: link(CANCELLED, { present: false, removedBy: "booking" }),
    expect: { kind: "create", reason: "recreated" },
  },
];

describe("decide", () => {
  it.each(cases)("$name -> $expect.kind", (c) => {
    expect(decide(input(c))).toMatchObject(c.expect);
  });

  it("never writes back to the booking service on anything but a therapist's change it read (cross product)", () => {
    const appts: (Snapshot | null)[] = [
      null,
      A,
      MOVED,
      CANCELLED,
      appt({ status: "completed" }),
      appt({ therapist_id: "th_2" }),
      appt({ therapist_id: "th_x" }),
    ];
    const links: (Link | undefined)[] = [
      undefined,
      link(A),
      link(A, { present: false, removedBy: "booking" }),
      link(A, { present: false, removedBy: "calendar" }),
      link(A, { present: false, removedBy: "refused" }),
      link(A, { present: false, removedBy: "purge" }),
      link(A, { therapistId: "th_2" }),
    ];
    const events: (CalEvent | null | undefined)[] = [
      undefined,
      null,
      event(A),
      event(A, { status: "cancelled" }),
      event(A, at(T0 + 5 * H)),
      event(A, at(T0, T0 + 2 * H)),
      event(A, { summary: "edited" }),
      event(A, { recurrence: ["RRULE:FREQ=DAILY;COUNT=3"] }),
    ];
    let n = 0;
    for (const a of appts)
      for (const l of links)
        for (const e of events)
          for (const conflict of ["booking_wins", "calendar_wins"] as const)
            for (const cancelled of ["delete", "keep"] as const) {
              const action = decide(
                input({ name: "", appt: a, link: l, event: e, conflict, cancelled, expect: { kind: "none" } }),
              );
              n++;
              // Once the appointment has begun, nothing is cancelled from the calendar, whatever the rest.
              const later = { name: "", appt: a, link: l, event: e, conflict, cancelled, now: T0 + 2 * H };
              expect(decide(input({ ...later, expect: { kind: "none" } })).kind).not.toBe("writeback_cancel");
              if (action.kind === "writeback_cancel") {
                expect(e?.status).toBe("cancelled");
                expect(l?.present).toBe(true);
                expect(a?.status).toBe("confirmed");
              }
              if (action.kind === "writeback_reschedule") {
                expect(e && e.status !== "cancelled").toBeTruthy();
                expect(l?.present).toBe(true);
                expect(a?.status).toBe("confirmed");
              }
              // An event that could not be read, or was not, never says "deleted".
              if (e === null || e === undefined) expect(action.kind.startsWith("writeback")).toBe(false);
            }
    expect(n).toBe(7 * 7 * 8 * 2 * 2);
  });
});

describe("decide: both sides moved to the same times", () => {
  // A move the booking service took, its link not saved yet (a stop, a crash, or a failed Google write after the
  // PATCH): the replayed booking change finds both sides changed, but they agree. Not a conflict: nothing was undone.
  const moved = event(A, { ...at(T0 + 2 * H), summary: "stale title", etag: '"2"' });
  it.each(["booking_wins", "calendar_wins"] as const)(
    "%s: the event is brought in line, no undone note",
    (conflict) => {
      const action = decide(
        input({ name: "", appt: MOVED, link: link(A), event: moved, conflict, expect: { kind: "none" } }),
      );
      expect(action).toMatchObject({ kind: "update", reason: "booking changed", ifMatch: '"2"' });
      expect(action.kind === "update" ? action.notice : "not an update").toBeUndefined();
    },
  );
  it("calendar_wins, the event otherwise as written: adopted, nothing written back", () => {
    const e = event(MOVED, { etag: '"2"' });
    const action = decide(
      input({ name: "", appt: MOVED, link: link(A), event: e, conflict: "calendar_wins", expect: { kind: "none" } }),
    );
    expect(action.kind).toBe("adopt");
  });
});

describe("isEcho", () => {
  const l = link(A);
  it.each([
    { name: "no link", link: undefined, event: event(A, { etag: '"9"' }), echo: false },
    { name: "another therapist's calendar", link: l, therapist: "th_2", event: event(A), echo: false },
    { name: "the etag we wrote", link: l, event: event(A, { summary: "x" }), echo: true },
    {
      name: "new etag, same times and owned fields (reminders)",
      link: l,
      event: event(A, { etag: '"2"' }),
      echo: true,
    },
    { name: "new etag, moved", link: l, event: event(A, { etag: '"2"', ...at(T0 + H) }), echo: false },
    { name: "new etag, title edited", link: l, event: event(A, { etag: '"2"', summary: "x" }), echo: false },
    {
      name: "our own deletion",
      link: link(A, { present: false }),
      event: event(A, { status: "cancelled" }),
      echo: true,
    },
    {
      name: "new etag, calbridge's marks stripped",
      link: l,
      event: event(A, { etag: '"2"', extendedProperties: { private: { other: "1" } } }),
      echo: false,
    },
    { name: "the etag we wrote, but no marks", link: l, event: event(A, { extendedProperties: null }), echo: false },
    { name: "the therapist's deletion", link: l, event: event(A, { status: "cancelled", etag: '"2"' }), echo: false },
    { name: "live again after we removed it", link: link(A, { present: false }), event: event(A), echo: false },
  ])("$name -> $echo", (c) => {
    expect(isEcho(c.link, c.therapist ?? "th_1", c.event)).toBe(c.echo);
  });

  // Where event.reminders is configured, calbridge owns them: the link's fingerprint covers them, and so does the echo.
  const mine = { useDefault: false, overrides: [{ method: "popup", minutes: 30 }] };
  const owned = { reminders: true };
  const withReminders = (a: Snapshot, over: Partial<CalEvent> = {}) => event(a, { reminders: mine, ...over });
  const l2 = link(A, { fingerprint: fingerprint(withReminders(A), owned) });
  it.each([
    { name: "new etag, our reminders", event: withReminders(A, { etag: '"2"' }), echo: true },
    {
      name: "new etag, reminders changed by the therapist",
      event: withReminders(A, { etag: '"2"', reminders: { useDefault: true } }),
      echo: false,
    },
  ])("with reminders owned: $name -> $echo", (c) => {
    expect(isEcho(l2, "th_1", c.event, owned)).toBe(c.echo);
  });
});

describe("decide: the times mark of calbridge's own write (calbridge_times)", () => {
  // The booking moved to +1h; calbridge wrote that into the event (its times mark says so) and its record was lost: the
  // link still holds the write before it (mark "m0"). The booking moved again to +3h.
  const mark = (start: number, end: number, at: string) =>
    `${iso(start).replace(".000Z", "Z")}/${iso(end).replace(".000Z", "Z")}@${at}`;
  const marked = (a: Snapshot, m: string, over: Partial<CalEvent> = {}) =>
    event(a, {
      etag: '"2"',
      extendedProperties: {
        private: { calbridge_appointment_id: "apt_1", calbridge_managed: "1", calbridge_times: m },
      },
      ...over,
    });
  const m0 = mark(T0, T0 + H, "s0");
  const written = appt({ start_time: iso(T0 + H), end_time: iso(T0 + 2 * H) });
  const again = appt({ start_time: iso(T0 + 3 * H), end_time: iso(T0 + 4 * H) });
  const recorded = link(A, { timesMark: m0 });
  const unrecorded = marked(written, mark(T0 + H, T0 + 2 * H, "s1"));
  const run = (c: Omit<Case, "name" | "expect">) => decide(input({ name: "", expect: { kind: "none" }, ...c }));

  it.each(["booking_wins", "calendar_wins"] as const)(
    "%s: an event at its own unrecorded write's times is brought to the booking, without a note",
    (conflict) => {
      const action = run({ appt: again, link: recorded, event: unrecorded, conflict });
      expect(action).toMatchObject({ kind: "update", reason: "booking changed", ifMatch: '"2"' });
      expect(action.kind === "update" ? action.notice : "not an update").toBeUndefined();
    },
  );

  it.each(["booking_wins", "calendar_wins"] as const)(
    "%s: the booking moved back to the link's times meanwhile: the event is brought back, as the booking's, no note",
    (conflict) => {
      const action = run({ appt: A, link: recorded, event: unrecorded, conflict });
      expect(action).toMatchObject({ kind: "update", reason: "booking changed" });
      expect(action.kind === "update" ? action.notice : "not an update").toBeUndefined();
    },
  );

  it("the booking not moved again: the event is adopted as calbridge's write", () => {
    expect(run({ appt: written, link: recorded, event: unrecorded, conflict: "calendar_wins" }).kind).toBe("adopt");
  });

  it("moved by the therapist after that write (the mark kept, the times changed): their move, written back", () => {
    const e = marked(written, mark(T0 + H, T0 + 2 * H, "s1"), at(T0 + 5 * H));
    const action = run({ appt: written, link: recorded, event: e, conflict: "calendar_wins" });
    expect(action).toMatchObject({ kind: "writeback_reschedule", startTime: iso(T0 + 5 * H) });
  });

  it("moved by seconds after that write: no reschedule, measured from the write's times", () => {
    const e = marked(written, mark(T0 + H, T0 + 2 * H, "s1"), at(T0 + H + 30_000));
    const action = run({ appt: written, link: recorded, event: e, conflict: "calendar_wins" });
    expect(action).toMatchObject({ kind: "restore", reason: expect.stringContaining("less than a minute") });
  });

  it("a move the booking took (the link holds its times, the mark is older): moved back to the mark's times, sent", () => {
    // The therapist moved the event to +2h and the booking took it, no write needed: the link records +2h and the
    // event's mark (still the first write's). Moving it back to the first write's times is their move, not calbridge's.
    const accepted = link(MOVED, { eventStart: T0 + 2 * H, eventEnd: T0 + 3 * H, timesMark: m0 });
    const action = run({ appt: MOVED, link: accepted, event: marked(A, m0), conflict: "calendar_wins" });
    expect(action).toMatchObject({ kind: "writeback_reschedule", startTime: iso(T0) });
  });

  it("a write at the times of the recorded one, its record lost: still calbridge's (each write's mark is its own)", () => {
    // The link holds an accepted move to +2h over the first write (m0); the booking went back to T0, calbridge wrote it
    // (a new mark, same times as m0) and its record was lost; the booking moved again to +3h.
    const accepted = link(MOVED, { eventStart: T0 + 2 * H, eventEnd: T0 + 3 * H, timesMark: m0 });
    const e = marked(A, mark(T0, T0 + H, "s2"));
    const action = run({ appt: again, link: accepted, event: e, conflict: "calendar_wins" });
    expect(action).toMatchObject({ kind: "update", reason: "booking changed" });
  });

  it("an event without a mark (an earlier build's) is read by the link's times", () => {
    const e = event(written, {
      etag: '"2"',
      extendedProperties: { private: { calbridge_appointment_id: "apt_1", calbridge_managed: "1" } },
    });
    const action = run({ appt: again, link: recorded, event: e, conflict: "calendar_wins" });
    expect(action).toMatchObject({ kind: "writeback_reschedule", startTime: iso(T0 + H) });
  });
});
