// Owns how an appointment's history reads to a person: one sentence per entry (who caused it, what calbridge did,
// the answer), and the timeline `calbridge history` prints. The admin page uses the same sentences.
import type { HistoryEntry } from "../sync/history-entry.ts";
import type { StoredHistory } from "../sync/history-log.ts";

const ORIGIN: Record<HistoryEntry["origin"], string> = {
  booking: "booking webhook",
  reconcile: "reconciliation",
  calendar: "therapist's calendar",
  admin: "administrator",
};

/** Triggers that say no more than their origin does. */
const PLAIN = new Set(["reconcile", "calendar change"]);

/** Who caused the entry: the side, and the trigger when it adds something ("booking webhook (appointment.created)"). */
export function causeOf(e: HistoryEntry): string {
  return PLAIN.has(e.trigger) ? ORIGIN[e.origin] : `${ORIGIN[e.origin]} (${e.trigger})`;
}

/** "2025-06-04 10:00:00Z" */
export function timeOf(iso: string | undefined): string {
  return iso ? iso.replace("T", " ").replace(/\.\d+Z$/, "Z") : "?";
}

function span(e: HistoryEntry): string {
  if (!e.start) return "";
  if (!e.end) return `, ${timeOf(e.start)}`;
  const sameDay = e.start.slice(0, 10) === e.end.slice(0, 10);
  return `, ${timeOf(e.start)} to ${sameDay ? timeOf(e.end).slice(11) : timeOf(e.end)}`;
}

const cal = (therapistId: string | undefined) => `${therapistId ?? "?"}'s calendar`;

/** Where a deleted event may have been moved: another mapped therapist's calendar, or one of its own account's. */
const elsewhere = (e: HistoryEntry) =>
  e.toTherapistId !== undefined && e.toTherapistId === e.therapistId
    ? `another calendar of ${e.therapistId ?? "?"}'s account`
    : cal(e.toTherapistId);

function answer(e: HistoryEntry): string {
  const status = e.httpStatus ? ` ${e.httpStatus}` : "";
  return e.code ? `${e.side ?? "?"}${status} ${e.code}` : "";
}

function writeback(e: HistoryEntry): string {
  const what =
    e.writeback === "cancel"
      ? "cancellation"
      : e.writeback === "reassign"
        ? `reassignment to ${e.toTherapistId ?? "?"}`
        : `reschedule to ${timeOf(e.start)}`;
  switch (e.result) {
    case "ok":
      return e.writeback === "cancel"
        ? "appointment cancelled in the booking service"
        : e.writeback === "reassign"
          ? `appointment reassigned to ${e.toTherapistId ?? "?"} in the booking service`
          : `appointment rescheduled in the booking service to ${timeOf(e.start)}`;
    case "already":
      // Not taken, but what the therapist asked for is done: someone else cancelled or moved the appointment first.
      return e.writeback === "cancel"
        ? `${what} not taken (${answer(e)}): the appointment was already cancelled in the booking service; the event stays deleted`
        : `${what} not taken (${answer(e)}): the booking already has that time; the event stays`;
    case "refused":
      return `${what} refused by the booking service (${answer(e)}); ${putBack(e)}`;
    case "failed":
      return `${what} could not be sent (${answer(e)}); ${putBack(e)}`;
    case "gone":
      return "the appointment no longer exists in the booking service; its event is removed";
    case "disabled":
      // A deletion not sent (cancelling off, the appointment begun), or a move to a colleague with reassigning off.
      return e.writeback === "cancel"
        ? "the cancellation is not sent; the event is put back"
        : `event moved to ${cal(e.toTherapistId)}, but reassigning from the calendar is off; the event is put back`;
    case "moved_back":
      return `the event was not deleted but moved to another calendar of ${e.therapistId ?? "?"}'s account (${e.calendarId ?? "?"}): the cancellation is not sent; the event is moved back, with a note`;
    case "rewritten":
      return `the event was not deleted but moved to another calendar of ${e.therapistId ?? "?"}'s account (${e.calendarId ?? "?"}), and could not be moved back (${answer(e)}): the cancellation is not sent; the event is written again as booked, with a note`;
    default:
      return `${what} not sent (${e.result ?? "?"})`;
  }
}

/**
 * After a write-back not taken: the booking read again is shown; cancelled meanwhile, as `sync.cancelled_events` shows
 * a cancelled appointment (removed, or kept marked "Cancelled"), which the entry does not record.
 */
const putBack = (e: HistoryEntry) =>
  e.status === "cancelled"
    ? "the appointment is cancelled in the booking service now; the event shows that"
    : "the event is put back as booked";

/** What calbridge did, and the answer. */
export function whatOf(e: HistoryEntry): string {
  // Which write-back a deletion becomes is known only when it is sent: a cancellation, or (the event turned up in
  // another calendar) a reassignment or a move back. Told as "the cancellation", a move read as one in a dispute.
  const deletion = "the deletion's write-back (a cancellation, unless the event turns up in another calendar)";
  switch (e.kind) {
    case "event_created":
      return `event created in ${cal(e.therapistId)}${span(e)}`;
    case "event_updated":
      return `event updated in ${cal(e.therapistId)}${span(e)}`;
    case "event_restored":
      return `event put back in ${cal(e.therapistId)} as booked${span(e)}`;
    case "event_deleted":
      return e.result === "not_mapped"
        ? `event left in ${cal(e.therapistId)} (no longer mapped)`
        : `event deleted from ${cal(e.therapistId)}${e.result === "already_gone" ? " (Google: it was already gone)" : ""}`;
    case "event_moved":
      return `event moved from ${cal(e.therapistId)} to ${cal(e.toTherapistId)}${span(e)}`;
    case "event_relocated":
      return `event moved to the calendar now mapped for ${e.therapistId ?? "?"}`;
    case "event_adopted":
      return `event found in ${cal(e.therapistId)} and taken over`;
    case "booking_changed":
      return `booking is ${e.status ?? "?"} now; nothing to change in the calendar`;
    case "writeback":
      return writeback(e);
    case "writeback_waiting":
      return e.writeback === "cancel"
        ? `${deletion} waits out a ${e.waitSeconds ?? "?"} s grace period before it is sent`
        : `the reschedule to ${timeOf(e.start)} waits out a ${e.waitSeconds ?? "?"} s grace period before it is sent`;
    case "writeback_held":
      return `${e.writeback === "cancel" ? deletion : `the reschedule to ${timeOf(e.start)}`} is held by the write-back guard for an administrator to decide`;
    case "sync_failed":
      return e.code === "other_calendar_unavailable"
        ? `the cancellation is not sent: the event may have been moved to ${elsewhere(e)}, which cannot be looked at now (${answer(e)}); it waits for that calendar`
        : `sync failed (${answer(e)}); retrying`;
    case "dead_letter":
      return e.code === "other_calendar_unavailable"
        ? `gave up waiting for ${elsewhere(e)}, where the event may have been moved (${answer(e)}): dead letter; the cancellation was not sent`
        : `gave up after ${e.attempts ?? "?"} attempts (${answer(e)}): dead letter`;
  }
}

/** The entry's sentence with the decision's reason and repeats. */
export function sentenceOf(e: HistoryEntry): string {
  const reason = e.reason ? ` (${e.reason})` : "";
  const repeats = e.repeats ? `, ${e.repeats} times, the last at ${timeOf(e.lastAt)}` : "";
  return `${whatOf(e)}${reason}${repeats}`;
}

/** The timeline `calbridge history` prints, oldest first. */
export function formatHistory(appointmentId: string, h: StoredHistory, retentionDays: number): string {
  const n = h.entries.length;
  const lines = [
    `History of appointment ${appointmentId}: ${n} ${n === 1 ? "entry" : "entries"}, oldest first (times UTC; kept ${retentionDays} days)`,
  ];
  if (h.dropped) lines.push(`(${h.dropped} earlier entries were dropped: history.max_entries)`);
  const causes = h.entries.map(causeOf);
  const width = Math.max(...causes.map((c) => c.length));
  for (const [i, e] of h.entries.entries()) {
    lines.push(`${timeOf(e.at)}  ${causes[i]!.padEnd(width)}  ${sentenceOf(e)}`);
  }
  return lines.join("\n");
}
