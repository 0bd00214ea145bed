// Owns how long the calendar poller holds a calendar's sync token for a change whose appointment cannot be told (its
// event-index entry cannot be read: unreadable-links.ts changedAppointment). Held, the change is read again each poll,
// so a restored or removed record, or a sync of its link that rewrites the entry, still tells it. But nothing may ever
// rewrite it (the entry of an event calbridge deleted for a cancelled appointment: the link is final, the
// reconciliation has nothing to save), and a token held for ever made every poll re-read every change since, with a
// warn each poll (review25). So a change is held for at most HELD_POLLS polls, then given up to the reconciliation
// (which lists the booking side and compares links) and the token advanced, said once at warn.
import type { Logger } from "../log.ts";
import type { StoreRecordUnreadableError } from "../store/store.ts";
import type { CalEvent } from "./types.ts";

/**
 * Polls a change whose appointment cannot be told holds its calendar's sync token (each reads it again). A few: room
 * for a sync under way (an engine retry) or an operator to rewrite or restore the record; bounded, as nothing may.
 */
export const HELD_POLLS = 3;

/** A change whose appointment cannot be told, and the error reading its event-index entry. */
export type Untold = { event: CalEvent; error: StoreRecordUnreadableError };

/**
 * Per calendar (therapist id), in memory: how many polls each untold change (event id and its `updated`: a later
 * change of the same event is held anew) has held the token. Lost at a restart, which holds such a change again for
 * up to HELD_POLLS polls (and warns again) before giving it up: bounded per process, and the store is not written.
 */
export class UntoldHolds {
  readonly #held = new Map<string, Map<string, number>>();

  /**
   * Counts this poll against each untold change of the calendar and logs it at warn: held, or (once) given up.
   * Whether the calendar's sync token may be advanced: none untold, or each held its HELD_POLLS polls (given up).
   */
  done(therapistId: string, untold: Untold[], log: Logger): boolean {
    const before = this.#held.get(therapistId);
    const now = new Map<string, number>(); // changes no longer untold (the record told them) are forgotten
    let advance = true;
    for (const { event, error } of untold) {
      const key = `${event.id}@${event.updated ?? ""}`;
      const polls = (before?.get(key) ?? 0) + 1;
      now.set(key, polls);
      const fields = { table: error.table, key: error.key, event_id: event.id };
      if (polls <= HELD_POLLS) {
        advance = false;
        log.warn(
          { ...fields, held_polls: polls },
          `${error.message}; this calendar change: its appointment cannot be told: the calendar's sync token is not ` +
            `advanced past it, so it is read again at the next poll (held ${polls} of ${HELD_POLLS} polls) unless the ` +
            "record is restored, removed or rewritten by a sync of its link",
        );
      } else if (polls === HELD_POLLS + 1) {
        log.warn(
          fields,
          `${error.message}; this calendar change: its appointment could not be told in ${HELD_POLLS} polls: it is ` +
            "given up to the reconciliation (which compares the booking service with the links) and the calendar's " +
            "sync token advanced past it, and it is not read again: restore the record from a backup or remove it",
        );
      }
    }
    if (now.size > 0) this.#held.set(therapistId, now);
    else this.#held.delete(therapistId);
    return advance;
  }
}
