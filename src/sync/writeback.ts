// Owns the write-back of a therapist's calendar change to the booking service: a moved event becomes a PATCH, a
// deleted one a cancel, an event moved to another mapped calendar a reassignment, one moved to another calendar of the
// therapist's own account nothing (it is brought back: moved-out.ts). A refusal, or a failure that outlives its
// retries, restores the event from the booking and says why in the event itself.
import { BookingApiError, isChangedMeanwhile } from "../booking/errors.ts";
import { bookingInstant } from "../booking/instant.ts";
import { BEGUN_REASON, begun, CANCEL_OFF } from "./changes.ts";
import type { Effects } from "./effects.ts";
import { describeError, isRefusal, isUnavailable } from "./errors.ts";
import { OtherCalendarUnavailableError } from "./mapping.ts";
import { findInOwnCalendars, keepInMappedCalendar } from "./moved-out.ts";
import { findElsewhere, movedToOtherCalendar } from "./reassign.ts";
import { tailsSince } from "./series-tails.ts";
import { merge } from "./snapshot.ts";
import { EngineStoppedError } from "./stopped.ts";
import type { Action, BookingPort } from "./types.ts";
import { ChangeTakenBack, stillAsDecided, stillDeleted, stillMoved } from "./writeback-basis.ts";
import {
  accept,
  appointmentGone,
  type Ctx,
  LeaveAsIs,
  removeEvent,
  restore,
  type WritebackInput,
} from "./writeback-steps.ts";

type WritebackAction = Extract<Action, { kind: "writeback_reschedule" | "writeback_cancel" }>;

export async function applyWriteback(
  fx: Effects,
  booking: BookingPort,
  action: WritebackAction,
  w: WritebackInput,
): Promise<void> {
  const ctx: Ctx = { fx, booking };
  const kind = action.kind === "writeback_reschedule" ? "reschedule" : "cancel";
  try {
    if (action.kind === "writeback_reschedule") await reschedule(ctx, action.startTime, w);
    else await cancel(ctx, w);
  } catch (err) {
    // The engine stops and gave up a call that sent nothing: no answer about the write-back, nothing put back.
    if (err instanceof EngineStoppedError) throw err;
    if (err instanceof LeaveAsIs) throw err.cause;
    // Someone else changed the appointment since this was decided on: nothing sent, the attempt decides again.
    if (isChangedMeanwhile(err) || err instanceof ChangeTakenBack) throw err;
    // A yes from the booking service that could not be checked may have been applied: retried or a dead letter (the
    // next attempt reads the booking again), never "not applied" with the event put back.
    if (err instanceof BookingApiError && err.code === "unconfirmed_success") throw err;
    if (err instanceof BookingApiError && err.kind === "not_found" && (await appointmentGone(ctx, w.id))) {
      // The booking service no longer knows the appointment: nothing to restore it from.
      w.tell?.({ kind, result: "gone", error: err });
      await removeEvent(ctx, w, "appointment no longer exists");
      fx.metrics.writebacks.inc({ kind, result: "gone" });
      return;
    }
    // A calendar that cannot be used now (credentials, quota pause) says nothing about the change: the engine waits.
    if (isUnavailable(err)) throw err;
    // A 404 from the write while the appointment is still there (a reassignment to a therapist the service does not
    // know, say) is a refusal: the event is restored with the reason.
    const refused = isRefusal(err) || (err instanceof BookingApiError && err.kind === "not_found");
    const retry = () => {
      fx.metrics.writebacks.inc({ kind, result: "retry" });
      return err;
    };
    // An answer the service gave (not a transport failure) may say the change is done already: looked at below first.
    const answered = err instanceof BookingApiError && !err.retryable;
    if (!refused && !answered && w.attempt < w.maxAttempts) throw retry();
    // Before the event is put back, or an answer retried: the booking as it is now. Another client may have done what
    // the therapist asked while the write-back was on its way (the customer cancelled: 409, "already cancelled"), or
    // changed the appointment; the event then shows that, never what was read before with a note that the change was
    // not applied.
    const now = await ctx.booking.getAppointment(w.id, { priority: "writeback" }).catch(() => undefined);
    if (now) {
      w = { ...w, appt: merge(w.appt, now), full: true };
      if (await alreadyDone(ctx, action, w, err)) return;
    }
    if (!refused && w.attempt < w.maxAttempts) throw retry();
    w.tell?.({ kind, result: refused ? "refused" : "failed", error: err, status: w.appt.status });
    const why = refused
      ? `the booking service refused it (${refusalText(err)})`
      : `it could not be sent after ${w.attempt} attempts (${failureText(err)})`;
    await restore(
      ctx,
      w,
      `calbridge: your ${kind === "reschedule" ? "move" : "deletion"} of this appointment was not applied: ${why}. The event shows the booking again.`,
    );
    fx.metrics.writebacks.inc({ kind, result: refused ? "refused" : "failed" });
    w.log.warn(
      { writeback: kind, err: describeError(err), refused },
      "write-back not applied; event restored from the booking",
    );
  }
}

async function reschedule(ctx: Ctx, startTime: string, w: WritebackInput): Promise<void> {
  const basis = await stillAsDecided(ctx, w, "PATCH");
  const res = await ctx.booking.patchAppointment(
    w.id,
    { start_time: startTime },
    { priority: "writeback", basis, beforeSend: () => stillMoved(ctx, w, startTime) },
  );
  w.tell?.({ kind: "reschedule", result: "ok", status: res.status });
  const booking = merge(w.appt, res);
  const sourceAt = Math.max(w.sourceAt, bookingInstant(res.updated_at) || 0);
  // The booking service took the move: a failure from here on is never answered by putting the old time back.
  await accept(ctx, w, w.link.therapistId, { ...w, appt: booking }, w.event ?? undefined, sourceAt).catch(leaveAsIs);
  ctx.fx.metrics.writebacks.inc({ kind: "reschedule", result: "ok" });
  ctx.fx.activity.wroteBack(w.link.therapistId); // taken by the booking service: what /status counts
  w.log.info({ writeback: "reschedule", start_time: booking.start_time }, "appointment rescheduled from the calendar");
}

async function cancel(ctx: Ctx, w: WritebackInput): Promise<void> {
  // A mapped calendar that cannot be looked at: the event may be there, unless found in the account's own calendars.
  let waits: OtherCalendarUnavailableError | undefined;
  const moved = await findElsewhere(ctx, w.link).catch((err: unknown) => {
    if (!(err instanceof OtherCalendarUnavailableError)) throw err;
    waits = err;
    return undefined;
  });
  if (moved) {
    await movedToOtherCalendar(ctx, w, moved);
    return;
  }
  // Moved to a calendar of the therapist's own account that calbridge does not manage: kept, never cancelled.
  const outside = await findInOwnCalendars(ctx, w.link, w.log, w.seenAt);
  if (outside) {
    await keepInMappedCalendar(ctx, w, outside);
    return;
  }
  if (waits) throw waits;
  // Decided before the appointment began, the look-ups above may have outlasted its start (Google slow, retries):
  // never cancelled once it has begun (decide.ts), so put back saying why.
  if (begun(w.appt, ctx.fx.clock.now())) {
    w.tell?.({ kind: "cancel", result: "disabled" });
    await restore(ctx, w, `calbridge: your change to this event was undone: ${BEGUN_REASON}.`);
    ctx.fx.metrics.writebacks.inc({ kind: "cancel", result: "disabled" });
    return;
  }
  const wb = ctx.fx.mapping.writeback(w.link.therapistId);
  if (!wb.cancel) {
    // Planned only to look for a move to a colleague's calendar (writeback.reassign on, decide.ts): never sent.
    w.tell?.({ kind: "cancel", result: "disabled" });
    await restore(ctx, w, `calbridge: your change to this event was undone: ${CANCEL_OFF}.`);
    ctx.fx.metrics.writebacks.inc({ kind: "cancel", result: "disabled" });
    return;
  }
  const basis = await stillAsDecided(ctx, w, "POST");
  const res = await ctx.booking.cancelAppointment(
    w.id,
    { reason: wb.reason, notify_customer: wb.notify_customer },
    { priority: "writeback", basis, beforeSend: () => stillDeleted(ctx, w) },
  );
  const booking = merge(w.appt, { ...res, status: res.status ?? "cancelled" });
  // Cancelled by someone else while ours was retried (the answer, read again, names another reason): not ours to claim
  // in the history, the one place a "who cancelled this?" is settled. An answer without a reason is ours.
  // With no reason of calbridge's own, nothing tells: ours.
  const theirs =
    reasonText(wb.reason) !== "" &&
    reasonText(res.cancellation_reason) !== "" &&
    !ownReason(wb.reason, res.cancellation_reason);
  w.tell?.({ kind: "cancel", result: theirs ? "already" : "ok", status: booking.status });
  await cancelled(ctx, w, booking, theirs ? "already" : "ok");
}

/**
 * The booking already shows what the therapist asked for, though this write-back was not taken: cancelled by someone
 * else, or at the time the event was moved to. Recorded as it stands (the history says "already"), nothing put back.
 */
async function alreadyDone(ctx: Ctx, action: WritebackAction, w: WritebackInput, err: unknown): Promise<boolean> {
  if (action.kind === "writeback_cancel") {
    if (w.appt.status !== "cancelled") return false;
    // Cancelled with calbridge's own reason: the POST was applied, its answer lost (calbridge's cancellation).
    const ours = ownReason(ctx.fx.mapping.writeback(w.link.therapistId).reason, w.appt.cancellation_reason);
    const result = ours ? "ok" : "already";
    w.tell?.({ kind: "cancel", result, error: err, status: "cancelled" });
    await cancelled(ctx, w, w.appt, result);
    return true;
  }
  if (w.appt.status !== "confirmed" || bookingInstant(w.appt.start_time) !== Date.parse(action.startTime)) return false;
  w.tell?.({ kind: "reschedule", result: "already", error: err, status: w.appt.status });
  const sourceAt = Math.max(w.sourceAt, bookingInstant(w.appt.updated_at) || 0);
  await accept(ctx, w, w.link.therapistId, w, w.event ?? undefined, sourceAt);
  ctx.fx.metrics.writebacks.inc({ kind: "reschedule", result: "already" });
  w.log.info({ writeback: "reschedule", err: describeError(err) }, "the booking already has the event's time");
  return true;
}

/** The appointment is cancelled (by this write-back, or already): its deleted event recorded, and what it left behind removed. */
async function cancelled(ctx: Ctx, w: WritebackInput, booking: WritebackInput["appt"], result: "ok" | "already") {
  // Cancelled: a failure from here on is never answered by putting the event back.
  await ctx.fx
    .record({
      appointmentId: w.id,
      therapistId: w.link.therapistId,
      eventId: w.link.eventId,
      booking,
      sourceAt: w.sourceAt,
      present: false,
      removedBy: "calendar",
    })
    .catch(leaveAsIs);
  ctx.fx.metrics.writebacks.inc({ kind: "cancel", result });
  if (result === "ok") {
    ctx.fx.activity.wroteBack(w.link.therapistId); // taken by the booking service: what /status counts
    w.log.info({ writeback: "cancel" }, "appointment cancelled from the calendar");
  } else w.log.info({ writeback: "cancel" }, "appointment already cancelled in the booking service");
  // A series Google split off the deleted one ("This and following events") would go on showing the appointment.
  if (ctx.fx.mapping.calendarIfAny(w.link.therapistId)) {
    await ctx.fx
      .removeTails(w.link.therapistId, w.id, w.link.eventId, w.log, tailsSince(w.link, w.event))
      .catch((err: unknown) => {
        w.log.warn({ err: describeError(err) }, "series split off the deleted event not removed; purge removes it");
      });
  }
  // calbridge's old event in the previous therapist's calendar, which a reassignment could not remove (leftovers.ts),
  // would go on showing the cancelled appointment there: the reconciliation no longer takes it for a copy.
  const left = await ctx.fx.leftovers?.get(w.id).catch(() => undefined);
  if (left && ctx.fx.mapping.calendarIfAny(left.therapistId)) {
    await ctx.fx
      .remove(left.therapistId, left.eventId)
      .then(() => ctx.fx.leftovers?.forget(w.id))
      .catch((err: unknown) => {
        w.log.warn(
          { err: describeError(err), therapist_id: left.therapistId },
          "old event of the appointment not removed",
        );
      });
  }
}

/** A cancellation reason as compared: services store it trimmed, or with its whitespace collapsed. */
function reasonText(reason: unknown): string {
  return typeof reason === "string" ? reason.trim().replace(/\s+/g, " ") : "";
}

/** The booking's cancellation reason is calbridge's own (`sync.writeback.reason`); an empty one is nobody's. */
function ownReason(ours: string | undefined, stored: unknown): boolean {
  return reasonText(ours) !== "" && reasonText(stored) === reasonText(ours);
}

/** After the booking service took a write-back: retried, or a dead letter; the next sync brings the event in line. */
function leaveAsIs(err: unknown): never {
  throw new LeaveAsIs(err);
}

/**
 * What the booking service's answer means, for the note in the event (which people who share the calendar read) and
 * the link's notice (kept at rest): its code, put in words for the codes the spec lists, never its message, which is
 * free "human-readable text" and may name the customer ("Customer Jane Doe <jane@...> is blocked").
 */
const REFUSALS: Record<string, string> = {
  slot_unavailable: "the time is no longer available",
  therapist_unavailable: "the therapist is not available at that time",
  past_booking: "the time is in the past",
  customer_blocked: "the customer is blocked from booking",
  service_not_found: "the service is not known",
  invalid_request: "it found the request invalid",
  not_applied: "it answered yes but left the appointment as it was",
  not_found: "it does not know the appointment or the therapist",
};

function refusalText(err: unknown): string {
  if (!(err instanceof BookingApiError)) return "no reason given";
  const said = REFUSALS[err.code];
  const named = err.details["field"];
  const field = typeof named === "string" && /^[\w.[\]]{1,64}$/.test(named) ? `, field ${named}` : "";
  return `${err.code}${said ? `: ${said}` : ""}${field}${err.status ? `, HTTP ${err.status}` : ""}`;
}

function failureText(err: unknown): string {
  if (err instanceof BookingApiError) return `${err.code}${err.status ? `, HTTP ${err.status}` : ""}`;
  return err instanceof Error && /^(Abort|Timeout)Error$/.test(err.name) ? "timed out" : "an unexpected error";
}
