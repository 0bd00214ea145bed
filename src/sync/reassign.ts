// Owns the write-back of an event moved to another mapped therapist's calendar ("Change calendar" in Google): finding
// it there, and reassigning the appointment, or putting the event back in its own calendar when that is refused or off.
import { BookingApiError, isChangedMeanwhile } from "../booking/errors.ts";
import { bookingInstant } from "../booking/instant.ts";
import { instantOf } from "../calendar/fingerprint.ts";
import { carriesMarks, namesNoOther } from "../calendar/ids.ts";
import type { Logger } from "../log.ts";
import { calendarChange, lastSynced, timeNotSent } from "./changes.ts";
import type { Effects } from "./effects.ts";
import { describeError, isNotFound, isRefusal, isUnavailable } from "./errors.ts";
import { OtherCalendarUnavailableError } from "./mapping.ts";
import { merge } from "./snapshot.ts";
import { EngineStoppedError } from "./stopped.ts";
import type { CalEvent, Link, Snapshot } from "./types.ts";
import { ChangeTakenBack, stillAsDecided, stillMovedTo } from "./writeback-basis.ts";
import {
  accept,
  appointmentGone,
  type Ctx,
  LeaveAsIs,
  noteRefusal,
  putBack,
  type WritebackInput,
} from "./writeback-steps.ts";

/**
 * A deletion may be a move to another mapped therapist's calendar: look for the same event there. Only an answer
 * counts. A mapped therapist's calendar that cannot be looked at (no usable calendar: not connected yet, a token that
 * cannot be decrypted; or one answering quota, credentials, or 404 for the calendar itself: no longer shared) may hold
 * the event, so unless the event is found in another one, OtherCalendarUnavailableError is thrown and the cancellation
 * waits like a sync of an unavailable calendar: never sent on a guess. Other errors (5xx) are thrown and retried.
 */
export async function findElsewhere(
  ctx: Ctx,
  link: Link,
): Promise<{ therapistId: string; event: CalEvent } | undefined> {
  const mapping = ctx.fx.mapping;
  const unseen = new Map<string, string>();
  const others = new Set([...mapping.calendars.keys(), ...mapping.therapists.map((t) => t.therapist_id)]);
  others.delete(link.therapistId);
  for (const therapistId of others) {
    const cal = mapping.calendarIfAny(therapistId);
    if (!cal) {
      unseen.set(therapistId, mapping.unavailableReason(therapistId) ?? "no usable calendar");
      continue;
    }
    let event: CalEvent | null;
    try {
      // A 404 is "not there" only once the calendar itself answers: a calendar no longer shared answers 404 too.
      event = await cal.get(link.eventId, { confirmMissing: true });
    } catch (err) {
      if (!isUnavailable(err)) throw err;
      unseen.set(therapistId, describeError(err));
      continue;
    }
    // The id is calbridge's own (only calbridge makes events under it): an event there that names another appointment
    // is not this one, but one without the mark is (another client's full update can strip it, see carriesMarks).
    if (event && event.status !== "cancelled" && namesNoOther(event, link.appointmentId)) {
      // calbridge's own old event a reassignment could not remove yet, unchanged: not where this one was moved.
      if (await ctx.fx.leftovers?.isLeftover(link.appointmentId, therapistId, event)) continue;
      return { therapistId, event };
    }
  }
  if (unseen.size > 0) throw new OtherCalendarUnavailableError(link.therapistId, unseen);
  return undefined;
}

export async function movedToOtherCalendar(
  ctx: Ctx,
  w: WritebackInput,
  moved: { therapistId: string; event: CalEvent },
): Promise<void> {
  const to = ctx.fx.mapping.therapist(moved.therapistId);
  const wb = ctx.fx.mapping.writeback(w.link.therapistId);
  if (!wb.reassign || !to) {
    w.tell?.({ kind: "reassign", result: "disabled", therapistId: moved.therapistId });
    await putBackFrom(
      ctx,
      w,
      moved,
      `calbridge: moving an appointment to another therapist's calendar does not reassign it here (writeback.reassign is off). The event was put back.${timeNotSent(w.link, moved.event)}`,
    );
    ctx.fx.metrics.writebacks.inc({ kind: "reassign", result: "disabled" });
    return;
  }
  // A new time saved with the move (or given in the other calendar before the write-back) goes in the same PATCH.
  const time = timeChange(w.link, moved.event, wb.reschedule && ctx.fx.mapping.writeback(moved.therapistId).reschedule);
  const body = { therapist_id: moved.therapistId, ...(time.startTime ? { start_time: time.startTime } : {}) };
  let res: Snapshot;
  try {
    // The last look fails as the PATCH would: answered here, where the event in the other calendar is known.
    const basis = await stillAsDecided(ctx, w, "PATCH");
    res = await ctx.booking.patchAppointment(w.id, body, {
      priority: "writeback",
      basis,
      // The event is looked at before each send, as a deletion's or a move's is: one deleted in the colleague's
      // calendar, moved on there, or back in the therapist's own, is never reassigned as it was.
      beforeSend: () => stillMovedTo(ctx, w, moved),
    });
  } catch (err) {
    // Not sent over someone else's change, nor over the therapist's own since: decided again (writeback-basis.ts). A
    // last look that could not read the event waits, as for an unavailable calendar.
    if (isChangedMeanwhile(err) || err instanceof ChangeTakenBack || isUnavailable(err)) throw err;
    if (err instanceof EngineStoppedError) throw err;
    let taken: Snapshot | undefined;
    try {
      taken = await notSent(ctx, w, moved, err, time.startTime !== undefined);
    } catch (e) {
      // On the last attempt, the write-back's own restore knows nothing of the event in the other calendar: what is
      // not settled here is left as it is for the next sync (an appointment that is gone excepted).
      if (w.attempt < w.maxAttempts || e instanceof LeaveAsIs || (e === err && isNotFound(err))) throw e;
      throw new LeaveAsIs(e);
    }
    if (!taken) return;
    res = taken;
  }
  w.tell?.({ kind: "reassign", result: "ok", status: res.status, therapistId: moved.therapistId });
  // The answer to a PATCH shows no therapist_id (spec): taken, the appointment is the new therapist's.
  const appt = merge({ ...w.appt, therapist_id: moved.therapistId }, res);
  // The event shows the booking's time again where its own was not sent (or not taken): never without saying so.
  const lost =
    time.notSent ??
    (time.startTime && bookingInstant(appt.start_time) !== Date.parse(time.startTime)
      ? "the booking service kept the appointment's time"
      : undefined);
  const notice = lost
    ? {
        text: `calbridge: the appointment was reassigned, but your new time was not sent: ${lost}. The event shows the booking's time.`,
        at: ctx.fx.clock.now(),
      }
    : undefined;
  // The booking service took the reassignment: a failure from here on is never answered by putting the event back.
  await accept(ctx, w, moved.therapistId, { ...w, appt }, moved.event, w.sourceAt, notice).catch((e) => {
    throw new LeaveAsIs(e);
  });
  await dropSeriesLeft(ctx, w, moved);
  ctx.fx.metrics.writebacks.inc({ kind: "reassign", result: "ok" });
  ctx.fx.activity.wroteBack(w.link.therapistId);
  w.log.info(
    {
      writeback: "reassign",
      to: moved.therapistId,
      start_time: appt.start_time,
      ...(lost ? { time_not_sent: lost } : {}),
    },
    "appointment reassigned from the calendar",
  );
}

/**
 * How the event's time in the other calendar differs from the one calbridge last wrote (as `calendarChange` reads a
 * change in the same calendar): a move that rescheduling from the calendar would send gives `startTime`; any other
 * change gives why it is not sent (the event then shows the booking's time, with a note).
 */
function timeChange(link: Link, event: CalEvent, reschedule: boolean): { startTime?: string; notSent?: string } {
  const change = calendarChange({ ...link, present: true }, event);
  if (change === "none" || change === "deleted") return {};
  if (change === "repeating") return { notSent: "a booking is a single appointment, so the event does not repeat" };
  if (change === "all_day") return { notSent: "an all-day event cannot be an appointment" };
  if (change === "resized") return { notSent: "the booking service keeps an appointment's duration" };
  if (!reschedule) return { notSent: "rescheduling from the calendar is turned off" };
  const start = instantOf(event.start) ?? 0;
  // No calendar app moves an event by seconds: a script or another sync tool did, and nobody meant a reschedule.
  const was = lastSynced(link, event).start ?? 0;
  if (Math.abs(start - was) < 60_000) return { notSent: "moved by less than a minute" };
  return { startTime: new Date(start).toISOString() };
}

/**
 * The reassignment's PATCH failed. A refusal, or a failure on the last attempt that the booking service is seen not to
 * have taken, ends with the event put back in its own calendar and removed from the other one (else that therapist
 * would keep the customer's appointment for good: the restore usually lands under a new id, and the reconciliation
 * takes an event under the old id for a copy that is not its own). Returns the appointment when a GET shows the
 * reassignment taken after all (its answer was lost); throws what is to be retried, or left as it is (LeaveAsIs).
 */
async function notSent(
  ctx: Ctx,
  w: WritebackInput,
  moved: { therapistId: string; event: CalEvent },
  err: unknown,
  withTime: boolean,
): Promise<Snapshot | undefined> {
  const what = withTime ? "reassignment at the new time" : "reassignment";
  // A 404 for an appointment that is still there: the service does not take this therapist.
  const refusedAs404 =
    err instanceof BookingApiError && err.kind === "not_found" && !(await appointmentGone(ctx, w.id));
  if (isRefusal(err) || refusedAs404) {
    w.tell?.({ kind: "reassign", result: "refused", error: err, therapistId: moved.therapistId });
    await putBackFrom(
      ctx,
      w,
      moved,
      `calbridge: the ${what} was refused by the booking service (${(err as BookingApiError).code}). The event was put back.`,
    );
    ctx.fx.metrics.writebacks.inc({ kind: "reassign", result: "refused" });
    return undefined;
  }
  // Retried (a 404 of an appointment that is gone goes to the write-back's "gone" path).
  if (w.attempt < w.maxAttempts || isNotFound(err)) throw err;
  // The last attempt. The PATCH may have been taken although its answer was lost (a timeout, a 5xx after the change):
  // look before undoing the therapist's move. When we cannot look, nothing is undone; the move stays as it is, and
  // the next reconciliation sends the reassignment again.
  let now: Snapshot;
  try {
    now = await ctx.booking.getAppointment(w.id, { priority: "writeback" });
  } catch (lookErr) {
    w.log.warn(
      { writeback: "reassign", err: describeError(err), look: describeError(lookErr) },
      "reassignment not sent, and whether it was taken cannot be seen: the event is left where the therapist moved it",
    );
    throw new LeaveAsIs(err);
  }
  if (now.therapist_id === moved.therapistId) {
    w.log.info(
      { writeback: "reassign", to: moved.therapistId },
      "reassignment found taken although its answer was lost",
    );
    return now;
  }
  w.tell?.({ kind: "reassign", result: "failed", error: err, therapistId: moved.therapistId });
  await putBackFrom(
    ctx,
    w,
    moved,
    `calbridge: your move of this appointment to the calendar of another therapist was not applied: it could not be sent after ${w.attempt} attempts (${describeError(err)}). The event shows the booking again.`,
  );
  ctx.fx.metrics.writebacks.inc({ kind: "reassign", result: "failed" });
  w.log.warn(
    { writeback: "reassign", to: moved.therapistId, err: describeError(err) },
    "reassignment not applied; event removed from the other calendar and restored from the booking",
  );
  return undefined;
}

/**
 * The reassignment is not made: the event goes back to its own calendar, out of the other one first, so that a restore
 * that fails leaves no second event behind. The refusal is recorded before the copy is removed: once it is removed, the
 * event is deleted here and nowhere else, and without the refusal on record (a store write that failed, a crash) the
 * next sync took that for the therapist's deletion and cancelled the appointment. With it, the event is put back.
 */
async function putBackFrom(
  ctx: Ctx,
  w: WritebackInput,
  moved: { therapistId: string; event: CalEvent },
  text: string,
): Promise<void> {
  const notice = await noteRefusal(ctx, w, text);
  await ctx.fx.remove(moved.therapistId, w.link.eventId);
  await putBack(ctx, w, notice);
}

/**
 * After a deleted event was put back in its therapist's calendar without a write-back (the appointment had begun, is
 * not confirmed, cancelling from the calendar is off, ...): the "deletion" may have been a move to a colleague's
 * mapped calendar (Google's "Change calendar"). That copy, under an id the link no longer names, showed the
 * appointment a second time for good: removed, when it carries the appointment's mark. Nothing is sent; a calendar
 * that cannot be looked at is logged and left.
 */
export async function removeColleagueCopy(fx: Effects, link: Link, log: Logger): Promise<void> {
  for (const t of fx.mapping.therapists) {
    const therapistId = t.therapist_id;
    const cal = therapistId === link.therapistId ? undefined : fx.mapping.calendarIfAny(therapistId);
    if (!cal || fx.mapping.sharesCalendar?.(therapistId)) continue;
    try {
      const event = await cal.get(link.eventId, { confirmMissing: true });
      if (!event || event.status === "cancelled" || !carriesMarks(event, link.appointmentId)) continue;
      await cal.delete(link.eventId);
      fx.counted(therapistId, "delete");
      log.info(
        { therapist_id: therapistId, event_id: link.eventId },
        "copy of the appointment's event the therapist had moved to a colleague's calendar removed (not written back)",
      );
    } catch (err) {
      if (err instanceof EngineStoppedError) throw err;
      log.warn({ therapist_id: therapistId, err: describeError(err) }, "calendar not looked at for a moved copy");
    }
  }
}

/**
 * A reassigned event that was a series leaves its pieces behind: a series split off it in the old calendar, and its
 * occurrences moved on their own in the new one (Google moves them with the event; making it single keeps them). They
 * would go on showing the appointment. Already reassigned: a failure here is only logged.
 */
async function dropSeriesLeft(ctx: Ctx, w: WritebackInput, moved: { therapistId: string; event: CalEvent }) {
  const drop = (therapistId: string, eventId: string) =>
    ctx.fx.mapping.calendarIfAny(therapistId)
      ? ctx.fx.removeTails(therapistId, w.id, eventId, w.log).catch((err: unknown) => {
          w.log.warn({ err: describeError(err), therapist_id: therapistId }, "series left by the event not removed");
        })
      : undefined;
  await drop(w.link.therapistId, w.link.eventId);
  await drop(moved.therapistId, moved.event.id ?? w.link.eventId);
}
