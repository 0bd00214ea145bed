// Owns recurrence in the emulator: the RRULE subset it expands (FREQ=DAILY|WEEKLY, INTERVAL, COUNT, UNTIL, BYDAY for
// weekly rules), wall-clock expansion in the series' time zone, and the ids of instances (<id>_<UTC basic time>).
// Anything outside the subset answers 400 with a message that says so, instead of expanding into something else.
import { ApiError } from "./http.ts";
import { formatInZone, localToInstant, type ParsedTime } from "./time.ts";

const DAY_MS = 86_400_000;
const WEEKDAYS = ["SU", "MO", "TU", "WE", "TH", "FR", "SA"];
const SUPPORTED = "the emulator expands RRULE with FREQ=DAILY or WEEKLY, INTERVAL, COUNT or UNTIL, and BYDAY (weekly)";
/** No series is walked further than this many steps in one expansion (a guard, not a Google rule). */
const MAX_STEPS = 100_000;

export interface Rule {
  freq: "DAILY" | "WEEKLY";
  interval: number;
  count?: number;
  /** UNTIL as an instant (date-time form), inclusive. */
  untilMs?: number;
  /** UNTIL as a date (YYYY-MM-DD, date form), inclusive, compared with the instance's local date. */
  untilDate?: string;
  /** Weekdays, 0 = Sunday. */
  byDay?: number[];
  /** Week start, 0 = Sunday (RFC 5545 default MO). */
  wkst: number;
}

/** One occurrence of a series: its start and end as they are stored for events. */
export interface Occurrence {
  start: ParsedTime;
  end: ParsedTime;
  /** The part after "_" in the instance id: UTC basic time (20261130T090000Z), or the date (20261130) all day. */
  suffix: string;
}

const invalid = (detail: string) => new ApiError(400, "invalid", `Invalid recurrence rule: ${detail} (${SUPPORTED}).`);

function parseUntil(value: string): { untilMs?: number; untilDate?: string } {
  const date = /^(\d{4})(\d{2})(\d{2})$/.exec(value);
  if (date) return { untilDate: `${date[1]}-${date[2]}-${date[3]}` };
  const time = /^(\d{4})(\d{2})(\d{2})T(\d{2})(\d{2})(\d{2})Z$/.exec(value);
  if (!time) throw invalid(`UNTIL=${value} is neither a date (YYYYMMDD) nor a UTC date-time (YYYYMMDDTHHMMSSZ)`);
  const [, y, mo, d, h, mi, s] = time;
  return { untilMs: Date.UTC(+y!, +mo! - 1, +d!, +h!, +mi!, +s!) };
}

/**
 * Reads an event's `recurrence` (RFC 5545 lines). Google accepts RRULE, EXRULE, RDATE and EXDATE lines; this emulator
 * only RRULE, one of them, in the subset above: everything else is a 400 that names what is not supported.
 */
export function parseRecurrence(value: unknown): Rule {
  if (!Array.isArray(value) || value.some((l) => typeof l !== "string")) {
    throw new ApiError(400, "invalid", "Invalid recurrence: a list of RFC 5545 lines is expected.");
  }
  const lines = value as string[];
  const other = lines.find((l) => !/^RRULE:/i.test(l));
  if (other !== undefined) throw invalid(`"${other.slice(0, 60)}" is not supported`);
  if (lines.length !== 1) throw invalid("exactly one RRULE line is expected");
  const parts = new Map<string, string>();
  for (const part of lines[0]!.slice("RRULE:".length).split(";")) {
    const eq = part.indexOf("=");
    if (eq < 1) throw invalid(`malformed part "${part}"`);
    parts.set(part.slice(0, eq).toUpperCase(), part.slice(eq + 1).toUpperCase());
  }
  const freq = parts.get("FREQ");
  if (freq !== "DAILY" && freq !== "WEEKLY") throw invalid(`FREQ=${freq ?? "(missing)"} is not supported`);
  const rule: Rule = { freq, interval: 1, wkst: 1 };
  for (const [key, raw] of parts) {
    if (key === "FREQ") continue;
    if (key === "INTERVAL" || key === "COUNT") {
      const n = Number(raw);
      if (!Number.isInteger(n) || n < 1) throw invalid(`${key}=${raw} must be a positive integer`);
      if (key === "INTERVAL") rule.interval = n;
      else rule.count = n;
    } else if (key === "UNTIL") {
      Object.assign(rule, parseUntil(raw));
    } else if (key === "BYDAY" && freq === "WEEKLY") {
      const days = raw.split(",").map((d) => WEEKDAYS.indexOf(d));
      if (days.some((d) => d < 0)) throw invalid(`BYDAY=${raw} must list plain weekdays (MO,TU,...)`);
      rule.byDay = [...new Set(days)];
    } else if (key === "WKST") {
      rule.wkst = WEEKDAYS.indexOf(raw);
      if (rule.wkst < 0) throw invalid(`WKST=${raw} is not a weekday`);
    } else {
      throw invalid(`${key} is not supported${key === "BYDAY" ? " with FREQ=DAILY" : ""}`);
    }
  }
  // RFC 5545 3.3.10: UNTIL and COUNT MUST NOT occur in the same rule.
  if (rule.count !== undefined && (rule.untilMs !== undefined || rule.untilDate !== undefined)) {
    throw invalid("COUNT and UNTIL cannot be used together");
  }
  return rule;
}

const isoDay = (day: number) => new Date(day * DAY_MS).toISOString().slice(0, 10);
const weekday = (day: number) => (((day + 4) % 7) + 7) % 7; // 1970-01-01 was a Thursday

/** The series' first instance in its own terms: local day number, local time of day, zone. */
function anchor(start: ParsedTime, zone: string): { day: number; time: string } {
  if (start.allDay) return { day: Date.parse(`${start.stored.date}T00:00:00Z`) / DAY_MS, time: "" };
  const local = formatInZone(start.ms, zone).slice(0, 19);
  return { day: Date.parse(`${local.slice(0, 10)}T00:00:00Z`) / DAY_MS, time: local.slice(11) };
}

/** Days (local day numbers) on which the rule's instances start, in order, without end. */
function* days(rule: Rule, first: number): Generator<number> {
  const step = rule.freq === "DAILY" ? rule.interval : 7 * rule.interval;
  if (!rule.byDay) {
    for (let day = first; ; day += step) yield day;
  }
  const weekStart = first - ((weekday(first) - rule.wkst + 7) % 7);
  const offsets = rule.byDay.map((d) => (d - rule.wkst + 7) % 7).sort((a, b) => a - b);
  for (let base = weekStart; ; base += step) {
    for (const offset of offsets) if (base + offset >= first) yield base + offset;
  }
}

/**
 * The series' occurrences in order, while they start before `untilMs` (exclusive; the caller's window end or horizon).
 * Timed series keep their local wall time in `zone` across DST changes, as Google's do.
 */
export function* occurrences(
  rule: Rule,
  start: ParsedTime,
  end: ParsedTime,
  zone: string,
  untilMs: number,
): Generator<Occurrence> {
  const { day: first, time } = anchor(start, zone);
  if (rule.byDay && !rule.byDay.includes(weekday(first))) {
    throw invalid(`the first instance falls on ${WEEKDAYS[weekday(first)]}, which BYDAY does not list`);
  }
  const duration = end.ms - start.ms;
  let produced = 0;
  let steps = 0;
  for (const day of days(rule, first)) {
    if (++steps > MAX_STEPS || (rule.count !== undefined && produced >= rule.count)) return;
    const date = isoDay(day);
    if (rule.untilDate !== undefined && date > rule.untilDate) return;
    if (start.allDay) {
      const ms = day * DAY_MS;
      if ((rule.untilMs !== undefined && ms > rule.untilMs) || ms >= untilMs) return;
      const endDate = isoDay(day + Math.round(duration / DAY_MS));
      produced += 1;
      yield {
        start: { ms, allDay: true, stored: { date } },
        end: { ms: ms + duration, allDay: true, stored: { date: endDate } },
        suffix: date.replaceAll("-", ""),
      };
      continue;
    }
    const ms = localToInstant(`${date}T${time}`, zone);
    if ((rule.untilMs !== undefined && ms > rule.untilMs) || ms >= untilMs) return;
    produced += 1;
    yield {
      start: { ms, allDay: false, stored: { ...start.stored } },
      end: { ms: ms + duration, allDay: false, stored: { ...end.stored } },
      suffix: basicUtc(ms),
    };
  }
}

/** `20261130T090000Z`: how Google writes an instance's original start into its id. */
export function basicUtc(ms: number): string {
  return new Date(ms).toISOString().slice(0, 19).replaceAll("-", "").replaceAll(":", "") + "Z";
}

/** Splits `<master>_<suffix>`; undefined when the id has no instance form. */
export function splitInstanceId(id: string): { masterId: string; suffix: string } | undefined {
  const m = /^(.+)_(\d{8}(?:T\d{6}Z)?)$/.exec(id);
  return m ? { masterId: m[1]!, suffix: m[2]! } : undefined;
}
