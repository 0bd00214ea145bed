// Owns the last look before a write-back is sent: the appointment read again after the calendar look-ups (a deletion's
// search of other calendars takes seconds; a 429 or a retry's backoff longer), and compared with the state the
// write-back was decided from. A customer's reschedule, a reassignment or a cancellation made meanwhile is never
// written over: the write-back is not sent, and the attempt decides again from the appointment as it is now. The event
// is looked at too, right before each send: a calendar change the therapist took back meanwhile is never sent.
import { changedMeanwhile } from "../booking/errors.ts";
import { bookingInstant } from "../booking/instant.ts";
import type { Appointment } from "../booking/schemas.ts";
import { instantOf } from "../calendar/fingerprint.ts";
import { describeError, isUnavailable } from "./errors.ts";
import { CalendarUnavailableError } from "./mapping.ts";
import { EngineStoppedError } from "./stopped.ts";
import type { CalEvent, Link, Snapshot } from "./types.ts";
import type { Ctx, WritebackInput } from "./writeback-steps.ts";

/**
 * Reads the appointment; throws changed_meanwhile when it is no longer as decided from. Answers the same comparison
 * for the client, which looks again before any resend (CallOptions.basis). The API offers no precondition, so a
 * change landing between this read and the write is not caught: the window is one request long.
 */
export async function stillAsDecided(
  ctx: Ctx,
  w: WritebackInput,
  method: "PATCH" | "POST",
): Promise<(now: Appointment) => boolean> {
  const basis = (now: Appointment) => sameState(w.appt, now) || (w.taken !== undefined && sameState(w.taken, now));
  const now = await ctx.booking.getAppointment(w.id, { priority: "writeback" });
  if (!basis(now)) {
    w.log.info(
      { status: now.status, was: w.appt.status },
      "the appointment was changed by someone else since the write-back was decided on: not sent, deciding again",
    );
    throw changedMeanwhile(method, `/v1/appointments/${w.id}${method === "POST" ? "/cancel" : ""}`);
  }
  return basis;
}

/** Same time, therapist and status; a field either side does not show is no change (the spec leaves much unshown). */
export function sameState(decided: Snapshot, now: Appointment): boolean {
  const same = (a: unknown, b: unknown) => a === undefined || a === null || b === undefined || b === null || a === b;
  const at = (v: unknown) => (typeof v === "string" ? bookingInstant(v) : undefined);
  // The same text is the same time, also one bookingInstant cannot read (NaN is never equal to itself).
  const sameTime = (a: unknown, b: unknown) => a === b || same(at(a), at(b));
  return (
    same(decided.status, now.status) &&
    same(decided.therapist_id, now.therapist_id) &&
    sameTime(decided.start_time, now.start_time)
  );
}

/**
 * The therapist took the calendar change back while its write-back was on its way: the deleted event is live again
 * (Google's Undo, a restore from the Bin), or the moved event is no longer at the time about to be sent (dragged back,
 * moved on, deleted). Nothing is sent; the attempt decides again from the event as read (attempt.ts).
 */
export class ChangeTakenBack extends Error {
  readonly event: CalEvent | null;
  /** The appointment's record as read at the last look, when it was no longer the one decided from. */
  readonly relinked: { link: Link | undefined } | undefined;
  constructor(event: CalEvent | null, what: string, relinked?: { link: Link | undefined }) {
    super(`${what}: the write-back was not sent`);
    this.name = "ChangeTakenBack";
    this.event = event;
    this.relinked = relinked;
  }
}

/**
 * Reads the linked event right before the cancel is sent (and before each resend: CallOptions.beforeSend); throws
 * ChangeTakenBack when it is live. The look-ups before (other therapists' calendars, the account's own ones: seconds),
 * a backoff or a 429's pause leave time for a person's Undo. A read that fails throws (lookAtEvent): a cancellation is
 * never sent on an event not looked at. A 404 (purged from the Bin) is as deleted.
 */
export async function stillDeleted(ctx: Ctx, w: WritebackInput): Promise<void> {
  const event = await lookAtEvent(ctx, w);
  if (event && event.status !== "cancelled") {
    w.log.info({ event_id: w.link.eventId }, "the deleted event is back in the calendar: cancellation not sent");
    throw new ChangeTakenBack(event, "the deleted event is back in the calendar");
  }
}

/** As stillDeleted, for a move: the linked event still starts at `startTime` (a reschedule is sent only then). */
export async function stillMoved(ctx: Ctx, w: WritebackInput, startTime: string): Promise<void> {
  const event = await lookAtEvent(ctx, w);
  if (event && event.status !== "cancelled" && instantOf(event.start) === Date.parse(startTime)) return;
  w.log.info({ event_id: w.link.eventId }, "the moved event is no longer at the time to send: reschedule not sent");
  throw new ChangeTakenBack(event, "the moved event is no longer at that time");
}

/**
 * As stillDeleted, for a reassignment (the event moved to a colleague's calendar, `to`): the therapist's own event is
 * still gone, and the one in the colleague's calendar still live at the time it had when the reassignment was decided.
 * Deleted there, or moved on in time meanwhile, nothing is sent: the attempt decides again from the therapist's own
 * event (the deletion looks for the event elsewhere again, and finds it as it is now, or nowhere).
 */
export async function stillMovedTo(
  ctx: Ctx,
  w: WritebackInput,
  to: { therapistId: string; event: CalEvent },
): Promise<void> {
  const own = await lookAtEvent(ctx, w);
  if (own && own.status !== "cancelled") {
    w.log.info({ event_id: w.link.eventId }, "the moved event is back in the calendar: reassignment not sent");
    throw new ChangeTakenBack(own, "the moved event is back in the calendar");
  }
  // Found there under its own id (findElsewhere): a move keeps the id.
  const there = await readEvent(ctx, to.therapistId, w.link.eventId);
  if (there && there.status !== "cancelled" && instantOf(there.start) === instantOf(to.event.start)) return;
  w.log.info(
    { event_id: w.link.eventId, to: to.therapistId },
    "the event in the colleague's calendar was deleted or moved on: reassignment not sent",
  );
  throw new ChangeTakenBack(own, "the event in the colleague's calendar was deleted or moved on");
}

/**
 * The linked event, read for the last look. A read that fails (Google's 5xx outlasting its retries, say) says nothing
 * about the change: the write-back is not sent and waits as for an unavailable calendar (no attempt spent, nothing
 * put back with a "not applied" note, as the look-ups in other calendars wait: moved-out.ts).
 */
async function lookAtEvent(ctx: Ctx, w: WritebackInput): Promise<CalEvent | null> {
  // The record first: another process may have changed it since this sync read it (`writeback held --restore` beside
  // the daemon writes the event again and links it; a replica), and the event the old record names stays deleted: the
  // appointment just put back was cancelled (race4). Decided again from the record and the event it names now.
  const now = await ctx.fx.links.get(w.id);
  const relinked = sameEvent(now, w.link) ? undefined : { link: now };
  const look = relinked ? (now?.present ? now : undefined) : w.link;
  const event = look ? await readEvent(ctx, look.therapistId, look.eventId) : null;
  if (relinked) {
    w.log.info({ event_id: now?.eventId }, "the appointment's record changed meanwhile: write-back not sent");
    throw new ChangeTakenBack(event, "the appointment's record changed meanwhile", relinked);
  }
  return event;
}

/** Whether two records name the same event in the same state (what a write-back is decided from). */
function sameEvent(a: Link | undefined, b: Link): boolean {
  return (
    a !== undefined &&
    a.therapistId === b.therapistId &&
    a.eventId === b.eventId &&
    a.present === b.present &&
    (a.generation ?? 0) === (b.generation ?? 0)
  );
}

/**
 * An event read for a last look. A read that fails (Google's 5xx outlasting its retries, say) says nothing about the
 * change: the write-back is not sent and waits as for an unavailable calendar.
 */
async function readEvent(ctx: Ctx, therapistId: string, eventId: string): Promise<CalEvent | null> {
  try {
    return await ctx.fx.calendar(therapistId).get(eventId);
  } catch (err) {
    if (err instanceof EngineStoppedError || isUnavailable(err)) throw err;
    throw new CalendarUnavailableError(
      therapistId,
      `the event could not be read right before the write-back was sent (${describeError(err)}); nothing was sent, it waits`,
    );
  }
}
