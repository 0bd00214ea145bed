// Owns how a window of instants becomes the list call's `date_from`/`date_to`. The spec names them "start date, ISO
// 8601" and says nothing more: not whether a date-time is accepted, not whether `date_to` includes its day, not in
// which time zone a day begins. So the safest form is sent, a plain date (YYYY-MM-DD), widened on each side by enough
// days that any reading covers the window (inclusive or exclusive, any UTC offset from -12 to +14 hours), and the
// appointments that do not overlap the window are dropped here, by their own start_time and end_time (as Google's
// timeMin/timeMax keeps the events that overlap it). Limits on date ranges are "not shown" either: a window the service
// refuses is listed in narrower pieces (RangeLimit).
import { BookingApiError } from "./errors.ts";
import { bookingInstant } from "./instant.ts";
import type { Appointment } from "./schemas.ts";
import type { AppointmentQuery } from "./types.ts";

const DAY_MS = 86_400_000;

/**
 * Days added on each side. `date_to` needs two: read as exclusive in a zone 14 hours ahead of UTC, the day after the
 * window's last UTC day ends at 10:00 UTC of that last day, before the window does. `date_from` needs one (a day that
 * begins 12 hours behind UTC); it gets two as well, in case the service reads it as exclusive too.
 */
export const DATE_SLACK_DAYS = 2;

export interface ListDates {
  date_from?: string;
  date_to?: string;
  /**
   * Whether an appointment of the wider list overlaps the window asked for: it starts at or before the window's end
   * and ends after its start (one without an end: starts at or after it).
   */
  within(appointment: Appointment): boolean;
}

/** The plain dates to send for `query`'s window, and the check that narrows the answer back to it. */
export function listDates(query: Pick<AppointmentQuery, "dateFrom" | "dateTo">): ListDates {
  const from = instant("dateFrom", query.dateFrom);
  const to = instant("dateTo", query.dateTo);
  return {
    ...(from !== undefined ? { date_from: plainDate(from - DATE_SLACK_DAYS * DAY_MS) } : {}),
    ...(to !== undefined ? { date_to: plainDate(to + DATE_SLACK_DAYS * DAY_MS) } : {}),
    within(appointment) {
      if (from === undefined && to === undefined) return true;
      const start = bookingInstant(appointment.start_time);
      // An item without a readable start is kept: the server matched it, and the sync reads it in full anyway.
      if (Number.isNaN(start)) return true;
      // Kept while it overlaps the window, as Google's timeMin/timeMax listing keeps its event: an appointment in
      // progress at the window's past edge is listed on both sides (else its event was a stray, read every run).
      const end = bookingInstant(appointment.end_time);
      const last = Number.isNaN(end) || end < start ? start : end;
      return (from === undefined || last > from || start >= from) && (to === undefined || start <= to);
    },
  };
}

function instant(name: string, value: string | undefined): number | undefined {
  if (value === undefined) return undefined;
  const ms = Date.parse(value);
  if (Number.isNaN(ms)) throw new TypeError(`listAppointments: ${name} must be an ISO 8601 instant, got ${value}`);
  return ms;
}

const plainDate = (ms: number) => new Date(ms).toISOString().slice(0, 10);

/** The narrowest window a refused range is split down to; refused at this width, the refusal is the caller's. */
export const MIN_SPLIT_MS = DAY_MS;

/**
 * Whether `error` is the service refusing the list's dates (the spec: "Limits on ... date ranges: not shown"): a 400 or
 * 422, or an invalid_request, that names date_from/date_to as the field, or names no field and speaks of dates.
 */
export function refusesDates(error: unknown): error is BookingApiError {
  if (!(error instanceof BookingApiError)) return false;
  if (!(error.status === 400 || error.status === 422 || error.code === "invalid_request")) return false;
  const field = error.details["field"];
  if (field === "date_from" || field === "date_to") return true;
  return field === undefined && /\bdate|\brange\b/i.test(error.message);
}

/**
 * The widest window the service has taken since it refused one, learned per process: each refusal halves it, so a
 * 97-day window against a 31-day limit costs three refused requests once, and the list calls after it are split from
 * the start (the rate budget is small: 60 requests a minute on the Standard plan).
 */
export class RangeLimit {
  #maxMs = Number.POSITIVE_INFINITY;

  get maxMs(): number {
    return this.#maxMs;
  }

  /**
   * Where the piece of `from`..`to` that begins at `from` ends: `to` when the rest fits, else the rest is cut into as
   * few equal pieces as fit and this is the end of the first.
   */
  pieceEnd(from: number, to: number): number {
    const n = Math.ceil((to - from) / this.#maxMs);
    return n <= 1 ? to : Math.round(from + (to - from) / n);
  }

  /** Learns from a refusal of a window `widthMs` wide; false when it is already as narrow as it may get. */
  refused(widthMs: number): boolean {
    if (widthMs <= MIN_SPLIT_MS) return false;
    this.#maxMs = Math.max(MIN_SPLIT_MS, Math.min(this.#maxMs, widthMs / 2));
    return true;
  }
}
