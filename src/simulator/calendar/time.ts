// Owns time handling of the emulator: RFC 3339 parsing, IANA zone offsets, and Google's way of echoing event times.
import { ApiError } from "./http.ts";

const OFFSET_SUFFIX = /(Z|[+-]\d{2}:\d{2})$/i;
const LOCAL_DATE_TIME = /^(\d{4})-(\d{2})-(\d{2})T(\d{2}):(\d{2})(?::(\d{2})(?:\.(\d+))?)?$/;
const DATE_ONLY = /^\d{4}-\d{2}-\d{2}$/;
const DAY_MS = 86_400_000;

/** One formatter per zone: Intl formatters hold native memory the garbage collector does not see. */
const offsetFormatters = new Map<string, Intl.DateTimeFormat>();

function offsetFormatter(zone: string): Intl.DateTimeFormat {
  let f = offsetFormatters.get(zone);
  if (!f) {
    f = new Intl.DateTimeFormat("en-US", { timeZone: zone, timeZoneName: "longOffset" });
    offsetFormatters.set(zone, f);
  }
  return f;
}

/**
 * Whether Google takes `zone` as an event's timeZone: "an IANA Time Zone Database name" (EventDateTime.timeZone).
 * Node's Intl also takes UTC offsets (`+01:00`, `+0100`, `-05`), which Google answers with 400 "Invalid time zone
 * definition for start time." (n8n-io/n8n#2995, phw198/OutlookGoogleCalendarSync#1525): refused here too.
 */
export function isValidZone(zone: string): boolean {
  if (/^[+\-\u2212]/.test(zone.trim())) return false;
  try {
    return !/^[+-]\d/.test(offsetFormatter(zone).resolvedOptions().timeZone);
  } catch {
    return false;
  }
}

/** Offset of `zone` at instant `ms`, in minutes east of UTC. */
export function offsetMinutes(ms: number, zone: string): number {
  const name = offsetFormatter(zone)
    .formatToParts(new Date(ms))
    .find((p) => p.type === "timeZoneName")?.value;
  const m = /GMT([+-])(\d{2}):?(\d{2})?/.exec(name ?? "");
  if (!m) return 0;
  const minutes = Number(m[2]) * 60 + Number(m[3] ?? 0);
  return m[1] === "-" ? -minutes : minutes;
}

/** `2026-11-23T10:00:00+01:00` (or `...Z` in UTC): the instant as wall time of `zone`. */
export function formatInZone(ms: number, zone: string): string {
  const offset = offsetMinutes(ms, zone);
  const local = new Date(ms + offset * 60_000).toISOString().slice(0, 19);
  if (offset === 0) return `${local}Z`;
  const abs = Math.abs(offset);
  const sign = offset < 0 ? "-" : "+";
  return `${local}${sign}${String(Math.floor(abs / 60)).padStart(2, "0")}:${String(abs % 60).padStart(2, "0")}`;
}

/**
 * A local wall time (no offset) in `zone` as an instant. Around a daylight-saving change, as RFC 5545 (3.3.5) and
 * java.time's ZonedDateTime.ofLocal read such times: one that occurs twice (the hour the clocks go back) is its first
 * occurrence, and one that does not occur (the hour they skip) is read with the offset before the gap (02:30 on a
 * spring-forward night is 03:30 of the new offset). Not confirmed against Google, which at least reads one way in every
 * zone: two guesses from the offset at the wall time read as UTC gave 03:30 in Berlin but 01:30 in New York for the
 * same skipped 02:30, and the second 02:30 in Berlin but the first 01:30 in New York (tz audit).
 */
export function localToInstant(text: string, zone: string): number {
  const m = LOCAL_DATE_TIME.exec(text);
  if (!m) return Number.NaN;
  const [, y, mo, d, h, mi, s, frac] = m;
  const wall = Date.UTC(+y!, +mo! - 1, +d!, +h!, +mi!, +(s ?? 0), Number(`0.${frac ?? 0}`) * 1000);
  // The offsets a day either side: a change of offset near the wall time lies between them.
  const before = offsetMinutes(wall - DAY_MS, zone);
  const after = offsetMinutes(wall + DAY_MS, zone);
  const reads = [wall - before * 60_000, wall - after * 60_000].filter(
    (ms) => wall - offsetMinutes(ms, zone) * 60_000 === ms,
  );
  return reads.length > 0 ? Math.min(...reads) : wall - before * 60_000;
}

/** A strict RFC 3339 timestamp with offset (as list bounds must be), or NaN. */
export function parseRfc3339(text: string): number {
  if (!OFFSET_SUFFIX.test(text) || !/^\d{4}-\d{2}-\d{2}T/.test(text)) return Number.NaN;
  return Date.parse(text);
}

export interface ParsedTime {
  ms: number;
  allDay: boolean;
  /** What to keep: date, or dateTime instant with the event's own timeZone (if given). */
  stored: { date?: string; timeZone?: string };
}

/** Reads an EventDateTime; throws Google-style 400s for missing or malformed values. */
export function parseEventTime(value: unknown, which: "start" | "end"): ParsedTime {
  if (!value || typeof value !== "object") throw new ApiError(400, "required", `Missing ${which} time.`);
  const t = value as { date?: unknown; dateTime?: unknown; timeZone?: unknown };
  // A time is a date (all-day) or a dateTime, not both: Google answers 400 invalid "Invalid start time." to a start
  // that carries both, which is what a patch of an all-day event to a timed one (or back) leaves when it does not clear
  // the other field with null, as patches merge start and end field by field (n8n-io/n8n #35800, 2026, the whole
  // answer, "in either direction"; gemini-cli-extensions/workspace #435; googleapis/google-api-dotnet-client #740 and
  // google-api-nodejs-client #1559: `date` "must be set to null" to make an all-day event timed by patch). The reports
  // are all of patches, which Google checks once merged; an insert or update body with both is taken to be refused the
  // same way (unreported), the strict reading.
  if (typeof t.date === "string" && typeof t.dateTime === "string") {
    throw new ApiError(400, "invalid", `Invalid ${which} time.`);
  }
  const zone = typeof t.timeZone === "string" && t.timeZone ? t.timeZone : undefined;
  if (zone && !isValidZone(zone)) throw new ApiError(400, "invalid", `Invalid time zone definition for ${which} time.`);
  if (typeof t.date === "string" && t.dateTime === undefined) {
    if (!DATE_ONLY.test(t.date)) throw new ApiError(400, "invalid", `Invalid ${which} time.`);
    return { ms: Date.parse(`${t.date}T00:00:00Z`), allDay: true, stored: { date: t.date } };
  }
  if (typeof t.dateTime !== "string") throw new ApiError(400, "required", `Missing ${which} time.`);
  let ms: number;
  // EventDateTime.dateTime: "A time zone offset is required unless a time zone is explicitly specified in timeZone"
  // (Events reference); Google's 400 then reads "Missing time zone definition for start time." (reported for
  // recurring events, google-api-python-client and Stack Overflow threads). Not the calendar's zone in its place.
  if (OFFSET_SUFFIX.test(t.dateTime)) ms = Date.parse(t.dateTime);
  else if (zone) ms = localToInstant(t.dateTime, zone);
  else throw new ApiError(400, "invalid", `Missing time zone definition for ${which} time.`);
  if (Number.isNaN(ms)) throw new ApiError(400, "invalid", `Invalid ${which} time.`);
  return { ms, allDay: false, stored: zone ? { timeZone: zone } : {} };
}

/** How Google echoes a time: dateTime in the event's zone (or the calendar's) with an offset, plus the given zone. */
export function renderEventTime(ms: number, allDay: boolean, stored: ParsedTime["stored"], calendarZone: string) {
  if (allDay) return { date: stored.date };
  const out: { dateTime: string; timeZone?: string } = { dateTime: formatInZone(ms, stored.timeZone ?? calendarZone) };
  if (stored.timeZone) out.timeZone = stored.timeZone;
  return out;
}
