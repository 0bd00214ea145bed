// Owns the write-back of a therapist's calendar change to the booking service: a moved event becomes a PATCH, a
// deleted one a cancel, an event moved to another mapped calendar a reassignment. A refusal, or a failure that
// outlives its retries, restores the event from the booking and says why in the event itself.
import { BookingApiError } from "../booking/errors.ts";
import { fingerprint, ownershipOf } from "../calendar/fingerprint.ts";
import { APPOINTMENT_ID_PROPERTY } from "../calendar/ids.ts";
import type { Logger } from "../log.ts";
import type { Effects } from "./effects.ts";
import { describeError, isRefusal, isUnavailable } from "./errors.ts";
import { NeedsFullRead } from "./inputs.ts";
import type { Rendering } from "./planner.ts";
import { merge } from "./snapshot.ts";
import type { Action, BookingPort, CalEvent, Link, Snapshot } from "./types.ts";

type WritebackAction = Extract<Action, { kind: "writeback_reschedule" | "writeback_cancel" }>;

/** What became of a write-back, for the appointment's history: what was sent, and the booking service's answer. */
export interface WritebackOutcome {
  kind: "reschedule" | "cancel" | "reassign";
  /** ok: taken; refused or failed: the event is put back; gone: the appointment no longer exists; disabled: not sent. */
  result: "ok" | "refused" | "failed" | "gone" | "disabled";
  /** The refusal or the last failure. */
  error?: unknown;
  /** The booking's status in the answer. */
  status?: string | undefined;
  /** A reassignment: the therapist whose calendar the event was moved to (where it stays only when `ok`). */
  therapistId?: string;
}

interface WritebackInput {
  id: string;
  /** The booking's current state. */
  appt: Snapshot;
  /** `appt` is the full form (else a payload or list item: rendering may need the full form first). */
  full: boolean;
  link: Link;
  /** The event as the therapist left it (undefined when not read). */
  event: CalEvent | null | undefined;
  sourceAt: number;
  log: Logger;
  attempt: number;
  maxAttempts: number;
  /** Told the booking service's answer as soon as it is known, before the event is put back after a refusal. */
  tell?: (outcome: WritebackOutcome) => void;
}

/** The collaborators of a write-back: the effects on calendars and links, and the booking service. */
type Ctx = { fx: Effects; booking: BookingPort };

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
    if (!refused && w.attempt < w.maxAttempts) {
      fx.metrics.writebacks.inc({ kind, result: "retry" });
      throw err;
    }
    w.tell?.({ kind, result: refused ? "refused" : "failed", error: err });
    const why = refused
      ? `the booking service refused it (${(err as { code: string }).code}: ${describeError(err).replace(/ \(.*\)$/, "")})`
      : `it could not be sent after ${w.attempt} attempts (${describeError(err)})`;
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

/** Whether a GET confirms that the booking service does not know the appointment (any other failure is thrown). */
async function appointmentGone(ctx: Ctx, id: string): Promise<boolean> {
  try {
    await ctx.booking.getAppointment(id, { priority: "writeback" });
    return false;
  } catch (err) {
    if (err instanceof BookingApiError && err.kind === "not_found") return true;
    throw err;
  }
}

async function reschedule(ctx: Ctx, startTime: string, w: WritebackInput): Promise<void> {
  const res = await ctx.booking.patchAppointment(w.id, { start_time: startTime }, { priority: "writeback" });
  w.tell?.({ kind: "reschedule", result: "ok", status: res.status });
  const booking = merge(w.appt, res);
  const sourceAt = Math.max(w.sourceAt, Date.parse(res.updated_at ?? "") || 0);
  await accept(ctx, w, w.link.therapistId, { ...w, appt: booking }, w.event ?? undefined, sourceAt);
  ctx.fx.metrics.writebacks.inc({ kind: "reschedule", result: "ok" });
  w.log.info({ writeback: "reschedule", start_time: booking.start_time }, "appointment rescheduled from the calendar");
}

async function cancel(ctx: Ctx, w: WritebackInput): Promise<void> {
  const moved = await findElsewhere(ctx, w.link);
  if (moved) {
    await movedToOtherCalendar(ctx, w, moved);
    return;
  }
  const wb = ctx.fx.mapping.writeback(w.link.therapistId);
  const res = await ctx.booking.cancelAppointment(
    w.id,
    { reason: wb.reason, notify_customer: wb.notify_customer },
    { priority: "writeback" },
  );
  const booking = merge(w.appt, { ...res, status: res.status ?? "cancelled" });
  w.tell?.({ kind: "cancel", result: "ok", status: booking.status });
  await ctx.fx.record({
    appointmentId: w.id,
    therapistId: w.link.therapistId,
    eventId: w.link.eventId,
    booking,
    sourceAt: w.sourceAt,
    present: false,
    removedBy: "calendar",
  });
  ctx.fx.metrics.writebacks.inc({ kind: "cancel", result: "ok" });
  w.log.info({ writeback: "cancel" }, "appointment cancelled from the calendar");
}

/** A deletion may be a move to another mapped therapist's calendar: look for the same event there. */
async function findElsewhere(ctx: Ctx, link: Link): Promise<{ therapistId: string; event: CalEvent } | undefined> {
  for (const [therapistId, cal] of ctx.fx.mapping.calendars) {
    if (therapistId === link.therapistId) continue;
    // Only an answer counts: an error (quota, credentials, 5xx) is thrown and the write-back retried, never read as
    // "not there", which would cancel an appointment the therapist only moved.
    const event = await cal.get(link.eventId);
    if (
      event &&
      event.status !== "cancelled" &&
      event.extendedProperties?.private?.[APPOINTMENT_ID_PROPERTY] === link.appointmentId
    ) {
      return { therapistId, event };
    }
  }
  return undefined;
}

async function movedToOtherCalendar(
  ctx: Ctx,
  w: WritebackInput,
  moved: { therapistId: string; event: CalEvent },
): Promise<void> {
  const to = ctx.fx.mapping.therapist(moved.therapistId);
  const wb = ctx.fx.mapping.writeback(w.link.therapistId);
  if (!wb.reassign || !to) {
    w.tell?.({ kind: "reassign", result: "disabled", therapistId: moved.therapistId });
    await ctx.fx.remove(moved.therapistId, w.link.eventId);
    await restore(
      ctx,
      w,
      "calbridge: moving an appointment to another therapist's calendar does not reassign it here (writeback.reassign is off). The event was put back.",
    );
    ctx.fx.metrics.writebacks.inc({ kind: "reassign", result: "disabled" });
    return;
  }
  try {
    const res = await ctx.booking.patchAppointment(
      w.id,
      { therapist_id: moved.therapistId },
      { priority: "writeback" },
    );
    w.tell?.({ kind: "reassign", result: "ok", status: res.status, therapistId: moved.therapistId });
    await accept(ctx, w, moved.therapistId, { ...w, appt: merge(w.appt, res) }, moved.event, w.sourceAt);
    ctx.fx.metrics.writebacks.inc({ kind: "reassign", result: "ok" });
    w.log.info({ writeback: "reassign", to: moved.therapistId }, "appointment reassigned from the calendar");
  } catch (err) {
    // A 404 for an appointment that is still there: the service does not take this therapist.
    const refusedAs404 =
      err instanceof BookingApiError && err.kind === "not_found" && !(await appointmentGone(ctx, w.id));
    if (!isRefusal(err) && !refusedAs404) throw err;
    w.tell?.({ kind: "reassign", result: "refused", error: err, therapistId: moved.therapistId });
    await ctx.fx.remove(moved.therapistId, w.link.eventId);
    await restore(
      ctx,
      w,
      `calbridge: the reassignment was refused by the booking service (${(err as BookingApiError).code}). The event was put back.`,
    );
    ctx.fx.metrics.writebacks.inc({ kind: "reassign", result: "refused" });
  }
}

/**
 * The event body for `state` in `therapistId`'s calendar. A payload or list item that lacks fields the event shows is
 * completed by a full read first (at write-back priority), so a write-back never leaves the event showing less.
 */
async function renderFor(
  ctx: Ctx,
  w: WritebackInput,
  state: { appt: Snapshot; full: boolean },
  therapistId: string,
  notice?: Link["notice"],
): Promise<{ rendering: Rendering | null; appt: Snapshot }> {
  try {
    return { rendering: ctx.fx.render(state, w.link, therapistId, notice), appt: state.appt };
  } catch (err) {
    if (!(err instanceof NeedsFullRead) || state.full) throw err;
    const appt = merge(state.appt, await ctx.booking.getAppointment(w.id, { priority: "writeback" }));
    return { rendering: ctx.fx.render({ appt, full: true }, w.link, therapistId, notice), appt };
  }
}

/**
 * The booking took the therapist's change: record the event as it now stands in `therapistId`'s calendar, rewriting
 * only what the templates derive from the new state (the calendar already shows the time and the place).
 */
async function accept(
  ctx: Ctx,
  w: WritebackInput,
  therapistId: string,
  state: { appt: Snapshot; full: boolean },
  current: CalEvent | undefined,
  sourceAt: number,
): Promise<void> {
  const { rendering, appt } = await renderFor(ctx, w, state, therapistId);
  const desired = rendering?.body;
  let event = current;
  let at = { eventId: w.link.eventId, generation: w.link.generation ?? 0 };
  const owned = ownershipOf(desired);
  if (desired && event && fingerprint(event, owned) !== fingerprint(desired, owned)) {
    const written = await ctx.fx.write(therapistId, "update", desired, linkAt(w), event.etag ?? undefined);
    event = written.event;
    at = written;
  }
  await ctx.fx.record({
    appointmentId: w.id,
    therapistId,
    eventId: at.eventId,
    generation: at.generation,
    booking: appt,
    sourceAt,
    event,
    present: true,
    ...(rendering ? { rendered: rendering.rendered } : {}),
  });
}

/**
 * Puts the event back as the booking has it, with a visible note. The refusal is recorded first: should the restore
 * fail (Google down, a quota pause), its retries put the event back and never send the refused write-back again.
 */
async function restore(ctx: Ctx, w: WritebackInput, text: string): Promise<void> {
  const notice = { text, at: ctx.fx.clock.now() };
  // The link keeps what the event shows (it is still there), so a retry renders no less either.
  await ctx.fx.links.save({ ...w.link, present: false, removedBy: "refused", notice, syncedAt: ctx.fx.clock.now() });
  const { rendering, appt } = await renderFor(ctx, w, w, w.link.therapistId, notice);
  if (!rendering) {
    await removeEvent(ctx, w, "nothing to restore");
    return;
  }
  const written = await ctx.fx.write(w.link.therapistId, "restore", rendering.body, linkAt(w));
  await ctx.fx.record({
    appointmentId: w.id,
    therapistId: w.link.therapistId,
    eventId: written.eventId,
    generation: written.generation,
    booking: appt,
    sourceAt: w.sourceAt,
    event: written.event,
    body: rendering.body,
    present: true,
    notice,
    rendered: rendering.rendered,
  });
}

async function removeEvent(ctx: Ctx, w: WritebackInput, reason: string): Promise<void> {
  if (ctx.fx.mapping.calendarIfAny(w.link.therapistId)) await ctx.fx.remove(w.link.therapistId, w.link.eventId);
  await ctx.fx.links.save({ ...w.link, present: false, removedBy: "booking", syncedAt: ctx.fx.clock.now() });
  w.log.info({ reason }, "event removed");
}

function linkAt(w: WritebackInput) {
  return { appointmentId: w.id, eventId: w.link.eventId, generation: w.link.generation ?? 0 };
}
