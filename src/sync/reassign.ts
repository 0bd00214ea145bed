// Owns the write-back of an event moved to another mapped therapist's calendar ("Change calendar" in Google): finding
// it there, and reassigning the appointment, or putting the event back in its own calendar when that is refused or off.
import { BookingApiError } from "../booking/errors.ts";
import { APPOINTMENT_ID_PROPERTY } from "../calendar/ids.ts";
import { describeError, isRefusal, isUnavailable } from "./errors.ts";
import { OtherCalendarUnavailableError } from "./mapping.ts";
import { merge } from "./snapshot.ts";
import type { CalEvent, Link } from "./types.ts";
import { accept, appointmentGone, type Ctx, restore, type WritebackInput } from "./writeback-steps.ts";

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
    if (
      event &&
      event.status !== "cancelled" &&
      event.extendedProperties?.private?.[APPOINTMENT_ID_PROPERTY] === link.appointmentId
    ) {
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
