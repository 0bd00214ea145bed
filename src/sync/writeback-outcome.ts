// Owns what is told of a write-back carried out: the appointment's history, the engine's outcome (what `calbridge
// writeback held` reports), and the write-back guard (a write-back that sent nothing does not count). No imports: the
// sync records (types.ts) name it too.

/** What became of a write-back, for the appointment's history: what was sent, and the booking service's answer. */
export interface WritebackOutcome {
  kind: "reschedule" | "cancel" | "reassign";
  /**
   * ok: taken; already: not taken, but the booking already shows the change (cancelled by someone else meanwhile, at
   * that time already); refused or failed: the event is put back; gone: the appointment no longer exists; disabled: not sent;
   * moved_back / rewritten: a "deletion" that was a move to another calendar of the therapist's account, not sent: the
   * event was moved back, or (when that was refused) written again in the mapped calendar.
   */
  result: "ok" | "already" | "refused" | "failed" | "gone" | "disabled" | "moved_back" | "rewritten";
  /** The refusal or the last failure. */
  error?: unknown;
  /** The booking's status in the answer. */
  status?: string | undefined;
  /** A reassignment: the therapist whose calendar the event was moved to (where it stays only when `ok`). */
  therapistId?: string;
  /** moved_back / rewritten: the calendar of the therapist's account the event had been moved to. */
  calendarId?: string;
}
