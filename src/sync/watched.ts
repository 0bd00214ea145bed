// Owns since when calbridge has watched each mapped therapist's calendar. A therapist taken out of the mapping is not
// watched: calbridge leaves their calendar alone, and what they change there meanwhile (delete calbridge's events,
// move them) is not theirs to push to the booking service. Mapped again, by a reload or across a restart, their links
// still hold the state calbridge last saw, so those changes would look new and be written back: a cancellation, with
// the customer e-mailed, for an event cleaned away while calbridge was not looking. The ledger (kept in the store, so a
// restart and the other replica know it) gives each mapped therapist the time its current watch began; a change older
// than that is put back as the booking has it, never written back (decide.ts).
import type { Clock } from "../clock.ts";
import type { TherapistConfig } from "../config/schema.ts";
import type { Store, Table } from "../store/store.ts";
import { calendarKey, sameCalendarId } from "./placement.ts";
import type { CalEvent, Link } from "./types.ts";

interface Watch {
  /** The calendar watched (calendarKey). */
  calendar: string;
  /** Epoch ms the watch began; 0 for therapists already mapped when the ledger was first kept. */
  since: number;
}

const KEY = "watched_calendars";

/** Every therapist's calendar (calendarKey) the leading daemon last settled as watched: the mapping it syncs. */
export async function watchedCalendars(store: Store): Promise<Map<string, string>> {
  const all = (await store.table<Record<string, Watch>>("meta").get(KEY)) ?? {};
  return new Map(Object.entries(all).map(([id, w]) => [id, w.calendar]));
}

export class WatchedCalendars {
  readonly #table: Table<Record<string, Watch>>;
  readonly #clock: Clock;
  #since = new Map<string, number>();

  constructor(store: Store, clock: Clock) {
    this.#table = store.table<Record<string, Watch>>("meta");
    this.#clock = clock;
  }

  /** Since when the therapist's calendar has been watched (epoch ms); 0 when since before the ledger, or unknown. */
  since(therapistId: string): number {
    return this.#since.get(therapistId) ?? 0;
  }

  /**
   * Takes up the mapping: a therapist mapped now and not (or to another calendar) when the ledger was last settled
   * begins a watch now; one no longer mapped is forgotten, so mapping them again begins a new watch. The first time
   * (no ledger yet: a new install, or the first start of a build that keeps it) every mapped therapist counts as
   * watched all along. Answers the therapists whose watch begins now: their calendar is to be read in full again (a
   * sync token kept from an earlier watch would report what changed meanwhile as new). `beforeWrite` is given them
   * before the ledger is written (their tokens are removed there): should it fail, the ledger still holds the earlier
   * watches, and the next settle finds the same therapists again. Only the leader settles: the ledger is the mapping
   * the leading daemon syncs (`calbridge purge` reads it), not whatever a standby started with. A calendar written
   * another way is the same watch (the new spelling kept): an address in other letters, or one `sameAs` knows for the
   * calendar watched (`primary` and the account's own address, as Google told it).
   */
  async settle(
    therapists: readonly TherapistConfig[],
    beforeWrite?: (begun: string[]) => Promise<void>,
    sameAs?: (therapist: TherapistConfig, watched: string) => boolean,
  ): Promise<string[]> {
    const stored = await this.#table.get(KEY);
    const now = this.#clock.now();
    const next: Record<string, Watch> = {};
    const begun: string[] = [];
    for (const t of therapists) {
      const calendar = calendarKey(t);
      const before = stored?.[t.therapist_id];
      if (before && (sameCalendarId(before.calendar, calendar) || sameAs?.(t, before.calendar))) {
        next[t.therapist_id] = { calendar, since: before.since };
        continue;
      }
      next[t.therapist_id] = { calendar, since: stored === undefined ? 0 : now };
      if (stored !== undefined) begun.push(t.therapist_id);
    }
    if (begun.length > 0) await beforeWrite?.(begun);
    if (stored === undefined || !sameWatches(stored, next)) await this.#table.set(KEY, next);
    this.#since = new Map(Object.entries(next).map(([id, w]) => [id, w.since]));
    return begun;
  }
}

function sameWatches(a: Record<string, Watch>, b: Record<string, Watch>): boolean {
  const keys = Object.keys(a);
  if (keys.length !== Object.keys(b).length) return false;
  return keys.every((k) => b[k]?.calendar === a[k]?.calendar && b[k]?.since === a[k]?.since);
}

/**
 * Whether a change to a linked event was made before calbridge's current watch of its calendar began: the link is
 * older than the watch, and the event was not updated since. A change that cannot be dated (a deleted event reported
 * with its id alone, see reader.ts) is taken for an old one: an event put back is deleted again with one click; a
 * cancellation e-mailed to a customer is not undone.
 */
export function unwatchedChange(link: Link, event: CalEvent | null | undefined, watchedSince: number): boolean {
  if (watchedSince <= 0 || link.syncedAt >= watchedSince) return false;
  const updated = event?.updated ? Date.parse(event.updated) : Number.NaN;
  return !(updated >= watchedSince);
}
