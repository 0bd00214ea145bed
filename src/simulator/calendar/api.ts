// Owns the routing of the emulated Calendar API v3 (/calendar/v3/...) onto the store, lister and push channels.

import { aclList } from "./acl.ts";
import { writeSupport } from "./event-fields.ts";
import { toDeletedResource, toResource } from "./event-model.ts";
import type { Faults } from "./faults.ts";
import { ApiError } from "./http.ts";
import type { EventLister } from "./list.ts";
import type { PushChannels } from "./push.ts";
import type { CalendarRecord, CalendarStore } from "./store.ts";

export interface ApiRequest {
  method: string;
  /** Path segments after /calendar/v3/, URL-decoded. */
  segments: string[];
  query: Record<string, string | string[]>;
  body: Record<string, unknown>;
  subject: string;
  ifMatch: string | undefined;
  /** The token is a service account's own (no domain-wide delegation). */
  serviceAccountItself?: boolean;
}

export interface ApiAnswer {
  status: number;
  body?: unknown;
  /** The calendars whose events changed (for automatic notifications). */
  changed?: string[];
  /** What must have happened before the answer is sent (a new channel's sync message, see PushChannels). */
  answerAfter?: Promise<unknown>;
}

export interface ApiContext {
  store: CalendarStore;
  lister: EventLister;
  push: PushChannels;
  faults: Faults;
}

const WRITE_METHODS = new Set(["POST", "PUT", "PATCH", "DELETE"]);

function countEmails(ctx: ApiContext, req: ApiRequest, attendees: unknown): void {
  const mode = req.query.sendUpdates;
  if ((mode === "all" || mode === "externalOnly") && Array.isArray(attendees) && attendees.length > 0) {
    ctx.store.counters.emailsSent += 1;
  }
}

/**
 * Google's reference (Event.attendees): "Service accounts need to use domain-wide delegation of authority to populate
 * the attendee list"; the error is 403 forbiddenForServiceAccounts.
 */
function checkAttendees(req: ApiRequest): void {
  const attendees = req.body.attendees;
  if (req.serviceAccountItself && Array.isArray(attendees) && attendees.length > 0) {
    throw new ApiError(403, "forbiddenForServiceAccounts");
  }
}

function calendarResource(cal: CalendarRecord) {
  return {
    kind: "calendar#calendar",
    etag: `"c${cal.tokenEpoch}"`,
    id: cal.id,
    summary: cal.summary,
    timeZone: cal.timeZone,
  };
}

/** faults.refuseRestore: every restore is refused, also of an event the API deleted. */
function refuseRestore(ctx: ApiContext, cal: CalendarRecord, eventId: string, body: Record<string, unknown>): void {
  const rec = cal.events.get(eventId);
  if (
    ctx.faults.refuseRestore &&
    rec?.status === "cancelled" &&
    body.status !== undefined &&
    body.status !== "cancelled"
  ) {
    throw new ApiError(403, "forbidden", "Forbidden");
  }
}

function eventRoute(ctx: ApiContext, req: ApiRequest, cal: CalendarRecord, eventId: string): ApiAnswer {
  const { store } = ctx;
  switch (req.method) {
    case "GET": {
      // Google's reference (Event.status): cancelled events are returned by get ("The get method always returns
      // them"), and "Deleted events are only guaranteed to have the id field populated" (quoted from the googleapis
      // type docs in KeepSoftwareSimple/compass-calendar#374). No report says what events.get answers on the
      // calendar an event was moved out of; the strict reading is taken: 200 with status "cancelled" and no details,
      // as the listings show that entry (list.ts), so a client cannot tell it from a deletion by reading it.
      const rec = store.get(cal, eventId);
      return { status: 200, body: rec.movedAway ? toDeletedResource(rec, cal) : toResource(rec, cal) };
    }
    case "PUT": {
      checkAttendees(req);
      refuseRestore(ctx, cal, eventId, req.body);
      const rec = store.update(cal, eventId, req.body, req.ifMatch, writeSupport(req.query));
      countEmails(ctx, req, rec.fields.attendees);
      return { status: 200, body: toResource(rec, cal), changed: [cal.id] };
    }
    case "PATCH": {
      checkAttendees(req);
      refuseRestore(ctx, cal, eventId, req.body);
      const rec = store.patch(cal, eventId, req.body, req.ifMatch, writeSupport(req.query));
      countEmails(ctx, req, rec.fields.attendees);
      return { status: 200, body: toResource(rec, cal), changed: [cal.id] };
    }
    case "DELETE":
      countEmails(ctx, req, cal.events.get(eventId)?.fields.attendees);
      store.delete(cal, eventId, req.ifMatch);
      return { status: 204, changed: [cal.id] };
  }
  throw new ApiError(405, "badRequest", "Method Not Allowed");
}

/** POST .../events/{eventId}/move?destination=...: writer access on both calendars. */
function moveRoute(ctx: ApiContext, req: ApiRequest, from: CalendarRecord, eventId: string): ApiAnswer {
  const destination = req.query.destination;
  if (typeof destination !== "string" || !destination) {
    throw new ApiError(400, "required", "Required parameter: destination", {
      locationType: "parameter",
      location: "destination",
    });
  }
  const to = ctx.store.resolve(destination, req.subject, "write");
  const rec = ctx.store.move(from, eventId, to);
  ctx.store.counters.moves += 1;
  return { status: 200, body: toResource(rec, to), changed: [from.id, to.id] };
}

function calendarRoute(ctx: ApiContext, req: ApiRequest, rest: string[]): ApiAnswer {
  const [calendarId, collection, eventId, action, extra] = rest;
  if (calendarId === undefined) throw new ApiError(404, "notFound");
  const need = WRITE_METHODS.has(req.method) && eventId !== "watch" ? "write" : "read";
  const cal = ctx.store.resolve(calendarId, req.subject, need);
  if (collection === undefined && req.method === "GET") return { status: 200, body: calendarResource(cal) };
  if (collection === "acl" && eventId === undefined && req.method === "GET") {
    return { status: 200, body: aclList(cal, req.subject) };
  }
  if (collection !== "events" || extra !== undefined) throw new ApiError(404, "notFound");
  if (eventId === undefined) {
    if (req.method === "GET") return { status: 200, body: ctx.lister.list(cal, req.query, ctx.faults) };
    if (req.method === "POST") {
      checkAttendees(req);
      const rec = ctx.store.insert(cal, req.body, writeSupport(req.query));
      countEmails(ctx, req, rec.fields.attendees);
      return { status: 200, body: toResource(rec, cal), changed: [cal.id] };
    }
    throw new ApiError(405, "badRequest", "Method Not Allowed");
  }
  if (eventId === "watch" && action === undefined && req.method === "POST") {
    const { resource, sync } = ctx.push.watch(cal, req.body);
    return { status: 200, body: resource, ...(ctx.push.syncBeforeAnswer ? { answerAfter: sync } : {}) };
  }
  if (action === "move" && req.method === "POST") return moveRoute(ctx, req, cal, eventId);
  if (action === "instances" && req.method === "GET") {
    return { status: 200, body: ctx.lister.instances(cal, ctx.store.get(cal, eventId), req.query, ctx.faults) };
  }
  if (action !== undefined) throw new ApiError(404, "notFound");
  return eventRoute(ctx, req, cal, eventId);
}

const ROLE_RANK: Record<string, number> = { freeBusyReader: 0, reader: 1, writer: 2, owner: 3 };

/** One entry of the user's calendar list: the calendar with the user's access role on it. */
function listEntry(cal: CalendarRecord, subject: string) {
  // Google's reference (CalendarList resource, accessRole): "The effective access role that the authenticated user
  // has on the calendar" (freeBusyReader, reader, writer, owner): the user's share here.
  const role = cal.acl.get(subject) ?? "reader";
  return {
    ...calendarResource(cal),
    kind: "calendar#calendarListEntry",
    accessRole: role,
    defaultReminders: [],
    ...(cal.owner === subject && cal.id === subject ? { primary: true } : {}),
  };
}

/**
 * calendarList.list (Google's reference, CalendarList: list): "Returns the calendars on the user's calendar list",
 * each with its accessRole; `minAccessRole` "The minimum access role for the user in the returned entries";
 * `maxResults` 100 by default, "The page size can never be larger than 250 entries"; pages by `pageToken`. Every
 * calendar shared with the user is on the list unless removed from it (removeFromCalendarList). Hidden entries are
 * not modelled (showHidden changes nothing), nor its syncToken.
 */
function calendarList(ctx: ApiContext, req: ApiRequest): Record<string, unknown> {
  const one = (k: string) => (Array.isArray(req.query[k]) ? req.query[k][0] : req.query[k]) as string | undefined;
  const min = one("minAccessRole");
  if (min !== undefined && ROLE_RANK[min] === undefined) throw new ApiError(400, "invalid", "Invalid minAccessRole");
  const size = Math.min(250, Math.max(1, Number(one("maxResults") ?? 100) || 100));
  const from = Number(one("pageToken") ?? 0) || 0;
  const entries = [...ctx.store.calendars.values()]
    .filter((cal) => cal.acl.has(req.subject) && !cal.unlisted.has(req.subject))
    .filter((cal) => min === undefined || (ROLE_RANK[cal.acl.get(req.subject)!] ?? 0) >= ROLE_RANK[min]!)
    .map((cal) => listEntry(cal, req.subject));
  const items = entries.slice(from, from + size);
  const more = from + size < entries.length;
  return {
    kind: "calendar#calendarList",
    etag: `"l${entries.length}"`,
    items,
    ...(more ? { nextPageToken: String(from + size) } : { nextSyncToken: `L${entries.length}` }),
  };
}

/** Answers one Calendar API request, or throws ApiError. */
export function handleApi(ctx: ApiContext, req: ApiRequest): ApiAnswer {
  const [head, ...rest] = req.segments;
  if (head === "calendars") return calendarRoute(ctx, req, rest);
  if (head === "users" && rest[0] === "me" && rest[1] === "calendarList" && !rest[2] && req.method === "GET") {
    return { status: 200, body: calendarList(ctx, req) };
  }
  if (head === "users" && rest[0] === "me" && rest[1] === "calendarList" && rest[2] && req.method === "GET") {
    const cal = ctx.store.resolve(rest[2], req.subject, "read");
    if (cal.unlisted.has(req.subject)) throw new ApiError(404, "notFound");
    return { status: 200, body: listEntry(cal, req.subject) };
  }
  if (head === "channels" && rest[0] === "stop" && req.method === "POST") {
    ctx.push.stop(req.body);
    return { status: 204 };
  }
  throw new ApiError(404, "notFound");
}
