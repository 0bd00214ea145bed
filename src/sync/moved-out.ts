// Owns the write-back's last look before a deletion counts as one: an event moved ("Change calendar") to another
// calendar the therapist's own account owns that calbridge does not manage (a personal or "Private" calendar) leaves
// the same cancelled entry in the mapped calendar as a deletion (events.move keeps the id). Found there, it is moved
// back with a note, or written anew in the mapped calendar when it cannot be: the appointment is never cancelled for
// it. Also the removal of such a moved copy once the appointment's event is put back or the appointment is cancelled.
import { namesNoOther } from "../calendar/ids.ts";
import type { Logger } from "../log.ts";
import { timeNotSent } from "./changes.ts";
import type { Effects } from "./effects.ts";
import { describeError, isCalendarKind } from "./errors.ts";
import { OtherCalendarUnavailableError } from "./mapping.ts";
import type { OwnList } from "./own-calendar-list.ts";
import { calendarKey } from "./placement.ts";
import { isNoAccess } from "./source-calendar.ts";
import { EngineStoppedError } from "./stopped.ts";
import type { AccountCalendar, CalEvent, Link } from "./types.ts";
import { accept, type Ctx, LeaveAsIs, restore, type WritebackInput } from "./writeback-steps.ts";

/** At most this many of the account's other calendars are looked at for one deletion (one events.get each). */
export const MAX_OWN_CALENDARS = 25;

/** The event found live in another calendar of the therapist's account. */
export interface FoundOutside {
  /** The calendar it is in now. */
  calendarId: string;
  event: CalEvent;
  /** The mapped calendar's id as the calendar list names it (`primary` resolved): where the event goes back to. */
  home: string;
  /** The mapped calendar's name, for the note. */
  homeName: string;
}

/** The calendars the account owns, mapped ones and those holding calbridge's left-behind copies left out. */
interface OwnCalendars {
  calendars: AccountCalendar[];
  /** The mapped calendar's id as the calendar list names it (`primary` resolved), and its name. */
  home: string;
  homeName: string;
  /** Our clock when the list was asked for, and whether it was read for this look-up (not remembered). */
  readAt: number;
  fresh: boolean;
}

/**
 * The calendars the therapist's account owns (calendarList.list with the therapist's credentials, remembered for a
 * short while: own-calendar-list.ts; `fresh` reads it now), but for mapped ones and those where calbridge left its own
 * copies of this therapist's events (a mapping pointed elsewhere, see left-behind.ts): a copy there is no move of the
 * therapist's. A calendar the account may only write (a colleague's it edits) is not theirs to move an appointment
 * to: an event there under the id is not taken for one. Throws OtherCalendarUnavailableError when the list cannot be
 * read.
 */
async function ownCalendars(fx: Effects, therapistId: string, fresh: boolean): Promise<OwnCalendars> {
  const mapping = fx.mapping;
  const t = mapping.therapist(therapistId);
  const cal = mapping.calendarIfAny(therapistId);
  if (!t || !cal) throw unseen(therapistId, mapping.unavailableReason(therapistId) ?? "no usable calendar");
  let list: OwnList;
  let left: string[];
  try {
    list = await fx.ownLists.get(therapistId, cal, fresh);
    left = (await fx.leftBehind?.all())?.filter((l) => l.therapistId === therapistId).map((l) => l.calendarId) ?? [];
  } catch (err) {
    if (err instanceof EngineStoppedError) throw err;
    throw unseen(therapistId, `calendar list: ${describeError(err)}`);
  }
  const key = calendarKey(t);
  // OAuth with `primary` names no address: the list's primary entry is the mapped calendar.
  const entries = list.calendars;
  const homeEntry =
    entries.find((e) => e.id === key) ?? (key === "primary" ? entries.find((e) => e.primary) : undefined);
  const home = homeEntry?.id ?? key;
  const skip = new Set([...mapping.therapists.map(calendarKey), home, ...left]);
  const calendars = entries.filter((e) => e.accessRole === "owner" && !skip.has(e.id));
  return { calendars, home, homeName: homeEntry?.summary ?? home, readAt: list.readAt, fresh: list.fresh };
}

/**
 * Visits the calendars the account owns (ownCalendars, the first MAX_OWN_CALENDARS) until `visit` answers true. The
 * list may be one read a moment ago for another look-up (a burst of deletions reads it once). Only a list asked for
 * after `seenAt` (our clock when the deletion looked into had been seen: the move, if it was one, came before) can
 * hold every calendar the event can have gone to: with a list read earlier, a visit that did not stop reads the list
 * again and visits the calendars not visited yet (one created since, the event then moved there). Returns the list as
 * last read; `log` warns when calendars were left out for the bound.
 */
async function eachOwnCalendar(
  fx: Effects,
  therapistId: string,
  seenAt: number,
  visit: (calendarId: string) => Promise<boolean>,
  log?: Logger,
): Promise<OwnCalendars> {
  const visited = new Set<string>();
  let own = await ownCalendars(fx, therapistId, false);
  for (let pass = 0; ; pass++) {
    const todo = own.calendars.slice(0, MAX_OWN_CALENDARS).filter((e) => !visited.has(e.id));
    if (log && own.calendars.length > MAX_OWN_CALENDARS) {
      log.warn(
        { therapist_id: therapistId, calendars: own.calendars.length, looked_at: MAX_OWN_CALENDARS },
        "deleted event looked for in only the first calendars of the therapist's account (the bound): the others were not looked at",
      );
    }
    for (const e of todo) {
      visited.add(e.id);
      if (await visit(e.id)) return own;
    }
    if (pass > 0 || own.fresh || own.readAt > seenAt) return own;
    own = await ownCalendars(fx, therapistId, true);
  }
}

const unseen = (therapistId: string, why: string) =>
  new OtherCalendarUnavailableError(therapistId, new Map([[therapistId, why]]));

/** The live event under the appointment's id in `calendarId`, unless it names another appointment. */
async function liveCopy(fx: Effects, link: Link, calendarId: string): Promise<CalEvent | undefined> {
  const event = await fx.calendar(link.therapistId).getIn(calendarId, link.eventId);
  // The id is calbridge's own; an event under it that names another appointment is not this one (a mark missing is
  // not taken as a "no": whether a move keeps the private properties is not documented).
  if (event && event.status !== "cancelled" && namesNoOther(event, link.appointmentId)) return event;
  return undefined;
}

/**
 * Looks for the deleted event's id in the calendars the therapist's account owns (eachOwnCalendar: `seenAt` is our
 * clock when the deletion had been seen, now when not known), with events.get in each: a 404 is "not there", a live
 * event is found. A look that cannot be made (the list or a calendar answering 5xx, quota, credentials) throws
 * OtherCalendarUnavailableError: the cancellation waits. More than MAX_OWN_CALENDARS such calendars: the first ones
 * are looked at, and a log line says so.
 */
export async function findInOwnCalendars(
  ctx: Ctx,
  link: Link,
  log: Logger,
  seenAt = ctx.fx.clock.now(),
): Promise<FoundOutside | undefined> {
  const failed: string[] = [];
  let found: { calendarId: string; event: CalEvent } | undefined;
  const own = await eachOwnCalendar(
    ctx.fx,
    link.therapistId,
    seenAt,
    async (calendarId) => {
      try {
        const event = await liveCopy(ctx.fx, link, calendarId);
        if (event) found = { calendarId, event };
      } catch (err) {
        if (err instanceof EngineStoppedError) throw err;
        failed.push(`${calendarId}: ${describeError(err)}`);
      }
      return found !== undefined;
    },
    log,
  );
  if (found) return { ...found, home: own.home, homeName: own.homeName };
  if (failed.length > 0) throw unseen(link.therapistId, failed.join("; "));
  return undefined;
}

/**
 * The appointment's event is gone from the mapped calendar for good, or was put back there, while a copy the therapist
 * moved to a calendar their account owns may still be live: that copy is removed, so it does not go on showing the
 * appointment. Only a live event under the link's id (calbridge's own id) that names no other appointment goes (as
 * liveCopy); anything else, and any calendar that cannot be looked at, is left alone (logged): never a deletion of
 * something not understood.
 * `seenAt` as for findInOwnCalendars.
 */
export async function removeOwnCopy(fx: Effects, link: Link, log: Logger, seenAt = fx.clock.now()): Promise<void> {
  try {
    await eachOwnCalendar(fx, link.therapistId, seenAt, async (calendarId) => {
      try {
        // As findInOwnCalendars reads it: under calbridge's id and not naming another appointment (marks another
        // client's full update stripped do not keep a second live copy of the appointment there).
        if (!(await liveCopy(fx, link, calendarId))) return false;
        await fx.calendar(link.therapistId).deleteIn(calendarId, link.eventId);
        fx.counted(link.therapistId, "delete");
        log.info(
          { therapist_id: link.therapistId, calendar_id: calendarId },
          "copy of the appointment's event the therapist had moved to another calendar of their account removed",
        );
      } catch (err) {
        if (err instanceof EngineStoppedError) throw err;
        log.warn({ calendar_id: calendarId, err: describeError(err) }, "calendar not looked at for a moved copy");
      }
      return false;
    });
  } catch (err) {
    if (err instanceof EngineStoppedError) throw err;
    log.warn({ err: describeError(err) }, "the therapist's own calendars not looked at for a moved copy");
  }
}

const stays = (name: string) =>
  `calbridge: this appointment stays in calendar "${name}" (it is synced with the booking service there)`;

/**
 * The event was moved out of the mapped calendar into another calendar of the therapist's account: nothing is sent.
 * It is moved back (events.move, no notifications) and says why; when Google refuses that (no write access any more,
 * the calendar gone, the id taken in the mapped calendar), it is written anew there as for an event calbridge lost
 * (the next generation of its id when Google refuses the old one), and a copy left where it was moved is removed when
 * that calendar can be written. A failure not understood is left as it is: retried, or a dead letter; never a cancel.
 */
export async function keepInMappedCalendar(ctx: Ctx, w: WritebackInput, found: FoundOutside): Promise<void> {
  const cal = ctx.fx.calendar(w.link.therapistId);
  const { eventId } = w.link;
  let back: CalEvent | undefined;
  let refused: unknown;
  try {
    back = await cal.moveFrom(found.calendarId, eventId, found.home);
  } catch (err) {
    if (err instanceof EngineStoppedError) throw err;
    const understood = isNoAccess(err) || isCalendarKind(err, "duplicate") || isCalendarKind(err, "gone");
    if (!understood) throw new LeaveAsIs(err);
    // An earlier try whose answer was lost may have moved it back already.
    const there = await cal.get(eventId).catch((e: unknown) => {
      throw new LeaveAsIs(e);
    });
    if (there && there.status !== "cancelled") back = there;
    else refused = err;
  }
  const fields = { writeback: "cancel", therapist_id: w.link.therapistId, calendar_id: found.calendarId };
  if (back) {
    w.tell?.({ kind: "cancel", result: "moved_back", calendarId: found.calendarId });
    const notice = {
      text: `${stays(found.homeName)}, so it was moved back from the calendar you moved it to. To cancel it, delete the event here.${timeNotSent(w.link, found.event)}`,
      at: ctx.fx.clock.now(),
    };
    // Back where it belongs: a failure from here on is never answered by writing the event a second time.
    await accept(ctx, w, w.link.therapistId, w, back, w.sourceAt, notice).catch((e: unknown) => {
      throw new LeaveAsIs(e);
    });
    ctx.fx.counted(w.link.therapistId, "move");
    ctx.fx.metrics.writebacks.inc({ kind: "cancel", result: "moved_back" });
    w.log.warn(
      fields,
      "event moved to another calendar of the therapist's account: moved back, the cancellation is not sent",
    );
    return;
  }
  w.tell?.({ kind: "cancel", result: "rewritten", error: refused, calendarId: found.calendarId });
  await restore(
    ctx,
    w,
    `${stays(found.homeName)}. It was moved to another calendar and could not be moved back, so it was written here again. To cancel it, delete the event here.${timeNotSent(w.link, found.event)}`,
  );
  ctx.fx.metrics.writebacks.inc({ kind: "cancel", result: "rewritten" });
  w.log.warn(
    { ...fields, err: describeError(refused) },
    "event moved to another calendar of the therapist's account could not be moved back: written again in the mapped calendar, the cancellation is not sent",
  );
  if (isCalendarKind(refused, "duplicate")) await removeCopy(ctx, w, found);
}

/** The copy left in the other calendar (that calendar can be written: only the mapped one refused the id). */
async function removeCopy(ctx: Ctx, w: WritebackInput, found: FoundOutside): Promise<void> {
  const log = w.log;
  try {
    await ctx.fx.calendar(w.link.therapistId).deleteIn(found.calendarId, w.link.eventId);
    ctx.fx.counted(w.link.therapistId, "delete");
    log.info({ calendar_id: found.calendarId }, "copy left in the other calendar removed: one event per appointment");
  } catch (err) {
    if (err instanceof EngineStoppedError) throw err;
    log.warn(
      { calendar_id: found.calendarId, err: describeError(err) },
      "copy left in the other calendar not removed; it is no longer kept up to date",
    );
  }
}
