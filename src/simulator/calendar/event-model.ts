// Owns the emulator's event model: which fields are writable, validation, patch merging, the resource Google returns.
import { ApiError } from "./http.ts";
import { type ParsedTime, parseEventTime, renderEventTime } from "./time.ts";

export interface EventRecord {
  id: string;
  /** Writable fields other than start, end and status, as stored. */
  fields: Record<string, unknown>;
  start: ParsedTime;
  end: ParsedTime;
  status: string;
  created: number;
  updated: number;
  etag: string;
  /** Position in the calendar's change history (sync tokens compare it). */
  seq: number;
  sequence: number;
}

/** The calendar an event belongs to, as far as rendering needs it. */
export interface EventOwner {
  id: string;
  owner: string;
  timeZone: string;
}

const WRITABLE = [
  "summary",
  "description",
  "location",
  "colorId",
  "transparency",
  "visibility",
  "extendedProperties",
  "reminders",
  "attendees",
  "recurrence",
  "source",
  "guestsCanModify",
  "guestsCanInviteOthers",
  "guestsCanSeeOtherGuests",
  "anyoneCanAddSelf",
] as const;

const ENUMS: Record<string, readonly string[]> = {
  status: ["confirmed", "tentative", "cancelled"],
  visibility: ["default", "public", "private", "confidential"],
  transparency: ["opaque", "transparent"],
};
const COLOR_IDS = new Set(Array.from({ length: 11 }, (_, i) => String(i + 1)));
const MAX_PROPERTY_KEY = 44;
const MAX_PROPERTY_VALUE = 1024;
const MAX_PROPERTIES = 300;
const MAX_PROPERTY_BYTES = 32 * 1024;
/**
 * Google refuses a description over about 8,192 characters: "In Google Calendar, the event description character
 * limit is approximately 8,192 characters ... exceeding the limit can result in errors during event creation or
 * updates" (Nylas, "Event Description Limits in Google Calendar and Microsoft Exchange"; rjhorniii/ical2org#16: "the
 * documented limit of 8K characters in a description"). The exact answer is not documented: 400 `invalid` here.
 */
const MAX_DESCRIPTION_CHARS = 8192;

/** Keys over 44 characters are dropped and values over 1024 truncated, silently, as Google does. */
function cleanProperties(value: unknown): Record<string, string> | undefined {
  if (value === undefined || value === null) return undefined;
  if (typeof value !== "object") throw new ApiError(400, "invalid", "Invalid extended property value.");
  const out: Record<string, string> = {};
  for (const [k, v] of Object.entries(value as Record<string, unknown>)) {
    if (v === null || v === undefined) continue;
    if (typeof v !== "string") throw new ApiError(400, "invalid", `Invalid value for extended property ${k}.`);
    if (k.length > MAX_PROPERTY_KEY) continue;
    out[k] = v.slice(0, MAX_PROPERTY_VALUE);
  }
  return out;
}

function validateExtendedProperties(value: unknown): Record<string, unknown> | undefined {
  if (value === undefined || value === null) return undefined;
  if (typeof value !== "object") throw new ApiError(400, "invalid", "Invalid extendedProperties.");
  const v = value as { private?: unknown; shared?: unknown };
  const result: Record<string, Record<string, string>> = {};
  const priv = cleanProperties(v.private);
  const shared = cleanProperties(v.shared);
  if (priv) result.private = priv;
  if (shared) result.shared = shared;
  const count = Object.keys(priv ?? {}).length + Object.keys(shared ?? {}).length;
  if (count > MAX_PROPERTIES || JSON.stringify(result).length > MAX_PROPERTY_BYTES) {
    throw new ApiError(400, "invalid", "Too many extended properties.");
  }
  return result;
}

export interface ValidatedEvent {
  fields: Record<string, unknown>;
  start: ParsedTime;
  end: ParsedTime;
  status: string | undefined;
}

/** Checks a full event body (insert, update) and keeps only writable fields. */
export function validateEvent(body: Record<string, unknown>, calendarZone: string): ValidatedEvent {
  const fields: Record<string, unknown> = {};
  for (const key of WRITABLE) {
    if (body[key] !== undefined && body[key] !== null) fields[key] = body[key];
  }
  for (const [key, allowed] of Object.entries(ENUMS)) {
    const value = body[key];
    if (value !== undefined && value !== null && !allowed.includes(String(value))) {
      throw new ApiError(400, "invalid", `Invalid ${key} value.`);
    }
  }
  if (fields.colorId !== undefined && !COLOR_IDS.has(String(fields.colorId))) {
    throw new ApiError(400, "invalid", "Invalid color ID.");
  }
  for (const key of ["summary", "description", "location"]) {
    if (fields[key] !== undefined && typeof fields[key] !== "string")
      throw new ApiError(400, "invalid", `Invalid ${key}.`);
  }
  if (typeof fields.description === "string" && fields.description.length > MAX_DESCRIPTION_CHARS) {
    throw new ApiError(400, "invalid", "The description is too long.");
  }
  const props = validateExtendedProperties(body.extendedProperties);
  if (props) fields.extendedProperties = props;
  else delete fields.extendedProperties;
  const start = parseEventTime(body.start, "start", calendarZone);
  const end = parseEventTime(body.end, "end", calendarZone);
  if (end.ms < start.ms) throw new ApiError(400, "timeRangeEmpty");
  const status = typeof body.status === "string" ? body.status : undefined;
  return { fields, start, end, status };
}

function isPlainObject(v: unknown): v is Record<string, unknown> {
  return v !== null && typeof v === "object" && !Array.isArray(v);
}

/** Patch semantics: objects merge per key, arrays and scalars replace, null clears; start and end replace whole. */
export function mergePatch(target: Record<string, unknown>, patch: Record<string, unknown>, depth = 0) {
  const out: Record<string, unknown> = { ...target };
  for (const [key, value] of Object.entries(patch)) {
    if (value === null) delete out[key];
    else if (depth === 0 && (key === "start" || key === "end")) out[key] = value;
    else if (isPlainObject(value) && isPlainObject(out[key])) out[key] = mergePatch(out[key], value, depth + 1);
    else out[key] = value;
  }
  return out;
}

/** The record as a writable body again (the base a patch merges into). */
export function writableBody(rec: EventRecord, calendarZone: string): Record<string, unknown> {
  return {
    ...structuredClone(rec.fields),
    start: { ...renderEventTime(rec.start.ms, rec.start.allDay, rec.start.stored, calendarZone), ...rec.start.stored },
    end: { ...renderEventTime(rec.end.ms, rec.end.allDay, rec.end.stored, calendarZone), ...rec.end.stored },
    status: rec.status,
  };
}

/** The event as Google returns it. Default transparency and visibility are left out, as Google does. */
export function toResource(rec: EventRecord, cal: EventOwner): Record<string, unknown> {
  const f = rec.fields;
  const resource: Record<string, unknown> = {
    kind: "calendar#event",
    etag: rec.etag,
    id: rec.id,
    status: rec.status,
    htmlLink: `https://www.google.com/calendar/event?eid=${Buffer.from(`${rec.id} ${cal.id}`).toString("base64url")}`,
    created: new Date(rec.created).toISOString(),
    updated: new Date(rec.updated).toISOString(),
  };
  for (const key of ["summary", "description", "location", "colorId"]) if (f[key] !== undefined) resource[key] = f[key];
  resource.creator = { email: cal.owner, self: true };
  resource.organizer = { email: cal.id, self: true };
  resource.start = renderEventTime(rec.start.ms, rec.start.allDay, rec.start.stored, cal.timeZone);
  resource.end = renderEventTime(rec.end.ms, rec.end.allDay, rec.end.stored, cal.timeZone);
  if (f.recurrence !== undefined) resource.recurrence = structuredClone(f.recurrence);
  if (f.transparency === "transparent") resource.transparency = "transparent";
  if (f.visibility !== undefined && f.visibility !== "default") resource.visibility = f.visibility;
  resource.iCalUID = `${rec.id}@google.com`;
  resource.sequence = rec.sequence;
  if (f.attendees !== undefined) resource.attendees = structuredClone(f.attendees);
  if (f.extendedProperties !== undefined) resource.extendedProperties = structuredClone(f.extendedProperties);
  for (const key of [
    "guestsCanModify",
    "guestsCanInviteOthers",
    "guestsCanSeeOtherGuests",
    "anyoneCanAddSelf",
    "source",
  ]) {
    if (f[key] !== undefined) resource[key] = structuredClone(f[key]);
  }
  resource.reminders = f.reminders !== undefined ? structuredClone(f.reminders) : { useDefault: true };
  resource.eventType = "default";
  return resource;
}

/** How a deleted event appears in listings: only its identity is guaranteed. */
export function toDeletedResource(rec: EventRecord): Record<string, unknown> {
  return {
    kind: "calendar#event",
    etag: rec.etag,
    id: rec.id,
    status: "cancelled",
    updated: new Date(rec.updated).toISOString(),
  };
}
