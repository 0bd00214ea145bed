// Owns the emulator's event model: which fields are writable, validation, patch merging, the resource Google returns.
import {
  CREATABLE_EVENT_TYPES,
  cleanAttachments,
  cleanAttendees,
  cleanConferenceData,
  cleanReminders,
  readReminders,
} from "./event-fields.ts";
import { ApiError } from "./http.ts";
import { occurrences, parseRecurrence } from "./recurrence.ts";
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
  /** "default", "outOfOffice", "focusTime" or "workingLocation"; fixed at creation. */
  eventType: string;
  /** For an instance of a recurring event (a stored exception, or one built on the fly): its series. */
  recurringEventId?: string;
  /** For an instance: where the series puts it (its id's suffix); immutable. */
  originalStart?: ParsedTime;
  /** Who deleted the event, while it is deleted: a person in Google's UI, or an API call. */
  deletedBy?: "person" | "api";
  deletedAt?: number;
  /** The entry an events.move left behind on the source calendar: only its id is guaranteed, ever. */
  movedAway?: boolean;
  /** History position of the insert (an incremental sync from before it never saw the event). */
  createdSeq?: number;
  /**
   * Earlier shapes of a series (recurrence and times), each valid until the change at history position `until`: an
   * incremental sync of expanded instances tells from them which instances vanished since its token.
   */
  shapes?: SeriesShape[];
  /** A vanished instance reported by an incremental sync: nothing but its identity. */
  vanished?: boolean;
  /** The calendar that stores the record. */
  home?: string;
  /** A guest's copy of an invitation (invitations.ts): the organizer's calendar. */
  invitedFrom?: string;
  /** A guest's copy the guest deleted: the invitation is declined, and the copy stays cancelled. */
  declined?: boolean;
  /** An organizer's event that has had guests' copies. */
  copied?: boolean;
}

export interface SeriesShape {
  until: number;
  recurrence: unknown;
  start: ParsedTime;
  end: ParsedTime;
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
  "attachments",
  "conferenceData",
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
  eventType: string | undefined;
}

/** Checks a full event body (insert, update, a patch merged onto the event) and keeps only writable fields. */
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
  if (fields.reminders !== undefined) fields.reminders = cleanReminders(fields.reminders);
  if (fields.attendees !== undefined) fields.attendees = cleanAttendees(fields.attendees);
  if (fields.attachments !== undefined) fields.attachments = cleanAttachments(fields.attachments);
  if (fields.conferenceData !== undefined) fields.conferenceData = cleanConferenceData(fields.conferenceData);
  const eventType = typeof body.eventType === "string" ? body.eventType : undefined;
  if (eventType !== undefined && !CREATABLE_EVENT_TYPES.includes(eventType)) {
    throw new ApiError(400, "invalid", `Invalid eventType value: ${eventType} events cannot be created here.`);
  }
  const start = parseEventTime(body.start, "start");
  const end = parseEventTime(body.end, "end");
  // Both ends all-day, or both timed: Google answers 400 invalid "Start and end times must either both be date or both
  // be dateTime." (t4t5/caldir #20, 2026, shows the whole answer; phw198/OutlookGoogleCalendarSync #609 and #844).
  if (start.allDay !== end.allDay) {
    throw new ApiError(400, "invalid", "Start and end times must either both be date or both be dateTime.");
  }
  // An event must end after it starts: Google answers 400 timeRangeEmpty to a zero-length one as to an inverted one
  // (ridafkih/keeper.sh #614, 2026: "it answers 400 timeRangeEmpty for any event that does not end after it starts").
  if (end.ms <= start.ms) throw new ApiError(400, "timeRangeEmpty");
  if (fields.recurrence !== undefined) checkSeries(fields.recurrence, start, end, calendarZone);
  const status = typeof body.status === "string" ? body.status : undefined;
  return { fields, start, end, status, eventType };
}

/**
 * A recurring event. Google's reference (EventDateTime.timeZone): "For recurring events this field is required and
 * specifies the time zone in which the recurrence is expanded"; without it Google answers 400 "Missing time zone
 * definition for start time." The rule itself must be in the subset recurrence.ts expands.
 */
function checkSeries(recurrence: unknown, start: ParsedTime, end: ParsedTime, calendarZone: string): void {
  if (!start.allDay && !start.stored.timeZone) {
    throw new ApiError(400, "invalid", "Missing time zone definition for start time.");
  }
  const rule = parseRecurrence(recurrence);
  occurrences(rule, start, end, start.stored.timeZone ?? calendarZone, Number.POSITIVE_INFINITY).next();
}

function isPlainObject(v: unknown): v is Record<string, unknown> {
  return v !== null && typeof v === "object" && !Array.isArray(v);
}

/**
 * Patch semantics, as Google's "Improve performance" guide for the Calendar API states them ("Patch", "Semantics of a
 * patch request", developers.google.com/workspace/calendar/api/guides/performance): "The modified data you send is
 * merged into the data for the parent object"; "To delete a field, specify the field and set it to null"; "Patch
 * requests that contain arrays replace the existing array with the one you provide" (text shared word for word by
 * Google's performance guides of other APIs, e.g. Tasks and BigQuery). So objects merge per key at every
 * depth, start and end included: a patch of `{start: {dateTime}}` keeps the stored start.timeZone, and one of an
 * all-day event that sends dateTime without `date: null` leaves start with both, which validateEvent refuses as Google
 * does (parseEventTime). `wholeTop` names top-level keys replaced whole instead: a person's edit in the UI, whose times
 * uiTimes (person.ts) has already made complete.
 */
export function mergePatch(
  target: Record<string, unknown>,
  patch: Record<string, unknown>,
  wholeTop: readonly string[] = [],
): Record<string, unknown> {
  const out: Record<string, unknown> = { ...target };
  for (const [key, value] of Object.entries(patch)) {
    if (value === null) delete out[key];
    else if (wholeTop.includes(key)) out[key] = value;
    else if (isPlainObject(value) && isPlainObject(out[key])) out[key] = mergePatch(out[key], value);
    else out[key] = value;
  }
  return out;
}

/**
 * The record as a writable body again: the base a patch merges into. Reminders are there as they read back (an event
 * without its own reads useDefault:true), so a patch naming only `reminders.overrides` meets that useDefault. Patches
 * merge nested objects (Google's extended-properties guide: a patch "allows you to manipulate some properties while
 * leaving others untouched"), and sync tools found the same for reminders: they send useDefault and overrides
 * together because a value left from before triggers 400 cannotUseDefaultRemindersAndSpecifyOverride. (One report,
 * Echoes675/FamilyHQ's ReminderSemantics, saw reminders replaced whole; the merge is the general rule.)
 */
export function writableBody(rec: EventRecord, calendarZone: string): Record<string, unknown> {
  return {
    ...structuredClone(rec.fields),
    reminders: readReminders(rec.fields.reminders, rec.start.allDay),
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
  // A guest's copy (invitations.ts) shows the organizer's calendar, and the guest's own entry among the attendees.
  const organizer = rec.invitedFrom ?? cal.id;
  resource.creator = rec.invitedFrom ? { email: rec.invitedFrom } : { email: cal.owner, self: true };
  resource.organizer = rec.invitedFrom ? { email: organizer } : { email: organizer, self: true };
  resource.start = renderEventTime(rec.start.ms, rec.start.allDay, rec.start.stored, cal.timeZone);
  resource.end = renderEventTime(rec.end.ms, rec.end.allDay, rec.end.stored, cal.timeZone);
  if (f.recurrence !== undefined && rec.recurringEventId === undefined)
    resource.recurrence = structuredClone(f.recurrence);
  if (rec.recurringEventId !== undefined) Object.assign(resource, instanceIdentity(rec, cal));
  if (f.transparency === "transparent") resource.transparency = "transparent";
  if (f.visibility !== undefined && f.visibility !== "default") resource.visibility = f.visibility;
  resource.iCalUID = `${rec.recurringEventId ?? rec.id}@google.com`;
  resource.sequence = rec.sequence;
  if (f.attendees !== undefined) {
    resource.attendees = (f.attendees as { email?: string }[]).map((a) => ({
      ...structuredClone(a),
      ...(a.email?.toLowerCase() === cal.id.toLowerCase() ? { self: true } : {}),
      ...(a.email?.toLowerCase() === organizer.toLowerCase() ? { organizer: true } : {}),
    }));
  }
  if (f.extendedProperties !== undefined) resource.extendedProperties = structuredClone(f.extendedProperties);
  for (const key of [
    "guestsCanModify",
    "guestsCanInviteOthers",
    "guestsCanSeeOtherGuests",
    "anyoneCanAddSelf",
    "source",
    "attachments",
    "conferenceData",
  ]) {
    if (f[key] !== undefined) resource[key] = structuredClone(f[key]);
  }
  const conference = f.conferenceData as { entryPoints?: { entryPointType?: string; uri?: string }[] } | undefined;
  const video = conference?.entryPoints?.find((e) => e.entryPointType === "video")?.uri;
  if (video?.startsWith("https://meet.google.com/")) resource.hangoutLink = video;
  resource.reminders = readReminders(f.reminders, rec.start.allDay);
  resource.eventType = rec.eventType;
  return resource;
}

/** recurringEventId and originalStartTime of an instance. */
function instanceIdentity(rec: EventRecord, cal: EventOwner): Record<string, unknown> {
  const original = rec.originalStart ?? rec.start;
  return {
    recurringEventId: rec.recurringEventId,
    originalStartTime: renderEventTime(original.ms, original.allDay, original.stored, cal.timeZone),
  };
}

/**
 * A deleted event without its details. Google's reference (Event.status): "Deleted events are only guaranteed to have
 * the id field populated"; "incremental sync requests with showDeleted set to false will not return these details";
 * "Cancelled exceptions are only guaranteed to have values for the id, recurringEventId and originalStartTime fields".
 * The etag stays: it is what changed.
 */
export function toDeletedResource(rec: EventRecord, cal: EventOwner): Record<string, unknown> {
  const resource: Record<string, unknown> = { kind: "calendar#event", etag: rec.etag, id: rec.id, status: "cancelled" };
  if (rec.recurringEventId !== undefined) Object.assign(resource, instanceIdentity(rec, cal));
  return resource;
}
