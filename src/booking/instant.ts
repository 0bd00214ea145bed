// Owns reading the booking service's timestamps (start_time, end_time, updated_at, a webhook's created_at). The spec:
// "Timestamps are ISO 8601 strings in UTC". A date-time written without a designator ("2026-11-29T10:00:00") is UTC by
// that sentence, but Date.parse reads such a form as the process's local time: on a server whose TZ is set to a local
// zone every appointment was placed off by the zone's offset, and a therapist's move, taken by the service, was judged
// "not applied" and put back. Calendar (Google) times carry an offset or a timeZone of their own and are not read here.

/** A date-time without Z or an offset: date, then a time to the minute, second or fraction of a second. */
const NO_DESIGNATOR = /^(\d{4}-\d{2}-\d{2})[Tt ](\d{2}:\d{2}(?::\d{2}(?:\.\d+)?)?)$/;

/** An offset of hours only ("+01", ISO 8601's ±hh), which Date.parse refuses: read as ±hh:00. */
const HOURS_OFFSET = /^(\d{4}-\d{2}-\d{2}[Tt ]\d{2}:\d{2}(?::\d{2}(?:\.\d+)?)?)([+-]\d{2})$/;

/** Epoch milliseconds of a booking timestamp, read as UTC when it names no offset; NaN when missing or unreadable. */
export function bookingInstant(text: string | null | undefined): number {
  if (!text) return Number.NaN;
  const trimmed = text.trim();
  const local = NO_DESIGNATOR.exec(trimmed);
  if (local) return Date.parse(`${local[1]}T${local[2]}Z`);
  // ISO 8601 allows an offset in hours alone; refused, the appointment's event could not be written at all.
  const hours = HOURS_OFFSET.exec(trimmed);
  return Date.parse(hours ? `${hours[1]}${hours[2]}:00` : trimmed);
}
