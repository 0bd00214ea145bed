// Owns the record of an appointment's old event that calbridge could not remove from the previous therapist's calendar
// when the booking service reassigned the appointment (apply.ts, "move"): which calendar, and the etag calbridge wrote
// it with. Until it is removed (the reconciliation removes such copies), that event stands under the appointment's id
// in a mapped colleague's calendar, which is where a "deletion" is looked for as a move (reassign.ts, findElsewhere):
// a real deletion in the new therapist's calendar was taken for a move back, and the appointment reassigned to the
// old therapist instead of cancelled. Unchanged since calbridge wrote it (same etag), it is that leftover, never the
// moved event: a move changes the event (its etag), and Google refuses a move into a calendar that holds the id
// (the emulator answers 409 duplicate).
import type { Clock } from "../clock.ts";
import type { Store, Table } from "../store/store.ts";
import type { CalEvent } from "./types.ts";

export interface Leftover {
  therapistId: string;
  eventId: string;
  /** The etag of calbridge's last write of it (the link's before the reassignment). */
  etag: string;
  at: number;
}

/** Kept well past the reconciliation that removes the copy (every 15 minutes by default), through an outage. */
const KEEP_MS = 7 * 86_400_000;
const keyOf = (appointmentId: string) => `leftover:${appointmentId}`;

export class Leftovers {
  readonly #table: Table<Leftover>;
  readonly #clock: Clock;

  constructor(store: Store, clock: Clock) {
    this.#table = store.table<Leftover>("meta");
    this.#clock = clock;
  }

  note(appointmentId: string, left: Omit<Leftover, "at">): Promise<void> {
    return this.#table.set(keyOf(appointmentId), { ...left, at: this.#clock.now() }, KEEP_MS);
  }

  get(appointmentId: string): Promise<Leftover | undefined> {
    return this.#table.get(keyOf(appointmentId));
  }

  async forget(appointmentId: string): Promise<void> {
    await this.#table.delete(keyOf(appointmentId));
  }

  /** Whether `event`, found in `therapistId`'s calendar, is the appointment's leftover, unchanged since written. */
  async isLeftover(appointmentId: string, therapistId: string, event: CalEvent): Promise<boolean> {
    const left = await this.get(appointmentId);
    return !!left && left.therapistId === therapistId && left.eventId === event.id && event.etag === left.etag;
  }
}
