// Owns comparison of calendar events: the fingerprint of the fields calbridge writes, and time equality by instant.
import { hash } from "node:crypto";
import { normalReminders } from "./reminders.ts";

/** The part of an event time this module reads (matches calendar_v3.Schema$EventDateTime). */
export interface EventTimeLike {
  dateTime?: string | null;
  date?: string | null;
  timeZone?: string | null;
}

/** The part of an event this module reads (matches calendar_v3.Schema$Event). */
export interface EventLike {
  summary?: string | null;
  description?: string | null;
  start?: EventTimeLike | null;
  end?: EventTimeLike | null;
  colorId?: string | null;
  transparency?: string | null;
  visibility?: string | null;
  status?: string | null;
  recurrence?: string[] | null;
  reminders?: { useDefault?: boolean | null; overrides?: unknown[] | null } | null;
}

/** Which fields calbridge owns beyond the ones it always owns: reminders only where they are configured. */
export interface Ownership {
  reminders: boolean;
}

/** What a body calbridge rendered owns: reminders when it sets them (they are configured). */
export function ownershipOf(body: EventLike | null | undefined): Ownership {
  return { reminders: body?.reminders != null };
}

/**
 * Milliseconds since the epoch of an event time, or undefined. An all-day `date` counts as midnight UTC, which is
 * enough to compare two events (both sides are read the same way).
 */
export function instantOf(time: EventTimeLike | null | undefined): number | undefined {
  const text = time?.dateTime ?? (time?.date ? `${time.date}T00:00:00Z` : undefined);
  if (!text) return undefined;
  const ms = Date.parse(text);
  // Google keeps whole seconds: a booking time with milliseconds must compare equal to the event written from it.
  return Number.isNaN(ms) ? undefined : Math.floor(ms / 1000) * 1000;
}

/** Whether two events start and end at the same instants (Google rewrites offsets, so strings are not compared). */
export function sameTime(a: EventLike, b: EventLike): boolean {
  const times = [instantOf(a.start), instantOf(b.start), instantOf(a.end), instantOf(b.end)];
  if (times.some((t) => t === undefined)) return false;
  return times[0] === times[1] && times[2] === times[3];
}

function normalTime(time: EventTimeLike | null | undefined): Record<string, string> {
  if (time?.date && !time.dateTime) return { date: time.date };
  const ms = instantOf(time);
  return { at: ms === undefined ? "" : new Date(ms).toISOString(), timeZone: time?.timeZone ?? "" };
}

/** JSON with object keys sorted at every level, so the order of keys never changes a hash. */
export function canonicalJson(value: unknown): string {
  if (Array.isArray(value)) return `[${value.map(canonicalJson).join(",")}]`;
  if (value !== null && typeof value === "object") {
    const entries = Object.entries(value as Record<string, unknown>)
      .filter(([, v]) => v !== undefined)
      .sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0));
    return `{${entries.map(([k, v]) => `${JSON.stringify(k)}:${canonicalJson(v)}`).join(",")}}`;
  }
  return JSON.stringify(value) ?? "null";
}

/**
 * A stable hash over the fields calbridge owns (summary, description, start, end, colorId, transparency, visibility,
 * status, whether it repeats, and the reminders where `ownership` says so). Google's defaults count as set (absent
 * transparency is "opaque"; absent visibility "default"; absent status "confirmed"; absent reminders the calendar's
 * default) and times compare as instants, so a rendered body and the same event read back from Google agree. A single
 * event (no recurrence) without owned reminders hashes as it always did.
 */
export function fingerprint(body: EventLike, ownership: Ownership = { reminders: false }): string {
  const owned = {
    summary: body.summary ?? "",
    description: body.description ?? "",
    start: normalTime(body.start),
    end: normalTime(body.end),
    colorId: body.colorId ?? "",
    transparency: body.transparency ?? "opaque",
    visibility: body.visibility ?? "default",
    status: body.status ?? "confirmed",
    recurrence: body.recurrence?.length ? body.recurrence : undefined,
    reminders: ownership.reminders ? normalReminders(body.reminders) : undefined,
  };
  return hash("sha256", canonicalJson(owned), "base64url").slice(0, 32);
}
