// Owns the rules for an event's optional fields as Google applies them on a write: reminders, attendees, attachments,
// conference data, event type, and how a reminders value reads back.
import { randomBytes } from "node:crypto";
import { ApiError } from "./http.ts";

/** What the request says it supports (query parameters of insert, update and patch). */
export interface WriteSupport {
  /** `conferenceDataVersion=1`: without it Google ignores conferenceData in the body. */
  conferenceData: boolean;
  /** `supportsAttachments=true`: without it Google does not modify attachments. */
  attachments: boolean;
}

/** A person in Google's UI edits everything. */
export const UI_SUPPORT: WriteSupport = { conferenceData: true, attachments: true };

export function writeSupport(query: Record<string, string | string[]>): WriteSupport {
  const one = (k: string) => (Array.isArray(query[k]) ? query[k][0] : query[k]) as string | undefined;
  const version = one("conferenceDataVersion");
  if (version !== undefined && version !== "0" && version !== "1") {
    throw new ApiError(400, "invalid", "Invalid conferenceDataVersion value: acceptable values are 0 to 1.");
  }
  return { conferenceData: version === "1", attachments: one("supportsAttachments") === "true" };
}

/**
 * Google's reference (Event.conferenceData, Event.attachments): "Version 0 assumes no conference data support and
 * ignores conference data in the event's body"; "In order to modify attachments the supportsAttachments request
 * parameter should be set to true". So a body's values are dropped unless the request declares support, and an
 * update that does not declare it leaves the stored values alone (see the store).
 */
export function dropUnsupported(body: Record<string, unknown>, support: WriteSupport): Record<string, unknown> {
  const out = { ...body };
  if (!support.conferenceData) delete out.conferenceData;
  if (!support.attachments) delete out.attachments;
  return out;
}

const isObject = (v: unknown): v is Record<string, unknown> => v !== null && typeof v === "object" && !Array.isArray(v);
const MAX_REMINDERS = 5;
const MAX_REMINDER_MINUTES = 40_320;

/**
 * Reminders as Google stores them. Google's reference: "The maximum number of override reminders is 5" and minutes
 * "between 0 and 40320". What the live API does with other values was captured by Echoes675/FamilyHQ
 * (tools/FamilyHQ.Simulator/Google/ReminderSemantics.cs): a sixth override is 400 eventRemindersCountExceedsLimit,
 * useDefault:true with overrides is 400 cannotUseDefaultRemindersAndSpecifyOverride (both in the "calendar" domain),
 * while minutes out of range are clamped, unknown methods dropped and duplicates collapsed, all with a 200.
 */
export function cleanReminders(value: unknown): Record<string, unknown> {
  if (!isObject(value)) throw new ApiError(400, "invalid", "Invalid reminders value.");
  const overrides = value.overrides ?? [];
  if (!Array.isArray(overrides)) throw new ApiError(400, "invalid", "Invalid reminders.overrides value.");
  if (overrides.length > MAX_REMINDERS) {
    throw new ApiError(400, "eventRemindersCountExceedsLimit", undefined, {}, "calendar");
  }
  if (value.useDefault === true && overrides.length > 0) {
    throw new ApiError(400, "cannotUseDefaultRemindersAndSpecifyOverride", undefined, {}, "calendar");
  }
  const kept = new Map<string, { method: string; minutes: number }>();
  for (const o of overrides) {
    if (!isObject(o) || (o.method !== "popup" && o.method !== "email")) continue;
    const minutes = Number(o.minutes);
    if (!Number.isFinite(minutes)) throw new ApiError(400, "required", "Missing reminder minutes.");
    const clamped = Math.min(MAX_REMINDER_MINUTES, Math.max(0, Math.trunc(minutes)));
    kept.set(`${o.method}/${clamped}`, { method: o.method, minutes: clamped });
  }
  const out: Record<string, unknown> = { useDefault: value.useDefault === true };
  if (kept.size > 0) out.overrides = [...kept.values()];
  return out;
}

/**
 * How reminders read back (same source): an empty override list has no `overrides` key, overrides do not come back
 * in the order sent (here: largest offset first), and an all-day event without stored reminders does not inherit.
 */
export function readReminders(stored: unknown, allDay: boolean): Record<string, unknown> {
  if (!isObject(stored)) return allDay ? { useDefault: false } : { useDefault: true };
  const out: Record<string, unknown> = { useDefault: stored.useDefault === true };
  const overrides = stored.overrides as { method: string; minutes: number }[] | undefined;
  if (overrides && overrides.length > 0) {
    out.overrides = [...overrides].sort((a, b) => b.minutes - a.minutes || a.method.localeCompare(b.method));
  }
  return out;
}

/** Attendees need an e-mail address ("Required when adding an attendee"); Google fills responseStatus in. */
export function cleanAttendees(value: unknown): Record<string, unknown>[] {
  if (!Array.isArray(value)) throw new ApiError(400, "invalid", "Invalid attendees value.");
  return value.map((a) => {
    if (!isObject(a)) throw new ApiError(400, "invalid", "Invalid attendee.");
    if (typeof a.email !== "string" || !a.email) throw new ApiError(400, "required", "Missing attendee email.");
    if (!/^[^@\s]+@[^@\s]+$/.test(a.email)) throw new ApiError(400, "invalid", "Invalid attendee email.");
    return { ...a, responseStatus: typeof a.responseStatus === "string" ? a.responseStatus : "needsAction" };
  });
}

const MAX_ATTACHMENTS = 25;

/** Google's reference: "There can be at most 25 attachments per event"; fileUrl is "Required when adding an attachment". */
export function cleanAttachments(value: unknown): Record<string, unknown>[] {
  if (!Array.isArray(value)) throw new ApiError(400, "invalid", "Invalid attachments value.");
  if (value.length > MAX_ATTACHMENTS) throw new ApiError(400, "invalid", "Too many attachments (at most 25).");
  return value.map((a) => {
    if (!isObject(a) || typeof a.fileUrl !== "string" || !a.fileUrl) {
      throw new ApiError(400, "required", "Missing attachment fileUrl.");
    }
    return { ...a };
  });
}

/** conferenceData (with conferenceDataVersion=1): a createRequest for Meet becomes a conference, as Google does. */
export function cleanConferenceData(value: unknown): Record<string, unknown> {
  if (!isObject(value)) throw new ApiError(400, "invalid", "Invalid conference data.");
  const request = value.createRequest;
  if (request === undefined || value.entryPoints !== undefined) return structuredClone(value);
  if (!isObject(request) || typeof request.requestId !== "string" || !request.requestId) {
    throw new ApiError(400, "invalid", "Invalid conference data: createRequest.requestId is required.");
  }
  const letters = "abcdefghijklmnopqrstuvwxyz";
  const word = (n: number) => [...randomBytes(n)].map((b) => letters[b % 26]).join("");
  const code = `${word(3)}-${word(4)}-${word(3)}`;
  return {
    createRequest: { ...request, status: { statusCode: "success" } },
    entryPoints: [
      { entryPointType: "video", uri: `https://meet.google.com/${code}`, label: `meet.google.com/${code}` },
    ],
    conferenceSolution: { key: { type: "hangoutsMeet" }, name: "Google Meet" },
    conferenceId: code,
  };
}

/** Event types the API may create; "birthday" and "fromGmail" need more than this emulator models. */
export const CREATABLE_EVENT_TYPES = ["default", "outOfOffice", "focusTime", "workingLocation"];
