// Owns `calbridge purge`: removing calbridge's own events of one therapist from one calendar, past and future, and
// forgetting their links, for a therapist no longer mapped (or one leaving). An event is removed only when it carries
// calbridge's mark and its id is the one calbridge gave that appointment's event, or a series Google split off that
// event (series-tails.ts; never a copy, never anything else), or when it is under the id of one of the therapist's
// links (or an earlier generation of it) and names no other appointment: its marks stripped by another client's full
// update (see carriesMarks), the listing by the mark misses it. In a calendar that is another mapped therapist's now
// (handed over), only events of the purged therapist's own appointments (by their links) are removed;
// the booking service is never called; the mass-deletion guard (sync.max_delete_ratio, its floor) holds a purge of
// too large a share of calbridge's events unless forced.
import { APPOINTMENT_ID_PROPERTY, eventIdFor, namesNoOther } from "../calendar/ids.ts";
import { type Clock, systemClock } from "../clock.ts";
import type { Logger } from "../log.ts";
import { describeError } from "./errors.ts";
import { type LinkStore, purgeable, resaved } from "./links.ts";
import { GUARD_FLOOR } from "./reconcile.ts";
import { isTailOf } from "./series-tails.ts";
import { shareLimit } from "./share-limit.ts";
import type { CalendarPort, Link } from "./types.ts";

/** Generations of an appointment's event id that count as calbridge's (a person's deletion moves an id on). */
const GENERATIONS = 4;
/** Past and future: every event calbridge may have written. */
const ALL_TIME = { timeMin: "1970-01-01T00:00:00Z", timeMax: "2200-01-01T00:00:00Z" };

export interface PurgeOptions {
  therapistId: string;
  /** The calendar, as the links name it. */
  calendarId: string;
  calendar: Pick<CalendarPort, "listManaged" | "delete" | "get">;
  links: Pick<LinkStore, "all" | "forget" | "save">;
  maxDeleteRatio: number;
  /**
   * The mapped therapists (not the one purged) whose calendar this is now: handed over. Only events of the purged
   * therapist's own appointments go there; one with no link (expired) or another's may be theirs, and is left alone.
   */
  owners?: readonly string[];
}

export interface PurgeEvent {
  eventId: string;
  appointmentId: string;
  start?: string;
}

export interface PurgePlan {
  therapistId: string;
  calendarId: string;
  /** calbridge's events there, to delete. */
  events: PurgeEvent[];
  /** Events with calbridge's mark that are not to be deleted, and why. */
  skipped: { eventId: string; reason: string }[];
  /** The therapist's links in that calendar, to forget. */
  links: Link[];
  /** Of `links`, the records of appointments calbridge never mirrored (neverMirrored): forgotten, and no link. */
  records: number;
  guard: { tripped: boolean; destructive: number; managed: number; limit: number };
}

export async function planPurge(o: PurgeOptions): Promise<PurgePlan> {
  const all = new Map<string, Link>();
  let managed = 0;
  for await (const link of o.links.all()) {
    all.set(link.appointmentId, link);
    if (link.present) managed++;
  }
  const mine = ownLink(o);
  const events = new Map<string, PurgeEvent>();
  const skipped: PurgePlan["skipped"] = [];
  for await (const ev of o.calendar.listManaged(ALL_TIME)) {
    // An occurrence of a series a person made of calbridge's event: the series itself (its id) is the event.
    const eventId = ev.recurringEventId ?? ev.id;
    const appointmentId = ev.extendedProperties?.private?.[APPOINTMENT_ID_PROPERTY];
    if (!eventId || !appointmentId || events.has(eventId)) continue;
    const link = all.get(appointmentId);
    const ids = new Set([
      link?.eventId,
      ...Array.from({ length: GENERATIONS }, (_, g) => eventIdFor(appointmentId, g)),
    ]);
    // A series Google split off the event ("This and following events") goes with it.
    const tail = [...ids].some((own) => own && isTailOf({ ...ev, id: eventId }, appointmentId, own));
    if (!ids.has(eventId) && !tail) {
      skipped.push({ eventId, reason: "carries calbridge's mark, but calbridge did not make it (a copy)" });
    } else if (link?.present && !mine(link) && link.calendarId === o.calendarId) {
      skipped.push({ eventId, reason: `the event of ${link.therapistId}, whose mapping names this calendar too` });
    } else if (o.owners?.length && link?.therapistId !== o.therapistId) {
      const now = `this calendar is ${o.owners.join(" and ")}'s now`;
      skipped.push({ eventId, reason: link ? `an appointment of ${link.therapistId}; ${now}` : `no record; ${now}` });
    } else {
      events.set(eventId, { eventId, appointmentId, ...(ev.recurringEventId ? {} : startOf(ev.start)) });
    }
  }
  const links = [...all.values()].filter(mine);
  await unmarked(o, links, events, new Set(skipped.map((s) => s.eventId)));
  const withEvent = appointmentsOf(events.values());
  // Events found that no live link counts are calbridge's events too.
  const counted = new Set([...all.values()].filter((l) => l.present).map((l) => l.eventId));
  managed += [...events.keys()].filter((id) => !counted.has(id)).length;
  const limit = shareLimit(o.maxDeleteRatio, managed, GUARD_FLOOR);
  const destructive = events.size;
  return {
    therapistId: o.therapistId,
    calendarId: o.calendarId,
    // In time order: Google writes each start with the offset in force then (or its own zone's), so the text order
    // was not the time order on the night the clocks go back, nor across zones (tz audit).
    events: [...events.values()].sort((a, b) => timeOf(a.start) - timeOf(b.start) || (a.eventId < b.eventId ? -1 : 1)),
    skipped,
    links,
    records: links.filter((l) => neverMirrored(l, withEvent)).length,
    guard: { tripped: destructive > limit, destructive, managed, limit },
  };
}

/** A link of the therapist purged in the calendar purged (or made while they were not mapped: no calendar). */
function ownLink(o: Pick<PurgeOptions, "therapistId" | "calendarId">): (l: Link) => boolean {
  return (l) => l.therapistId === o.therapistId && (l.calendarId === o.calendarId || l.calendarId === "");
}

/**
 * Whether a link is only the record of an appointment calbridge saw while its therapist was not mapped (the tombstone
 * apply.ts keeps, naming no calendar) and never mirrored: no live event, none of its events in the calendar purged
 * (`withEvent`: the appointments whose events the purge found). A purge forgets it with the links, and counts it apart:
 * calling it a link would tell an admin that calbridge had mirrored a therapist it never synced.
 */
export function neverMirrored(link: Link, withEvent: ReadonlySet<string> = new Set()): boolean {
  return link.calendarId === "" && !purgeable(link) && !withEvent.has(link.appointmentId);
}

function appointmentsOf(events: Iterable<PurgeEvent>): Set<string> {
  return new Set([...events].map((e) => e.appointmentId));
}

/** The links a purge of the calendar would forget, read without the calendar (one Google does not find). */
export async function purgeLinks(o: Pick<PurgeOptions, "therapistId" | "calendarId" | "links">): Promise<Link[]> {
  const mine = ownLink(o);
  const out: Link[] = [];
  for await (const link of o.links.all()) if (mine(link)) out.push(link);
  return out;
}

/**
 * The live links' events the listing by the mark did not find, looked up by id (events.get): one found live that names
 * no appointment (its marks stripped) or this one is calbridge's event, and is added to `events`. Only calbridge makes
 * events under these ids (eventIdFor); one that names another appointment is left alone.
 */
async function unmarked(
  o: Pick<PurgeOptions, "calendar">,
  links: Link[],
  events: Map<string, PurgeEvent>,
  skipped: Set<string>,
): Promise<void> {
  for (const link of links.filter(purgeable)) {
    const ids = new Set([
      link.eventId,
      ...Array.from({ length: link.generation ?? 0 }, (_, g) => eventIdFor(link.appointmentId, g)),
    ]);
    for (const eventId of ids) {
      if (events.has(eventId) || skipped.has(eventId)) continue;
      const ev = await o.calendar.get(eventId);
      if (!ev || ev.status === "cancelled" || !namesNoOther(ev, link.appointmentId)) continue;
      events.set(eventId, { eventId, appointmentId: link.appointmentId, ...startOf(ev.start) });
    }
  }
}

/** An event's start as milliseconds (an all-day date as midnight UTC); one without a start sorts first. */
const timeOf = (start: string | undefined): number => (start ? Date.parse(start) : Number.NaN) || 0;

function startOf(start: { dateTime?: string | null; date?: string | null } | undefined): { start?: string } {
  const at = start?.dateTime ?? start?.date;
  return at ? { start: at } : {};
}

export interface PurgeResult {
  deleted: number;
  alreadyGone: number;
  failed: { eventId: string; error: string }[];
  /** Links forgotten, the records of `records` among them. */
  forgotten: number;
  /** Of `forgotten`, the records of appointments calbridge never mirrored (neverMirrored). */
  records: number;
  /** Why the purge stopped before its last deletion (`goOn`), and how many events it left. */
  stopped?: { reason: string; left: number };
}

/**
 * Deletes the plan's events, then forgets the links whose events are all gone: a failed deletion keeps its
 * appointment's link, whichever of the appointment's events it was (a series split off, an earlier generation), or the
 * next run could not find the calendar again. `goOn` is asked before each deletion: a reason stops the purge there
 * (the events left keep their links). A live link is marked as the purge's (present: false, removedBy "purge") before
 * its appointment's first event is deleted: a purge that dies before forgetting it (killed, the store failing) left a
 * live link to a deleted event, which a daemon mapping the therapist took for the therapist's deletion, and cancelled.
 */
export async function applyPurge(
  plan: PurgePlan,
  o: Pick<PurgeOptions, "calendar" | "links"> & { goOn?: () => Promise<string | undefined>; clock?: Clock },
  log: Logger,
): Promise<PurgeResult> {
  const result: PurgeResult = { deleted: 0, alreadyGone: 0, failed: [], forgotten: 0, records: 0 };
  /** Appointments with an event left in the calendar: their links are kept. */
  const left = new Set<string>();
  /** The live links still to mark before their first event goes. */
  const live = new Map(plan.links.filter((l) => l.present).map((l) => [l.appointmentId, l]));
  const clock = o.clock ?? systemClock;
  for (const [i, ev] of plan.events.entries()) {
    const stop = await o.goOn?.();
    if (stop !== undefined) {
      const rest = plan.events.slice(i);
      for (const ev of rest) left.add(ev.appointmentId);
      result.stopped = { reason: stop, left: rest.length };
      log.error({ left: rest.length, reason: stop }, "purge stopped before its end: the events left are not deleted");
      break;
    }
    try {
      const link = live.get(ev.appointmentId);
      if (link) {
        // The calendar is kept: a purge run again finds it (and the event, should this deletion fail) by this link.
        await o.links.save(resaved(link, { present: false, removedBy: "purge" }, clock.now()));
        live.delete(ev.appointmentId);
      }
      if ((await o.calendar.delete(ev.eventId)) === "deleted") result.deleted++;
      else result.alreadyGone++;
    } catch (err) {
      left.add(ev.appointmentId);
      result.failed.push({ eventId: ev.eventId, error: describeError(err) });
      log.warn({ event_id: ev.eventId, err: describeError(err) }, "event not deleted; its link is kept");
    }
  }
  const withEvent = appointmentsOf(plan.events);
  for (const link of plan.links) {
    if (left.has(link.appointmentId)) continue;
    await o.links.forget(link);
    result.forgotten++;
    if (neverMirrored(link, withEvent)) result.records++;
  }
  return result;
}
