// Owns reading the booking service's timestamps (start_time, end_time, updated_at, a webhook's created_at). The spec:
// "Timestamps are ISO 8601 strings in UTC". A date-time written without a designator ("2026-11-29T10:00:00") is UTC by
// that sentence, but Date.parse reads such a form as the process's local time: on a server whose TZ is set to a local
// zone every appointment was placed off by the zone's offset, and a therapist's move, taken by the service, was judged
// "not applied" and put back. Calendar (Google) times carry an offset or a timeZone of their own and are not read here.

/** A date-time without Z or an offset: date, then a time to the minute, second or fraction of a second. */
const NO_DESIGNATOR = /^(\d{4}-\d{2}-\d{2})[Tt ](\d{2}:\d{2}(?::\d{2}(?:\.\d+)?)?)$/;

/** Epoch milliseconds of a booking timestamp, read as UTC when it names no offset; NaN when missing or unreadable. */
export function bookingInstant(text: string | null | undefined): number {
  if (!text) return Number.NaN;
  const trimmed = text.trim();
  const local = NO_DESIGNATOR.exec(trimmed);
  return Date.parse(local ? `${local[1]}T${local[2]}Z` : trimmed);
}
