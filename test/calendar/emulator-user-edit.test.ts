// Tests the times of a person's edit in the emulated Google Calendar UI (userEdit, userSplitSeries). Dragging or
// re-timing an event changes its time, not its time zone: a time given without timeZone keeps the zone the event has
// (each end its own), and a timeZone given is the person's pick in the editor's "Time zone" control, one control for
// both ends unless they are separate. The "All day" toggle turns both ends to dates, which carry no zone, and back to
// times in the calendar's zone. userEdit replaced start and end whole: a drag given as instants dropped the zone, and
// calbridge took that for an edit of the zone (src/sync/edit-notice.ts) on top of the move.
import { afterEach, beforeEach, expect, it } from "vitest";
import { type CalendarEmulator, startCalendarEmulator } from "../../src/simulator/calendar/index.ts";

const CAL = "anna@clinic.example";
const NY = "America/New_York";
const HOUR = 3_600_000;
type Time = { date?: string; dateTime?: string; timeZone?: string };

let g: CalendarEmulator;
beforeEach(async () => {
  g = await startCalendarEmulator({});
  g.createCalendar(CAL, CAL, { timeZone: "Europe/Berlin" });
});
afterEach(async () => {
  await g.close();
});

/** An event of the Berlin calendar kept in New York's zone (10:00-11:00 EST on 24 November 2026 = 15:00-16:00Z). */
function newYorkEvent(extra: Record<string, unknown> = {}): string {
  const ev = g.userInsert(CAL, {
    summary: "Session",
    start: { dateTime: "2026-11-24T10:00:00", timeZone: NY },
    end: { dateTime: "2026-11-24T11:00:00", timeZone: NY },
    ...extra,
  });
  return String(ev.id);
}
const times = (ev: Record<string, unknown> | undefined) => ({ start: ev?.start as Time, end: ev?.end as Time });
const iso = (ms: number) => new Date(ms).toISOString();

it("a drag given as instants (no timeZone) keeps the event's zone: only the time changes", () => {
  const id = newYorkEvent();
  const to = Date.parse("2026-11-24T17:00:00Z");
  const edited = g.userEdit(CAL, id, { start: { dateTime: iso(to) }, end: { dateTime: iso(to + HOUR) } });
  expect(times(edited)).toEqual({
    start: { dateTime: "2026-11-24T12:00:00-05:00", timeZone: NY },
    end: { dateTime: "2026-11-24T13:00:00-05:00", timeZone: NY },
  });
  expect(times(g.event(CAL, id))).toEqual(times(edited));
});

it("a wall time without offset or timeZone is read in the event's zone, as the editor shows it", () => {
  const id = newYorkEvent();
  const edited = g.userEdit(CAL, id, {
    start: { dateTime: "2026-11-25T15:00:00" },
    end: { dateTime: "2026-11-25T16:30:00" },
  });
  expect(times(edited)).toEqual({
    start: { dateTime: "2026-11-25T15:00:00-05:00", timeZone: NY },
    end: { dateTime: "2026-11-25T16:30:00-05:00", timeZone: NY },
  });
});

it("dragging the bottom edge (the end alone) keeps the end's zone and the start as it was", () => {
  const id = newYorkEvent();
  const edited = g.userEdit(CAL, id, { end: { dateTime: "2026-11-24T17:30:00Z" } });
  expect(times(edited)).toEqual({
    start: { dateTime: "2026-11-24T10:00:00-05:00", timeZone: NY },
    end: { dateTime: "2026-11-24T12:30:00-05:00", timeZone: NY },
  });
});

it("a timeZone given is the person's pick in the 'Time zone' control: one control, both ends take it", () => {
  const id = newYorkEvent();
  // The same instants shown in another zone (the case src/sync/edit-notice.ts answers with its zone note).
  const edited = g.userEdit(CAL, id, {
    start: { dateTime: "2026-11-24T15:00:00Z", timeZone: "Asia/Tokyo" },
    end: { dateTime: "2026-11-24T16:00:00Z" },
  });
  expect(times(edited)).toEqual({
    start: { dateTime: "2026-11-25T00:00:00+09:00", timeZone: "Asia/Tokyo" },
    end: { dateTime: "2026-11-25T01:00:00+09:00", timeZone: "Asia/Tokyo" },
  });
  // The zone picked with the times left as they are: the end follows the control too, at the instant it had.
  const again = g.userEdit(CAL, id, { start: { dateTime: "2026-11-24T15:00:00Z", timeZone: NY } });
  expect(times(again)).toEqual({
    start: { dateTime: "2026-11-24T10:00:00-05:00", timeZone: NY },
    end: { dateTime: "2026-11-24T11:00:00-05:00", timeZone: NY },
  });
});

it("separate start and end zones (a flight) stay separate: a drag keeps each, a pick for the start leaves the end's", () => {
  const id = String(
    g.userInsert(CAL, {
      summary: "Flight",
      start: { dateTime: "2026-11-24T10:00:00", timeZone: NY },
      end: { dateTime: "2026-11-24T22:00:00", timeZone: "Europe/London" },
    }).id,
  );
  const dragged = g.userEdit(CAL, id, {
    start: { dateTime: "2026-11-25T15:00:00Z" },
    end: { dateTime: "2026-11-25T22:00:00Z" },
  });
  expect(times(dragged)).toEqual({
    start: { dateTime: "2026-11-25T10:00:00-05:00", timeZone: NY },
    end: { dateTime: "2026-11-25T22:00:00Z", timeZone: "Europe/London" },
  });
  const picked = g.userEdit(CAL, id, {
    start: { dateTime: "2026-11-25T15:00:00Z", timeZone: "America/Chicago" },
    end: { dateTime: "2026-11-25T22:00:00Z" },
  });
  expect(times(picked).start).toEqual({ dateTime: "2026-11-25T09:00:00-06:00", timeZone: "America/Chicago" });
  expect(times(picked).end).toEqual({ dateTime: "2026-11-25T22:00:00Z", timeZone: "Europe/London" });
});

it("'All day' on: both ends become dates with no zone; off again: times in the calendar's zone", () => {
  const id = newYorkEvent();
  const allDay = g.userEdit(CAL, id, { start: { date: "2026-11-24" }, end: { date: "2026-11-25" } });
  expect(times(allDay)).toEqual({ start: { date: "2026-11-24" }, end: { date: "2026-11-25" } });
  // The dates carry no zone to keep: the times are read, and kept, in the calendar's (Berlin).
  const timed = g.userEdit(CAL, id, {
    start: { dateTime: "2026-11-24T10:00:00" },
    end: { dateTime: "2026-11-24T11:00:00" },
  });
  expect(times(timed)).toEqual({
    start: { dateTime: "2026-11-24T10:00:00+01:00", timeZone: "Europe/Berlin" },
    end: { dateTime: "2026-11-24T11:00:00+01:00", timeZone: "Europe/Berlin" },
  });
});

it("the UI turns both ends to all day (or back) together, and cannot take a zone away: such an edit is refused", () => {
  const id = newYorkEvent();
  expect(() => g.userEdit(CAL, id, { start: { date: "2026-11-24" } })).toThrow(/both ends/);
  expect(() =>
    g.userEdit(CAL, id, { start: { dateTime: "2026-11-24T15:00:00Z", timeZone: null }, end: { dateTime: "x" } }),
  ).toThrow(/time zone/);
  // Nothing changed.
  expect(times(g.event(CAL, id)).start).toEqual({ dateTime: "2026-11-24T10:00:00-05:00", timeZone: NY });
});

it("a series dragged keeps the series' zone, not the calendar's; so does the tail of 'this and following events'", () => {
  const id = newYorkEvent({ recurrence: ["RRULE:FREQ=WEEKLY;COUNT=6"] });
  const dragged = g.userEdit(CAL, id, {
    start: { dateTime: "2026-11-24T16:00:00Z" },
    end: { dateTime: "2026-11-24T17:00:00Z" },
  });
  expect(times(dragged).start).toEqual({ dateTime: "2026-11-24T11:00:00-05:00", timeZone: NY });
  const from = Date.parse("2026-12-08T16:00:00Z");
  const tail = g.userSplitSeries(CAL, id, from, {
    start: { dateTime: iso(from + HOUR) },
    end: { dateTime: iso(from + 2 * HOUR) },
  });
  expect(times(tail)).toEqual({
    start: { dateTime: "2026-12-08T12:00:00-05:00", timeZone: NY },
    end: { dateTime: "2026-12-08T13:00:00-05:00", timeZone: NY },
  });
});

it("a drag onto the night the clocks go forward, in wall time: an end in the skipped hour reads an hour on", () => {
  // fullcalendar/fullcalendar#3887 (2017): Google moves a time in the skipped hour an hour on, and the one-hour
  // event then shows two hours on the grid. Whether a drag across such a night keeps the wall-clock duration or the
  // real one is not reported: the emulator takes the times given and derives neither.
  const id = String(
    g.userInsert(CAL, {
      summary: "Night shift",
      start: { dateTime: "2026-03-27T01:30:00", timeZone: "Europe/Berlin" },
      end: { dateTime: "2026-03-27T02:30:00", timeZone: "Europe/Berlin" },
    }).id,
  );
  const edited = g.userEdit(CAL, id, {
    start: { dateTime: "2026-03-29T01:30:00" },
    end: { dateTime: "2026-03-29T02:30:00" },
  });
  expect(times(edited)).toEqual({
    start: { dateTime: "2026-03-29T01:30:00+01:00", timeZone: "Europe/Berlin" },
    end: { dateTime: "2026-03-29T03:30:00+02:00", timeZone: "Europe/Berlin" },
  });
});
