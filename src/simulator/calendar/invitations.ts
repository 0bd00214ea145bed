// Owns guests' copies of an event (invitations), as Google keeps them. A guest whose address is a calendar here gets
// the event in that calendar, under the organizer's event id, and the copy follows the organizer's event: its changes,
// its deletion and restoring, a guest removed from the list (the copy is cancelled). What a guest may change of a
// copy is only theirs: their own private extended properties, reminders, colour, their answer; deleting the copy
// declines the invitation. The sources:
// - Google's Event reference: `organizer.self` "Whether the organizer corresponds to the calendar on which this copy of
//   the event appears"; `attendees[].self` "Whether this entry represents the calendar on which this copy of the event
//   appears"; `extendedProperties.private` "Properties that are private to the copy of the event that appears on this
//   calendar", `shared` "Properties that are shared between copies of the event on other attendees' calendars".
// - Google's "Handle API errors" guide: 403 forbiddenForNonOrganizer, "Shared properties can only be changed by the
//   organizer of the event."
// - calcom/cal.com #2947: Google puts the event in an invited Google user's calendar by itself ("Google automatically
//   creates a calendar event in the calendar of the invitee").
// Kept strict: the copy carries the organizer's id (a client keyed by event id meets it under its own id), and a guest
// changing what the organizer owns (times, text, guests, shared properties) is refused, although Google lately lets
// guests change some of it on their copy only (phw198/OutlookGoogleCalendarSync #2277). Series and their instances
// get no copies here.
import type { EventRecord, ValidatedEvent } from "./event-model.ts";
import { ApiError } from "./http.ts";

/** What a copy needs to know of the store: the calendars, and bumping a record's history. */
export interface InvitationStore {
  readonly calendars: ReadonlyMap<string, { id: string; events: Map<string, EventRecord> }>;
  bump(rec: EventRecord): void;
  readonly clock: { now(): number };
}

interface Extended {
  private?: Record<string, string>;
  shared?: Record<string, string>;
}

const lower = (s: unknown) => (typeof s === "string" ? s.toLowerCase() : "");

function guests(rec: EventRecord): { email: string; responseStatus?: unknown }[] {
  const list = rec.fields.attendees;
  return Array.isArray(list) ? (list as { email: string; responseStatus?: unknown }[]) : [];
}

/** Whether the organizer's event `rec` has (or may have had) copies to keep in step. */
export function mayHaveCopies(rec: EventRecord): boolean {
  return rec.invitedFrom === undefined && (rec.copied === true || guests(rec).length > 0);
}

/**
 * Brings the guests' copies of the organizer's event `rec` (stored in calendar `rec.home`) in step with it; answers
 * the calendars whose copies changed. A guest's calendar that holds an event of its own under the same id is left
 * alone.
 */
export function propagate(store: InvitationStore, rec: EventRecord): string[] {
  const home = rec.home;
  if (home === undefined || rec.movedAway || rec.recurringEventId !== undefined || rec.fields.recurrence !== undefined)
    return [];
  const invited = new Set(guests(rec).map((g) => lower(g.email)));
  const changed: string[] = [];
  for (const cal of store.calendars.values()) {
    if (cal.id === home) continue;
    const copy = cal.events.get(rec.id);
    if (copy && copy.invitedFrom === undefined) continue; // an event of the guest's own
    const wanted = invited.has(lower(cal.id));
    if (!copy && !wanted) continue;
    if (copy?.declined) continue; // the guest deleted it: declined; the organizer's changes do not bring it back
    const status = wanted ? rec.status : "cancelled";
    if (!copy) {
      if (status === "cancelled") continue;
      cal.events.set(rec.id, copyOf(store, rec, cal.id, undefined));
      rec.copied = true;
      changed.push(cal.id);
      continue;
    }
    const next = copyOf(store, rec, cal.id, copy);
    next.status = status;
    if (copy.invitedFrom === home && JSON.stringify(view(next)) === JSON.stringify(view(copy))) continue;
    Object.assign(copy, { fields: next.fields, start: next.start, end: next.end, status, sequence: rec.sequence });
    copy.invitedFrom = home;
    store.bump(copy);
    changed.push(cal.id);
  }
  return changed;
}

/** The copy of `rec` in calendar `calendarId`: the organizer's fields, with the copy's own private part. */
function copyOf(
  store: InvitationStore,
  rec: EventRecord,
  calendarId: string,
  was: EventRecord | undefined,
): EventRecord {
  const fields = structuredClone(rec.fields);
  const shared = (rec.fields.extendedProperties as Extended | undefined)?.shared;
  const own = (was?.fields.extendedProperties as Extended | undefined)?.private;
  const extended: Extended = { ...(shared ? { shared: { ...shared } } : {}), ...(own ? { private: { ...own } } : {}) };
  if (Object.keys(extended).length > 0) fields.extendedProperties = extended;
  else delete fields.extendedProperties;
  // Reminders and colour are the guest's own (their calendar's defaults until they set some).
  if (was?.fields.reminders !== undefined) fields.reminders = was.fields.reminders;
  else delete fields.reminders;
  if (was?.fields.colorId !== undefined) fields.colorId = was.fields.colorId;
  else delete fields.colorId;
  if (was) return { ...was, fields, start: rec.start, end: rec.end };
  const now = store.clock.now();
  const copy: EventRecord = {
    id: rec.id,
    fields,
    start: rec.start,
    end: rec.end,
    status: rec.status,
    created: now,
    updated: now,
    etag: "",
    seq: 0,
    sequence: rec.sequence,
    eventType: rec.eventType,
    home: calendarId,
    invitedFrom: rec.home!,
  };
  store.bump(copy);
  copy.createdSeq = copy.seq;
  return copy;
}

/** What a guest sees change: the copy's data apart from its history. */
function view(rec: EventRecord) {
  return [rec.fields, rec.start.ms, rec.end.ms, rec.status];
}

/** What the organizer owns of an event: a guest's write must leave it as it is. */
function organizerPart(fields: Record<string, unknown>, start: number, end: number, status: string) {
  const {
    reminders: _r,
    colorId: _c,
    extendedProperties,
    attendees,
    transparency: _t,
    visibility: _v,
    ...rest
  } = fields;
  const shared = (extendedProperties as Extended | undefined)?.shared;
  // A guest answers for themselves only: the list, apart from the answers, is the organizer's.
  const list = Array.isArray(attendees)
    ? (attendees as Record<string, unknown>[]).map(({ responseStatus: _s, self: _self, ...a }) => a)
    : undefined;
  return JSON.stringify([rest, shared ?? null, list ?? null, start, end, status]);
}

/** A guest's update or patch of their copy: refused (403 forbiddenForNonOrganizer) when it changes the organizer's part. */
export function checkGuestWrite(copy: EventRecord, v: ValidatedEvent, statusDefault: string): void {
  const before = organizerPart(copy.fields, copy.start.ms, copy.end.ms, copy.status);
  const after = organizerPart(v.fields, v.start.ms, v.end.ms, v.status ?? statusDefault);
  if (before !== after) {
    throw new ApiError(
      403,
      "forbiddenForNonOrganizer",
      "Shared properties can only be changed by the organizer of the event.",
    );
  }
}

/**
 * The guest deleted their copy: it is cancelled for good (declined), and the organizer's event shows the guest's
 * answer as "declined". Answers the organizer's event when it changed (its copies are then brought in step).
 */
export function declined(store: InvitationStore, copy: EventRecord, guestCalendar: string): EventRecord | undefined {
  copy.declined = true;
  const organizer = copy.invitedFrom === undefined ? undefined : store.calendars.get(copy.invitedFrom);
  const rec = organizer?.events.get(copy.id);
  if (!rec) return undefined;
  const entry = guests(rec).find((g) => lower(g.email) === lower(guestCalendar));
  if (!entry || entry.responseStatus === "declined") return undefined;
  entry.responseStatus = "declined";
  store.bump(rec);
  return rec;
}
