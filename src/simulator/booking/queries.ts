// Owns the simulated read queries: the filtered, paginated appointment list and the availability of open slots.
import { iso, parseTime, type SimAppointment, SimError } from "./model.ts";
import { fnv1a } from "./random.ts";
import type { BookingStore } from "./store.ts";
import { listItem } from "./views.ts";

const DAY = 86_400_000;
/** Larger per_page values are refused (400 invalid_request, details.field "per_page"), not clamped. */
export const PER_PAGE_MAX = 100;

const invalid = (field: string, message: string) => new SimError(400, "invalid_request", message, { field });

export interface ListResult<T> {
  data: T[];
  meta: { page: number; per_page: number; total: number; total_pages: number };
}

/** page / per_page as the spec defines them: integers, defaults 1 and 20, per_page at most 100. */
export function pageParams(params: URLSearchParams): { page: number; perPage: number } {
  const int = (name: string, fallback: number, min: number, max: number): number => {
    const raw = params.get(name);
    if (raw === null || raw === "") return fallback;
    const n = Number(raw);
    if (!Number.isInteger(n) || n < min || n > max)
      throw invalid(name, `${name} must be an integer from ${min} to ${max}`);
    return n;
  };
  return { page: int("page", 1, 1, 1_000_000), perPage: int("per_page", 20, 1, PER_PAGE_MAX) };
}

export function paginate<T>(all: T[], params: URLSearchParams): ListResult<T> {
  const { page, perPage } = pageParams(params);
  const total = all.length;
  return {
    data: all.slice((page - 1) * perPage, page * perPage),
    meta: { page, per_page: perPage, total, total_pages: Math.ceil(total / perPage) },
  };
}

/**
 * How the service reads the plain dates of `date_from`/`date_to`. The spec says "start date, ISO 8601" and no more, so
 * the simulator takes only the strictest form, YYYY-MM-DD (a date-time is refused), and how it reads the day is
 * settable, so that tests can check the client's window holds under any reading: a day begins at 00:00 at
 * `utcOffsetMinutes` (default 0, UTC), `date_from` includes its day, and `date_to` includes its day or, with
 * `dateToExclusive`, ends where its day begins.
 */
export interface DateReading {
  utcOffsetMinutes: number;
  dateToExclusive: boolean;
  /**
   * Most days from date_from to date_to, both counted (the spec: "Limits on ... date ranges: not shown"); a wider
   * range is refused with 400 invalid_request naming date_to. Default: no limit.
   */
  maxRangeDays: number | undefined;
}

export const defaultDateReading = (): DateReading => ({
  utcOffsetMinutes: 0,
  dateToExclusive: false,
  maxRangeDays: undefined,
});

/**
 * date_from / date_to filter on start_time, read as `reading` says. status, therapist_id and customer_id compare for
 * equality (any status value is accepted).
 */
export function listAppointments(
  store: BookingStore,
  params: URLSearchParams,
  reading: DateReading = defaultDateReading(),
): ListResult<Record<string, unknown>> {
  const dayStart = (name: string): number | undefined => {
    const raw = params.get(name);
    if (raw === null || raw === "") return undefined;
    const ms = /^\d{4}-\d{2}-\d{2}$/.test(raw) ? parseTime(raw) : undefined;
    if (ms === undefined || iso(ms).slice(0, 10) !== raw)
      throw invalid(
        name,
        `${name} must be a date, YYYY-MM-DD (the spec's "${name === "date_from" ? "start" : "end"} date")`,
      );
    return ms - reading.utcOffsetMinutes * 60_000;
  };
  const from = dayStart("date_from");
  const toDay = dayStart("date_to");
  const to = toDay === undefined ? undefined : reading.dateToExclusive ? toDay - 1 : toDay + DAY - 1;
  const max = reading.maxRangeDays;
  if (max !== undefined && from !== undefined && toDay !== undefined && (toDay - from) / DAY + 1 > max)
    throw invalid("date_to", `the date range may span at most ${max} days`);
  // Strict: a service that limits the range has an end to measure it by (how one answers an open range: not shown).
  if (max !== undefined && from !== undefined && toDay === undefined)
    throw invalid("date_to", `date_to is required: the date range may span at most ${max} days`);
  const status = params.get("status") || undefined;
  const therapist = params.get("therapist_id") || undefined;
  const customer = params.get("customer_id") || undefined;
  pageParams(params);
  const match = (a: SimAppointment) =>
    (from === undefined || a.start >= from) &&
    (to === undefined || a.start <= to) &&
    (status === undefined || a.status === status) &&
    (therapist === undefined || a.therapist_id === therapist) &&
    (customer === undefined || a.customer_id === customer);
  const list = paginate(store.ordered().filter(match), params);
  return { data: list.data.map((a) => listItem(a, store)), meta: list.meta };
}

/**
 * Open slots on a date: every therapist's free starts on a 30-minute grid within working hours, not in the past.
 * Slots are grouped per therapist, therapists in a per-date hash order: deliberately not ordered by time.
 */
export function availability(store: BookingStore, params: URLSearchParams): Record<string, unknown> {
  const serviceId = params.get("service_id");
  if (!serviceId) throw invalid("service_id", "service_id is required");
  const date = params.get("date");
  if (!date || !/^\d{4}-\d{2}-\d{2}$/.test(date) || parseTime(date) === undefined) {
    throw invalid("date", "date is required, as YYYY-MM-DD");
  }
  const service = store.service(serviceId);
  if (!service) throw new SimError(404, "service_not_found", `no service ${serviceId}`, { field: "service_id" });
  const therapistId = params.get("therapist_id");
  if (therapistId && !store.therapist(therapistId)) throw invalid("therapist_id", `no therapist ${therapistId}`);
  const rawDuration = params.get("duration");
  const duration = rawDuration ? Number(rawDuration) : service.duration_minutes;
  if (!Number.isInteger(duration) || duration < 5 || duration > 600)
    throw invalid("duration", "duration must be minutes, 5 to 600");
  const day = parseTime(date)!;
  const { start: h0, end: h1 } = store.workingHours;
  const ids = therapistId ? [therapistId] : [...store.therapists.keys()];
  ids.sort((a, b) => fnv1a(date + a) - fnv1a(date + b));
  const now = store.now();
  const slots: Record<string, unknown>[] = [];
  for (const id of ids) {
    const t = store.therapist(id)!;
    for (let s = day + h0 * 3_600_000; s + duration * 60_000 <= day + h1 * 3_600_000; s += 30 * 60_000) {
      const e = s + duration * 60_000;
      if (s < now || store.overlapping(id, s, e)) continue;
      slots.push({ start_time: iso(s), end_time: iso(e), therapist_id: id, therapist_name: t.name });
    }
  }
  return { date, service_id: serviceId, slots };
}
