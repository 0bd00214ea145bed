// Owns which events a listing holds: series expanded or not (singleEvents), deleted events and exceptions, time and
// property filters, order, and the changes an incremental sync reports.
import type { EventRecord } from "./event-model.ts";
import { ApiError } from "./http.ts";
import { occurrences } from "./recurrence.ts";
import { findInstance, HORIZON_MS, instancesOf, ruleOf, vanishedSince } from "./series.ts";
import type { CalendarRecord } from "./store.ts";
import { localToInstant, type ParsedTime, parseRfc3339 } from "./time.ts";

export type Query = Record<string, string | string[]>;

export const one = (q: Query, key: string): string | undefined => {
  const v = q[key];
  return Array.isArray(v) ? v[0] : v;
};
const all = (q: Query, key: string): string[] => {
  const v = q[key];
  return v === undefined ? [] : Array.isArray(v) ? v : [v];
};

export function bound(q: Query, key: string): number | undefined {
  const text = one(q, key);
  if (text === undefined) return undefined;
  const ms = parseRfc3339(text);
  if (Number.isNaN(ms)) throw new ApiError(400, "badRequest", `Bad Request: ${key} must be RFC 3339 with an offset.`);
  return ms;
}

/**
 * Where an event time lies for timeMin and timeMax: an all-day date from midnight in the calendar's zone. Google applies
 * the bounds to all-day events in the calendar's zone (or the request's timeZone, which changes the range returned,
 * not only how times are written: googleapis/google-api-dotnet-client #1778); the emulator placed them at midnight UTC,
 * an hour or more off in any other zone.
 */
function placed(t: ParsedTime, cal: CalendarRecord): number {
  return t.allDay && t.stored.date ? localToInstant(`${t.stored.date}T00:00:00`, cal.timeZone) : t.ms;
}

function propertyFilter(specs: string[], props: Record<string, string> | undefined): boolean {
  return specs.every((spec) => {
    const eq = spec.indexOf("=");
    if (eq < 1) throw new ApiError(400, "invalid", "Invalid extended property filter.");
    return props?.[spec.slice(0, eq)] === spec.slice(eq + 1);
  });
}

/** Whether a series master has an instance overlapping [timeMin, timeMax) (bounds exclusive as for single events). */
function seriesOverlaps(cal: CalendarRecord, master: EventRecord, timeMin: number | undefined, until: number) {
  const rule = ruleOf(master);
  if (!rule) return false;
  const zone = master.start.stored.timeZone ?? cal.timeZone;
  for (const occ of occurrences(rule, master.start, master.end, zone, until)) {
    if (timeMin === undefined || occ.end.ms > timeMin) return true;
  }
  return false;
}

/**
 * The events of a full listing. Google's reference (events.list): singleEvents expands series "and only return[s]
 * single one-off events and instances of recurring events, but not the underlying recurring events themselves";
 * showDeleted: "Cancelled instances of recurring events (but not the underlying recurring event) will still be
 * included if showDeleted and singleEvents are both False"; Event.status: cancelled events come back "only on
 * incremental sync (when syncToken or updatedMin are specified) or if the showDeleted flag is set to true".
 */
export function selectEvents(cal: CalendarRecord, q: Query, now: number): EventRecord[] {
  const timeMin = bound(q, "timeMin");
  const timeMax = bound(q, "timeMax");
  const updatedMin = bound(q, "updatedMin");
  if (timeMin !== undefined && timeMax !== undefined && timeMin >= timeMax) throw new ApiError(400, "timeRangeEmpty");
  const singleEvents = one(q, "singleEvents") === "true";
  const orderBy = one(q, "orderBy");
  if (orderBy !== undefined && orderBy !== "startTime" && orderBy !== "updated") {
    throw new ApiError(400, "invalid", "Invalid orderBy value.");
  }
  if (orderBy === "startTime" && !singleEvents) {
    throw new ApiError(400, "badRequest", "The requested ordering is not available for the particular query.");
  }
  const showDeleted = one(q, "showDeleted") === "true" || updatedMin !== undefined;
  const privateSpecs = all(q, "privateExtendedProperty");
  const sharedSpecs = all(q, "sharedExtendedProperty");
  const text = one(q, "q")?.toLowerCase();
  const iCalUID = one(q, "iCalUID");
  const until = Math.min(timeMax ?? Number.POSITIVE_INFINITY, now + HORIZON_MS);
  const candidates: EventRecord[] = [];
  for (const rec of cal.events.values()) {
    if (!singleEvents) candidates.push(rec);
    else if (rec.recurringEventId !== undefined)
      continue; // listed through its series
    else if (ruleOf(rec)) candidates.push(...instancesOf(cal, rec, until));
    else candidates.push(rec);
  }
  const out = candidates.filter((r) => {
    if (r.status === "cancelled" && !showDeleted && (singleEvents || r.recurringEventId === undefined)) return false;
    if (!singleEvents && ruleOf(r)) {
      if (!seriesOverlaps(cal, r, timeMin, until)) return false;
    } else {
      // timeMin bounds the end, timeMax the start, both exclusive.
      if (timeMin !== undefined && !(placed(r.end, cal) > timeMin)) return false;
      if (timeMax !== undefined && !(placed(r.start, cal) < timeMax)) return false;
    }
    if (updatedMin !== undefined && r.updated < updatedMin) return false;
    if (iCalUID !== undefined && `${r.recurringEventId ?? r.id}@google.com` !== iCalUID) return false;
    const props = r.fields.extendedProperties as { private?: Record<string, string>; shared?: Record<string, string> };
    if (!propertyFilter(privateSpecs, props?.private)) return false;
    if (!propertyFilter(sharedSpecs, props?.shared)) return false;
    if (text) {
      const hay = `${r.fields.summary ?? ""}\n${r.fields.description ?? ""}\n${r.fields.location ?? ""}`.toLowerCase();
      if (!hay.includes(text)) return false;
    }
    return true;
  });
  if (orderBy === "startTime") out.sort((a, b) => a.start.ms - b.start.ms);
  else if (orderBy === "updated") out.sort((a, b) => a.updated - b.updated);
  else out.sort((a, b) => a.created - b.created || (a.id < b.id ? -1 : 1));
  return out;
}

/**
 * What changed since a sync token's position, in the token's own terms: with singleEvents a changed series reports
 * its instances (a changed exception only itself), without it masters and exceptions come as they are stored.
 */
export function changedSince(cal: CalendarRecord, since: number, singleEvents: boolean, now: number): EventRecord[] {
  const changed = [...cal.events.values()].filter((r) => r.seq > since).sort((a, b) => a.seq - b.seq);
  if (!singleEvents) return changed;
  const out: EventRecord[] = [];
  for (const rec of changed) {
    if (rec.recurringEventId !== undefined) {
      const master = cal.events.get(rec.recurringEventId);
      if (master && master.seq > since) continue; // the series' own expansion reports it
      out.push(findInstance(cal, rec.id) ?? rec);
    } else {
      out.push(...vanishedSince(cal, rec, since, now + HORIZON_MS));
      if (ruleOf(rec)) out.push(...instancesOf(cal, rec, now + HORIZON_MS));
      else out.push(rec);
    }
  }
  return out;
}

/** events.instances: the series' instances in [timeMin, timeMax), cancelled ones only with showDeleted. */
export function selectInstances(cal: CalendarRecord, master: EventRecord, q: Query, now: number): EventRecord[] {
  if (!ruleOf(master)) throw new ApiError(400, "invalid", "The event is not a recurring event.");
  const timeMin = bound(q, "timeMin");
  const timeMax = bound(q, "timeMax");
  const showDeleted = one(q, "showDeleted") === "true";
  const until = Math.min(timeMax ?? Number.POSITIVE_INFINITY, now + HORIZON_MS);
  return [...instancesOf(cal, master, until)].filter(
    (r) => (showDeleted || r.status !== "cancelled") && (timeMin === undefined || r.end.ms > timeMin),
  );
}
