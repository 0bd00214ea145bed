// Owns what moving events between calendars needs of a calendar besides the sync's port: events.move, a cheap check
// that the calendar can be reached at all, which answers mean "no access" (not a passing fault), and putting
// calbridge's marks back on an event that lost them on the way.
import { TIMES_PROPERTY } from "../calendar/ids.ts";
import type { RenderedEvent } from "../calendar/render.ts";
import { isCalendarKind } from "./errors.ts";
import { mayBeSameCalendar, sameCalendarId } from "./placement.ts";
import type { CalEvent, CalendarPort } from "./types.ts";

/** A calendar the links name (possibly one the mapping no longer does), as a gateway reaches it. */
export interface SourceCalendar extends Pick<CalendarPort, "get" | "delete" | "listManaged"> {
  readonly calendarId: string;
  move(eventId: string, destination: string): Promise<CalEvent>;
  /** The calendar's real id (calendars.get: `primary` answers the account's own calendar, its address). */
  ownCalendarId(): Promise<string>;
  close?(): void;
}

/**
 * Google's answers that say this account cannot use the calendar at all: not found or not shared (404), refused
 * (403), credentials refused for that account (a deleted or suspended user under delegation). Anything else (5xx,
 * timeouts, rate limits, quota) passes and is retried.
 */
export function isNoAccess(err: unknown): boolean {
  return (
    isCalendarKind(err, "calendar_not_found") ||
    isCalendarKind(err, "not_found") ||
    isCalendarKind(err, "forbidden") ||
    isCalendarKind(err, "auth")
  );
}

/** One listing request (a minute's window): proves the calendar can be read, or throws Google's answer. */
export async function firstPage(cal: Pick<CalendarPort, "listManaged">, now: number): Promise<void> {
  const range = { timeMin: new Date(now).toISOString(), timeMax: new Date(now + 60_000).toISOString() };
  for await (const _ of cal.listManaged(range)) break;
}

/**
 * A moved event keeps its extended properties (the emulator and Google's move keep the event whole); should the private
 * ones not have come along (they are "private to this copy of the event"), calbridge's marks are patched back. Its
 * times mark is not: the event is not written at the body's times, and the one it keeps says what calbridge wrote there.
 */
export async function ensureMarks(to: Pick<CalendarPort, "patch">, event: CalEvent, body: RenderedEvent) {
  const have = event.extendedProperties?.private ?? {};
  const { [TIMES_PROPERTY]: _, ...want } = body.extendedProperties.private;
  if (Object.entries(want).every(([k, v]) => have[k] === v) || !event.id) return event;
  return to.patch(event.id, { extendedProperties: { private: want } }, { ifMatch: event.etag ?? undefined });
}

/**
 * Whether `from` (the calendar `old` reaches) and `to` (the one `dest` reaches) are one Google calendar written two ways:
 * an address and the same address in other letters, or `primary` and the account's own address (Google is asked which
 * calendar `primary` is). Ids that cannot name one calendar are not asked about.
 */
export async function oneCalendar(from: string, old: SourceCalendar, to: string, dest: () => Promise<SourceCalendar>) {
  if (!mayBeSameCalendar(from, to)) return false;
  if (sameCalendarId(from, to)) return true;
  const other = to === "primary" ? await dest() : undefined;
  try {
    const real = async (id: string, cal: SourceCalendar | undefined) => (cal ? cal.ownCalendarId() : id);
    const [a, b] = await Promise.all([real(from, from === "primary" ? old : undefined), real(to, other)]);
    return sameCalendarId(a, b);
  } finally {
    other?.close?.();
  }
}
