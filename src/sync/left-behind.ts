// Owns the record of calbridge events left in a calendar a therapist's mapping no longer names because that calendar
// could not be reached when they were to move (no access any more): how many, why, since when; shown by doctor and
// /status until `calbridge purge` removes them or the therapist is pointed back at that calendar.
import type { Clock } from "../clock.ts";
import type { Store, Table } from "../store/store.ts";
import { KeyedSerial } from "./keyed.ts";

export interface LeftBehind {
  therapistId: string;
  /** The old calendar, as the links named it. */
  calendarId: string;
  /** Events that stayed there (each one was written again in the therapist's current calendar). */
  events: number;
  /** Why the old calendar could not be used (Google's answer). */
  reason: string;
  since: number;
  lastAt: number;
}

const keyOf = (therapistId: string, calendarId: string) => `${therapistId} ${calendarId}`;

export class LeftBehindEvents {
  readonly #table: Table<LeftBehind>;
  readonly #clock: Clock;
  /** Counting is read-modify-write: one update per key at a time in this process. */
  readonly #serial = new KeyedSerial();

  constructor(store: Store, clock: Clock) {
    this.#table = store.table<LeftBehind>("leftbehind");
    this.#clock = clock;
  }

  /** One more event stayed in `calendarId`. */
  add(therapistId: string, calendarId: string, reason: string): Promise<void> {
    const key = keyOf(therapistId, calendarId);
    return this.#serial.run(key, async () => {
      const now = this.#clock.now();
      const had = await this.#table.get(key);
      await this.#table.set(key, {
        therapistId,
        calendarId,
        events: (had?.events ?? 0) + 1,
        reason,
        since: had?.since ?? now,
        lastAt: now,
      });
    });
  }

  /** The calendar was purged, or is the therapist's again: nothing to report about it any more. */
  async clear(therapistId: string, calendarId: string): Promise<void> {
    await this.#table.delete(keyOf(therapistId, calendarId));
  }

  async all(): Promise<LeftBehind[]> {
    const out: LeftBehind[] = [];
    for await (const [, entry] of this.#table.entries()) out.push(entry);
    return out.sort((a, b) => a.therapistId.localeCompare(b.therapistId) || a.since - b.since);
  }
}
