// Owns telling what changed on each side since the link was written: the booking's times, status and therapist, and
// how the therapist changed the event (deleted, moved, resized, made all-day or repeating); and whether an appointment
// has begun.
import { bookingInstant } from "../booking/instant.ts";
import type { Appointment } from "../booking/schemas.ts";
import { instantOf } from "../calendar/fingerprint.ts";
import { markedTimes } from "../calendar/times-mark.ts";
import type { CalEvent, Link, Snapshot } from "./types.ts";

/**
 * Whether the booking side changed since the link was written, in anything that the calendar shows. Given the live
 * event, also when it shows calbridge's own write of other times that the link never recorded (lastSynced): the
 * booking moved since the link's state, even if it is back there now (moved there and back while calbridge was down).
 * The event is then brought to the booking as the booking's update, never written over as the therapist's edit with a
 * note, and a move of the therapist's since that write meets the booking's as a conflict.
 */
export function bookingChanged(link: Link, appt: Appointment | Snapshot, event?: CalEvent | null): boolean {
  const before = link.booking;
  const wrote = event?.status === "cancelled" ? {} : lastSynced(link, event);
  return (
    instant(before.start_time) !== instant(appt.start_time) ||
    instant(before.end_time) !== instant(appt.end_time) ||
    (before.status ?? "confirmed") !== (appt.status ?? "confirmed") ||
    before.therapist_id !== appt.therapist_id ||
    (wrote.start !== undefined && (wrote.start !== link.eventStart || wrote.end !== link.eventEnd))
  );
}

/** Whether the booking's status is the one the link last applied (no status shown reads as confirmed). */
export function sameStatus(link: Link, appt: Appointment | Snapshot): boolean {
  return (link.booking.status ?? "confirmed") === (appt.status ?? "confirmed");
}

function instant(iso: string | undefined | null): number | undefined {
  if (!iso) return undefined;
  const ms = bookingInstant(iso);
  return Number.isNaN(ms) ? undefined : ms;
}

/** How the therapist changed the event since calbridge last wrote or accepted it. */
export type CalendarChange = "none" | "deleted" | "moved" | "resized" | "all_day" | "repeating";

/**
 * The times calbridge last put the event at, which a therapist's move is told from: the link's, unless the event
 * carries a times mark the link never recorded (times-mark.ts). That is a write of calbridge's whose record was lost
 * (the process died, or the link's store write failed, once Google had it; an answer lost on the way): its times are
 * calbridge's, not the therapist's move, whatever the link says. A person's move in Google's UI keeps the mark and
 * changes the times; a write that failed changed nothing; an event without a mark (an earlier build's) has the link's.
 * So does a mark stamped before a link that records none recorded its event (`recordedAt`, kept by saves that record
 * none: a re-point, a refusal's note; `syncedAt` otherwise): that link was written after the mark's write, by a
 * build without marks (an HA replica of an earlier version leading between two terms of this one, a rollback), whose
 * patch left the mark in place. Its times are no lost write: taken as one, a therapist's move back to them was
 * overwritten with the booking's time, nothing sent, and one elsewhere undone with a note (booking_wins).
 */
export function lastSynced(link: Link, event: CalEvent | null | undefined): { start?: number; end?: number } {
  const own = markedTimes(event);
  const recorded = link.recordedAt ?? link.syncedAt;
  const recordedSince = link.timesMark === undefined && own?.at !== undefined && own.at < recorded;
  if (own && own.mark !== link.timesMark && !recordedSince) return own;
  return { start: link.eventStart, end: link.eventEnd };
}

export function calendarChange(link: Link, event: CalEvent | null | undefined): CalendarChange {
  // null: the calendar did not find the id (404), which is not a deletion (see DecideInput.event).
  if (event === undefined || event === null || !link.present) return "none";
  if (event.status === "cancelled") return "deleted";
  // A series made of the event: a booking is one appointment, so the event goes back to being a single one.
  if (event.recurrence?.length) return "repeating";
  if (event.start?.date || event.end?.date) return "all_day";
  const start = instantOf(event.start);
  const end = instantOf(event.end);
  const was = lastSynced(link, event);
  if (start === was.start && end === was.end) return "none";
  if (start === undefined || end === undefined || was.start === undefined || was.end === undefined) return "resized";
  return end - start === was.end - was.start ? "moved" : "resized";
}

/**
 * Whether both sides now show the same times after both moved: a move the booking service took whose link was not saved
 * yet (a stop, a crash or a failed Google write after its answer). Converged, so no conflict and nothing to write back.
 */
export function showsBooking(event: CalEvent | null | undefined, appt: Appointment | Snapshot): boolean {
  // Google keeps whole seconds (see instantOf).
  const sec = (iso: string | undefined | null) => Math.floor(bookingInstant(iso) / 1000) * 1000;
  return instantOf(event?.start) === sec(appt.start_time) && instantOf(event?.end) === sec(appt.end_time);
}

/**
 * The calendar change decide acts on. None when both sides moved to the same times (a move the booking took, its link
 * not yet saved: converged). None too when the event was last synced for an appointment that was not confirmed (a kept
 * "Cancelled" marker the therapist cleared away) and the booking is confirmed again: that deletion was no change to the
 * restored appointment, and written back it cancelled it again (customer told, maybe refunded).
 */
export function effectiveChange(
  link: Link,
  event: CalEvent | null | undefined,
  appt: Appointment | Snapshot,
  fromBooking: boolean,
): CalendarChange {
  const seen = calendarChange(link, event);
  if (seen === "none") return seen;
  const restored = (link.booking.status ?? "confirmed") !== "confirmed" && (appt.status ?? "confirmed") === "confirmed";
  if (restored) return "none";
  return fromBooking && (seen === "moved" || seen === "resized") && showsBooking(event, appt) ? "none" : seen;
}

/**
 * Whether the appointment has begun (its start is not in the future). A deleted event of such an appointment is never
 * a cancellation: cancelling a session that has begun or is over would e-mail the customer about it and may refund
 * them (the refund "follows the business's policy"); therapists delete past events to tidy their calendar.
 */
export function begun(appt: Appointment | Snapshot, now: number): boolean {
  const start = bookingInstant(appt.start_time);
  return !Number.isNaN(start) && start <= now;
}

/**
 * The note's words when an event moved to another calendar is brought back at the booking's time although its own
 * time was changed too (one save in Google's editor): the new time is not sent with a move, and dropping it unsaid
 * left the therapist believing the appointment rescheduled. Empty when the times were not changed.
 */
export function timeNotSent(link: Link, event: CalEvent): string {
  if (link.eventStart === undefined || link.eventEnd === undefined) return ""; // not known: not said
  const change = calendarChange(link.present ? link : { ...link, present: true }, event);
  return change === "moved" || change === "resized"
    ? " The new time saved with the move was not sent: move the event here to reschedule."
    : "";
}

/** Why a deleted event is put back when cancelling from the calendar is off (decide.ts, writeback.ts). */
export const CANCEL_OFF = "event deleted in the calendar, and cancelling from the calendar is turned off";

/** Why a deletion of a begun appointment's event is put back (decide.ts, and writeback.ts at the moment of sending). */
/** Said also for a "Change calendar" to a colleague, which looks like a deletion here (the move is found later). */
export const BEGUN_REASON =
  "the appointment has begun, so taking its event out of this calendar (deleting it, or moving it to another calendar) changes nothing in the booking (a cancellation would tell the customer and may refund them); cancel it, mark it a no-show or reassign it in the booking service";
