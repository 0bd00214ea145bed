// Owns recurring series in the store's terms: the instances of a master (stored exceptions in their place), finding an
// instance by its id, and how far a series without end is expanded.
import type { EventRecord, SeriesShape } from "./event-model.ts";
import { occurrences, parseRecurrence, type Rule, splitInstanceId } from "./recurrence.ts";

const DAY_MS = 86_400_000;
/**
 * How far past the clock's now an open-ended expansion goes (a listing without timeMax, an incremental sync). Google
 * does not document its own limit (google-api-ruby-client #860 reports a bounded window of instances); one year here.
 */
export const HORIZON_MS = 366 * DAY_MS;

interface SeriesCalendar {
  timeZone: string;
  events: Map<string, EventRecord>;
}

/** The rule of a series master; undefined for single events and instances. */
export function ruleOf(rec: EventRecord): Rule | undefined {
  if (rec.recurringEventId !== undefined || rec.fields.recurrence === undefined) return undefined;
  return parseRecurrence(rec.fields.recurrence);
}

/** An instance as the master makes it: the master's fields (extended properties included), its own times and id. */
function virtualInstance(master: EventRecord, start: EventRecord["start"], end: EventRecord["end"], suffix: string) {
  const fields = structuredClone(master.fields);
  delete fields.recurrence;
  const rec: EventRecord = {
    id: `${master.id}_${suffix}`,
    fields,
    start,
    end,
    status: master.status,
    created: master.created,
    updated: master.updated,
    etag: master.etag,
    seq: master.seq,
    sequence: master.sequence,
    eventType: master.eventType,
    recurringEventId: master.id,
    originalStart: start,
  };
  if (master.deletedBy) rec.deletedBy = master.deletedBy;
  if (master.movedAway) rec.movedAway = true;
  return rec;
}

/** An exception as seen through its series: cancelled while the whole series is. */
function throughSeries(master: EventRecord, exception: EventRecord): EventRecord {
  return master.status === "cancelled" && exception.status !== "cancelled"
    ? { ...exception, status: "cancelled", seq: Math.max(exception.seq, master.seq) }
    : exception;
}

/** The master's instances that start before `untilMs`, in order; a stored exception replaces its instance. */
export function* instancesOf(cal: SeriesCalendar, master: EventRecord, untilMs: number): Generator<EventRecord> {
  const rule = ruleOf(master);
  if (!rule) return;
  const zone = master.start.stored.timeZone ?? cal.timeZone;
  for (const occ of occurrences(rule, master.start, master.end, zone, untilMs)) {
    const exception = cal.events.get(`${master.id}_${occ.suffix}`);
    yield exception ? throughSeries(master, exception) : virtualInstance(master, occ.start, occ.end, occ.suffix);
  }
}

/** Start (ms) an instance id's suffix names. */
function suffixMs(suffix: string): number {
  const m = /^(\d{4})(\d{2})(\d{2})(?:T(\d{2})(\d{2})(\d{2})Z)?$/.exec(suffix);
  if (!m) return Number.NaN;
  return Date.UTC(+m[1]!, +m[2]! - 1, +m[3]!, +(m[4] ?? 0), +(m[5] ?? 0), +(m[6] ?? 0));
}

/** The instance `id` when the id names one of a series' occurrences (stored exception or built now). */
export function findInstance(cal: SeriesCalendar, id: string): EventRecord | undefined {
  const stored = cal.events.get(id);
  const parts = splitInstanceId(id);
  if (!parts) return stored;
  const master = cal.events.get(parts.masterId);
  if (!master || !ruleOf(master)) return stored;
  if (stored) return throughSeries(master, stored);
  const at = suffixMs(parts.suffix);
  if (Number.isNaN(at)) return undefined;
  for (const rec of instancesOf(cal, master, at + DAY_MS + 1)) if (rec.id === id) return rec;
  return undefined;
}

/** The ids (with original starts) a shape of the event stood for in an expanded listing. */
function idsOf(cal: SeriesCalendar, id: string, shape: Omit<SeriesShape, "until">, untilMs: number) {
  if (shape.recurrence === undefined) return new Map([[id, undefined]]);
  const zone = shape.start.stored.timeZone ?? cal.timeZone;
  const out = new Map<string, EventRecord["start"] | undefined>();
  for (const occ of occurrences(parseRecurrence(shape.recurrence), shape.start, shape.end, zone, untilMs)) {
    out.set(`${id}_${occ.suffix}`, occ.start);
  }
  return out;
}

/**
 * What an expanded listing made at history position `since` held of `rec` and holds no more: an event made into a
 * series (its single entry), instances a changed rule no longer has. An incremental sync reports them as deleted, with
 * nothing but their identity, so that a client's copy of the expanded listing stays right.
 */
export function vanishedSince(cal: SeriesCalendar, rec: EventRecord, since: number, untilMs: number): EventRecord[] {
  if (!rec.shapes?.length || (rec.createdSeq ?? 0) > since) return [];
  const then = rec.shapes.find((s) => s.until > since);
  if (!then) return [];
  const before = idsOf(cal, rec.id, then, untilMs);
  const now = idsOf(cal, rec.id, { recurrence: rec.fields.recurrence, start: rec.start, end: rec.end }, untilMs);
  const gone: EventRecord[] = [];
  for (const [id, originalStart] of before) {
    if (now.has(id)) continue;
    const stub: EventRecord = { ...rec, id, fields: {}, status: "cancelled", vanished: true };
    delete stub.shapes;
    if (originalStart) Object.assign(stub, { recurringEventId: rec.id, originalStart, start: originalStart });
    gone.push(stub);
  }
  return gone;
}
