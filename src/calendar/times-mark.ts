// Owns calbridge's mark of the times it writes into an event (the private extended property calbridge_times): made when
// an event is rendered, stamped with the moment of each write, and read back from an event found in a calendar.
import { instantOf } from "./fingerprint.ts";
import { TIMES_PROPERTY } from "./ids.ts";

/** The part of an event that holds its private extended properties (matches calendar_v3.Schema$Event). */
interface Marked {
  extendedProperties?: { private?: Record<string, string> | null } | null;
}

/** The times calbridge wrote into an event, as its mark names them, and the mark itself (compared whole). */
export interface TimesMark {
  mark: string;
  start: number;
  end: number;
  /** The moment of the write its stamp names (undefined: a mark without one). */
  at?: number;
}

/** The mark of a rendering: its start and end, as an ISO 8601 interval in UTC ("2026-11-23T09:00:00Z/...T10:00:00Z"). */
export function timesMark(start: string, end: string): string {
  return `${start}/${end}`;
}

/**
 * The body as one write sends it: its mark stamped with the moment of the write, so that no two writes of calbridge's
 * carry the same mark, not even two at the same times (a booking moved back to where it was). A body without a mark
 * (not rendered by calbridge) is sent as it is.
 */
export function stampWrite<B extends Marked>(body: B, at: number): B {
  const mark = body.extendedProperties?.private?.[TIMES_PROPERTY];
  if (!mark) return body;
  const interval = mark.split("@")[0];
  const own = { ...body.extendedProperties?.private, [TIMES_PROPERTY]: `${interval}@${new Date(at).toISOString()}` };
  return { ...body, extendedProperties: { ...body.extendedProperties, private: own } };
}

/** The raw mark an event carries (undefined: none, e.g. an event an earlier build wrote). */
export function markOf(event: Marked | null | undefined): string | undefined {
  return event?.extendedProperties?.private?.[TIMES_PROPERTY] ?? undefined;
}

/**
 * The times the event's mark names (whole seconds, as Google keeps them and instantOf reads them); undefined without a
 * mark, or with one that does not read as an interval.
 */
export function markedTimes(event: Marked | null | undefined): TimesMark | undefined {
  const mark = markOf(event);
  const [interval, stamp] = (mark ?? "").split("@");
  const [start, end] = (interval ?? "").split("/");
  const s = instantOf({ dateTime: start ?? null });
  const e = instantOf({ dateTime: end ?? null });
  const at = stamp ? Date.parse(stamp) : Number.NaN;
  if (!mark || s === undefined || e === undefined) return undefined;
  return { mark, start: s, end: e, ...(Number.isNaN(at) ? {} : { at }) };
}
