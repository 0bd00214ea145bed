// Owns the decision for one appointment: given the booking's state, the calendar's state and the link remembered from
// the last sync, which single action brings the two sides together. Pure: the dry run and tests see what runs.
import { fingerprint, instantOf } from "../calendar/fingerprint.ts";
import { carriesMarks } from "../calendar/ids.ts";
import type { RenderedEvent } from "../calendar/render.ts";
import { BEGUN_REASON, begun, bookingChanged, CANCEL_OFF, effectiveChange, lastSynced, sameStatus } from "./changes.ts";
import type { DecideInput } from "./decide-input.ts";
import { type AsWritten, bodyOf as bodyFrom, ownedBy, printOf } from "./desired.ts";
import { addedText, editNotice, quoting, sameText } from "./edit-notice.ts";
import type { Action, CalEvent } from "./types.ts";
import { lostRecordsNote } from "./unsent-notes.ts";
import { unwatchedChange } from "./watched.ts";

export { bookingChanged, type CalendarChange, calendarChange } from "./changes.ts";
export type { DecideInput } from "./decide-input.ts";
export type { AsWritten, Desired } from "./desired.ts";

/** The event when it exists and is not deleted. */
const live = (event: CalEvent | null | undefined): CalEvent | undefined =>
  event && event.status !== "cancelled" ? event : undefined;

export function decide(input: DecideInput): Action {
  const { appointmentId: id, appt, link, event } = input;
  const wish = input.desired;
  // A body wherever one is written: "as written" has none, so that asks for the full form.
  const bodyOf = (d: RenderedEvent | AsWritten) => bodyFrom(id, d);
  const owned = ownedBy(wish);
  const none = (reason: string): Extract<Action, { kind: "none" }> => ({ kind: "none", appointmentId: id, reason });
  const remove = (therapistId: string, eventId: string, reason: string): Action => ({
    kind: "delete",
    appointmentId: id,
    therapistId,
    eventId,
    reason,
  });

  if (appt === null) {
    if (!link?.present && input.seenIn && live(event)) {
      return remove(input.seenIn, input.eventId, "appointment no longer exists");
    }
    if (link?.present) {
      return remove(link.therapistId, link.eventId, "appointment no longer exists");
    }
    return none("appointment no longer exists");
  }

  const target = input.targetTherapistId;

  // Nothing of ours in a calendar yet (or removed on purpose): create, adopt, or leave alone.
  if (!link?.present) {
    if (!target) {
      if (!link && input.seenIn && live(event)) {
        return remove(input.seenIn, input.eventId, "event of an unmapped therapist's appointment");
      }
      return none("therapist not mapped");
    }
    if (wish === null) {
      if (live(event)) {
        // An event without a link (a crash between the calendar write and the store write), or one brought back after
        // calbridge removed it or its deletion cancelled the appointment (Google's undo, the bin): remove it.
        return remove(target, input.eventId, "event left behind for a cancelled appointment");
      }
      return none(appt.status === "cancelled" ? "cancelled" : "no event wanted");
    }
    // A cancelled appointment's event removed and brought back (a late Undo, the Bin) is shown as cancelled below.
    const broughtBack = appt.status === "cancelled" && live(event);
    if (link?.removedBy === "calendar" && appt.status === "cancelled" && !broughtBack)
      return none("removed by the therapist");
    if (link && !link.present && link.removedBy === "calendar" && !bookingChanged(link, appt) && !broughtBack) {
      return none("deleted in the calendar; the write-back is pending or was declined");
    }
    // No record, and a person deleted the event of a begun appointment: left deleted. A past link expires; a full
    // listing then reports the old deletion again, and recreated with the note below it invited a cancellation.
    if (!link && event?.status === "cancelled" && begun(appt, input.now)) {
      return none("deleted in the calendar, and the appointment has begun: left deleted, nothing sent");
    }
    const desired = bodyOf(wish);
    const existing = live(event);
    // No record at all (the store was lost, or a crash before the link was written): should Google refuse the id, a
    // person deleted that event and the deletion was never sent. The event comes back saying so, never a cancellation.
    const unsent =
      !link && (appt.status ?? "confirmed") === "confirmed"
        ? { unsent: lostRecordsNote(input.writeback.cancel, begun(appt, input.now)) }
        : {};
    if (existing) {
      if (fingerprint(existing, owned) === printOf(desired) && carriesMarks(existing, id)) {
        return {
          kind: "adopt",
          appointmentId: id,
          therapistId: target,
          event: existing,
          reason: "event already matches",
        };
      }
      return {
        kind: "update",
        appointmentId: id,
        therapistId: target,
        eventId: input.eventId,
        body: desired,
        ifMatch: existing.etag ?? undefined,
        reason: "event exists without a record",
        ...unsent,
      };
    }
    return {
      kind: "create",
      appointmentId: id,
      therapistId: target,
      eventId: input.eventId,
      body: desired,
      reason: link ? "recreated" : "new appointment",
      ...unsent,
    };
  }

  const fromBooking = bookingChanged(link, appt, event);
  const change = effectiveChange(link, event, appt, fromBooking);
  // Text the therapist typed into the description, quoted by whichever notice the write over it shows (edit-notice.ts).
  const same = sameText(link, input.rendered, fromBooking);
  const quote = (body: RenderedEvent, carry: boolean) => addedText(live(event), link, body, same, carry);

  // The therapist's change goes back, unless the booking changed too and wins, or it was reassigned (not theirs).
  const reassigned = link.therapistId !== target;
  // A kept "Cancelled" marker cleared away, or an event deleted while the customer cancelled (its delete removes a copy
  // a "deletion" that was a move left in another calendar): nothing put back.
  if (change === "deleted" && appt.status === "cancelled" && !reassigned) {
    if (fromBooking) return remove(link.therapistId, link.eventId, "cancelled");
    return { ...none("the therapist removed a cancelled appointment's event"), removedBy: "calendar" };
  }
  if (change !== "none" && !reassigned && !(fromBooking && input.conflict === "booking_wins")) {
    const wb = input.writeback;
    const restore = (reason: string): Action =>
      wish === null
        ? remove(link.therapistId, link.eventId, reason)
        : {
            kind: "restore",
            appointmentId: id,
            therapistId: link.therapistId,
            eventId: link.eventId,
            body: bodyOf(wish),
            reason,
            notice: quoting(
              `calbridge: your change to this event was undone: ${reason}.`,
              quote(bodyOf(wish), !fromBooking),
            ),
          };
    if (unwatchedChange(link, event, input.watchedSince ?? 0)) {
      return restore("it was made while calbridge was not syncing this calendar, so it was not sent to the booking");
    }
    if (appt.status !== "confirmed") {
      const is = appt.status ?? "not shown as confirmed by the booking service"; // no status: nothing sent on a guess
      return restore(`the appointment is ${is}; only confirmed appointments can be changed from the calendar`);
    }
    if (change === "deleted" && begun(appt, input.now)) {
      return restore(BEGUN_REASON);
    }
    if (change === "deleted") {
      return wb.cancel || wb.reassign
        ? {
            kind: "writeback_cancel",
            appointmentId: id,
            therapistId: link.therapistId,
            reason: "event deleted in the calendar",
          }
        : restore(CANCEL_OFF);
    }
    if (change === "repeating") {
      return restore(
        "a booking is a single appointment, so the event does not repeat; book further appointments in the booking service",
      );
    }
    if (change === "all_day") return restore("an all-day event cannot be an appointment; times restored");
    if (change === "resized") return restore("the booking service keeps an appointment's duration; times restored");
    if (!wb.reschedule) return restore("event moved in the calendar, and rescheduling from the calendar is turned off");
    const start = instantOf(event?.start);
    // No calendar app moves an event by seconds: a script or another sync tool did, and nobody meant a reschedule.
    if (Math.abs((start ?? 0) - (lastSynced(link, event).start ?? 0)) < 60_000) {
      return restore("moved by less than a minute, which is no reschedule; times restored");
    }
    return {
      kind: "writeback_reschedule",
      appointmentId: id,
      therapistId: link.therapistId,
      startTime: new Date(start ?? 0).toISOString(),
      reason: "event moved in the calendar",
    };
  }

  // The therapist changed the event, but the booking changed too and wins: their change is undone, and says so.
  const overridden = change !== "none";
  const withNotice = (action: Action): Action =>
    overridden && (action.kind === "update" || action.kind === "restore")
      ? {
          ...action,
          reason: `${action.reason}; the calendar change (${change}) overridden: the booking changed too`,
          notice: quoting(
            "calbridge: your change to this event was undone: the booking was changed at the same time, and the booking's version wins (sync.conflict: booking_wins).",
            quote(action.body, false),
          ),
        }
      : action;
  // Push the booking's state to the calendar.
  const pushBooking = (): Action => {
    if (!target) {
      return remove(link.therapistId, link.eventId, "therapist not mapped any more");
    }
    if (target !== link.therapistId) {
      if (wish === null) {
        return remove(link.therapistId, link.eventId, "reassigned and cancelled");
      }
      return {
        kind: "move",
        appointmentId: id,
        from: { therapistId: link.therapistId, eventId: link.eventId },
        to: { therapistId: target, eventId: input.eventId },
        body: bodyOf(wish),
        reason: `reassigned from ${link.therapistId} to ${target}`,
      };
    }
    if (wish === null) {
      return remove(link.therapistId, link.eventId, appt.status === "cancelled" ? "cancelled" : "no event wanted");
    }
    const wanted = printOf(wish);
    if (event === undefined) {
      // A new status is written: the event may be one calbridge deleted ambiguously, read by the write's 412 (no etag:
      // no 412, and the write could go over a move not polled yet: unchanged).
      if (wanted === link.fingerprint && (sameStatus(link, appt) || !link.etag)) return none("unchanged");
      return {
        kind: "update",
        appointmentId: id,
        therapistId: link.therapistId,
        eventId: link.eventId,
        body: bodyOf(wish),
        ifMatch: link.etag,
        reason: "booking changed",
      };
    }
    const current = live(event);
    if (!current) {
      return {
        kind: "restore",
        appointmentId: id,
        therapistId: link.therapistId,
        eventId: link.eventId,
        body: bodyOf(wish),
        reason: "event missing from the calendar",
      };
    }
    const marked = carriesMarks(current, id); // stripped marks are put back (carriesMarks), even on an adopted event
    if (marked && current.etag && current.etag === link.etag && wanted === link.fingerprint) return none("unchanged");
    if (marked && fingerprint(current, owned) === wanted) {
      return wanted === link.fingerprint && current.etag === link.etag
        ? none("unchanged")
        : {
            kind: "adopt",
            appointmentId: id,
            therapistId: link.therapistId,
            event: current,
            reason: "calendar already matches",
          };
    }
    return {
      kind: "update",
      appointmentId: id,
      therapistId: link.therapistId,
      eventId: link.eventId,
      body: bodyOf(wish),
      ifMatch: current.etag ?? undefined,
      reason: fromBooking ? "booking changed" : marked ? "event edited in the calendar; restored" : "marks put back",
      ...editNotice(marked, fromBooking, current, owned, link, bodyOf(wish), same),
    };
  };
  return withNotice(pushBooking());
}
