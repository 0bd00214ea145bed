// Owns since when calbridge has watched each mapped therapist's calendar. A therapist taken out of the mapping is not
// watched: calbridge leaves their calendar alone, and what they change there meanwhile (delete calbridge's events,
// move them) is not theirs to push to the booking service. Mapped again, by a reload or across a restart, their links
// still hold the state calbridge last saw, so those changes would look new and be written back: a cancellation, with
// the customer e-mailed, for an event cleaned away while calbridge was not looking. The ledger (kept in the store, so a
// restart and the other replica know it) gives each mapped therapist the time its current watch began; a change older
// than that is put back as the booking has it, never written back (decide.ts). It also keeps, for a while, when the
// watch of a therapist taken out of the mapping ended: a change they made before that (a deletion still waiting out its
// grace period when the reload took them out) was theirs. Mapped again within that grace period, it goes on its way;
// later, it is put back saying it was not sent because their calendar was not mapped then, not that it was made so.
import type { Clock } from "../clock.ts";
import type { TherapistConfig, WritebackConfig } from "../config/schema.ts";
import type { Store, Table } from "../store/store.ts";
import type { CalendarChange } from "./changes.ts";
import { calendarKey } from "./placement.ts";
import type { CalEvent, Link } from "./types.ts";

interface Watch {
  /** The calendar watched (calendarKey). */
  calendar: string;
  /** Epoch ms the watch began; 0 for therapists already mapped when the ledger was first kept. */
  since: number;
  /** The watch of this calendar before this one, when it ended (the therapist taken out of the mapping) and this followed. */
  earlier?: Ended;
  /** Epoch ms the watch ended: the therapist was taken out of the mapping (kept ENDED_KEEP_MS). Not watched. */
  until?: number;
}

/** A watch that ended: from when until when calbridge watched the calendar. */
interface Ended {
  since: number;
  until: number;
}

/** Since when the therapist's calendar has been watched, and the watch of it before this one (if known). */
export interface WatchSpan {
  since: number;
  earlier?: Ended | undefined;
}

/** How long the end of a removed therapist's watch is kept. */
const ENDED_KEEP_MS = 30 * 86_400_000;

const KEY = "watched_calendars";

/** Every therapist's calendar (calendarKey) the leading daemon last settled as watched: the mapping it syncs. */
export async function watchedCalendars(store: Store): Promise<Map<string, string>> {
  const all = (await store.table<Record<string, Watch>>("meta").get(KEY)) ?? {};
  return new Map(
    Object.entries(all)
      .filter(([, w]) => w.until === undefined)
      .map(([id, w]) => [id, w.calendar]),
  );
}

export class WatchedCalendars {
  readonly #table: Table<Record<string, Watch>>;
  readonly #clock: Clock;
  #since = new Map<string, WatchSpan>();

  constructor(store: Store, clock: Clock) {
    this.#table = store.table<Record<string, Watch>>("meta");
    this.#clock = clock;
  }

  /** Since when the therapist's calendar has been watched (epoch ms); 0 when since before the ledger, or unknown. */
  since(therapistId: string): number {
    return this.#since.get(therapistId)?.since ?? 0;
  }

  /** The therapist's watch now, and when an earlier watch of the same calendar ended (see WatchSpan). */
  span(therapistId: string): WatchSpan {
    return this.#since.get(therapistId) ?? { since: 0 };
  }

  /**
   * Takes up the mapping: a therapist mapped now and not (or to another calendar) when the ledger was last settled
   * begins a watch now; the watch of one no longer mapped ends (kept ENDED_KEEP_MS with its end: mapped again, that is
   * their new watch's `earlier`), so mapping them again begins a new watch. The first time (no ledger yet: a new
   * install, or the first start of a build that keeps it) every mapped therapist counts as watched all along. Answers
   * the therapists whose watch begins now: their calendar is to be read in full again (a sync token kept from an
   * earlier watch would report what changed meanwhile as new). `beforeWrite` is given them
   * before the ledger is written (their tokens are removed there): should it fail, the ledger still holds the earlier
   * watches, and the next settle finds the same therapists again. Only the leader settles: the ledger is the mapping
   * the leading daemon syncs (`calbridge purge` reads it), not whatever a standby started with.
   */
  async settle(
    therapists: readonly TherapistConfig[],
    beforeWrite?: (begun: string[]) => Promise<void>,
  ): Promise<string[]> {
    const stored = await this.#table.get(KEY);
    const now = this.#clock.now();
    const next: Record<string, Watch> = {};
    const begun: string[] = [];
    for (const t of therapists) {
      const calendar = calendarKey(t);
      const before = stored?.[t.therapist_id];
      if (before && before.calendar === calendar && before.until === undefined) {
        next[t.therapist_id] = before;
        continue;
      }
      // The same calendar watched until the therapist was taken out of the mapping: what was made before is theirs.
      const earlier =
        before?.calendar === calendar && before.until ? { since: before.since, until: before.until } : undefined;
      next[t.therapist_id] = { calendar, since: stored === undefined ? 0 : now, ...(earlier ? { earlier } : {}) };
      if (stored !== undefined) begun.push(t.therapist_id);
    }
    for (const [id, w] of Object.entries(stored ?? {})) {
      const until = w.until ?? now;
      if (!next[id] && now - until < ENDED_KEEP_MS) next[id] = { calendar: w.calendar, since: w.since, until };
    }
    if (begun.length > 0) await beforeWrite?.(begun);
    if (stored === undefined || !sameWatches(stored, next)) await this.#table.set(KEY, next);
    const watching = Object.entries(next).filter(([, w]) => w.until === undefined);
    this.#since = new Map(watching.map(([id, w]) => [id, { since: w.since, earlier: w.earlier }]));
    return begun;
  }
}

function sameWatches(a: Record<string, Watch>, b: Record<string, Watch>): boolean {
  const keys = Object.keys(a);
  if (keys.length !== Object.keys(b).length) return false;
  return keys.every(
    (k) =>
      b[k]?.calendar === a[k]?.calendar &&
      b[k]?.since === a[k]?.since &&
      b[k]?.earlier?.since === a[k]?.earlier?.since &&
      b[k]?.earlier?.until === a[k]?.earlier?.until &&
      b[k]?.until === a[k]?.until,
  );
}

const UNWATCHED = "it was made while calbridge was not syncing this calendar, so it was not sent to the booking";
const UNMAPPED =
  "it was still waiting to be sent when an administrator took your calendar out of the calbridge mapping, so it was never sent to the booking service, which still has the appointment as shown";

/**
 * Why a change to a linked event is put back, not written back, having been made before calbridge's current watch of
 * its calendar began (the link is older than the watch, and the event was not updated since); undefined when it is
 * decided as usual. A change that cannot be dated (a deleted event reported with its id alone, see reader.ts) is taken
 * for an old one: an event put back is deleted again with one click; a cancellation e-mailed to a customer is not
 * undone. One made during the earlier watch of the calendar (before a reload took the therapist out) was theirs while
 * calbridge watched it, waiting out its grace period when they were taken out of the mapping: mapped again before that
 * period (counted from the change) ran out, it goes on its way (its wait resumes, the write-back guard counts it);
 * later (or held by the write-back guard then), the note says it was not sent because their calendar was taken out of
 * the mapping, not that it was made while calbridge did not watch.
 */
export function unwatchedChange(
  link: Link,
  event: CalEvent | null | undefined,
  watch: WatchSpan | undefined,
  change: CalendarChange,
  wb: WritebackConfig,
): string | undefined {
  const since = watch?.since ?? 0;
  if (since <= 0 || link.syncedAt >= since) return undefined;
  const updated = event?.updated ? Date.parse(event.updated) : Number.NaN;
  if (updated >= since) return undefined;
  const earlier = watch?.earlier;
  if (!earlier || !(updated >= earlier.since && updated <= earlier.until)) return UNWATCHED;
  const graceMs = (change === "deleted" ? wb.cancel_grace_seconds : wb.reschedule_grace_seconds) * 1000;
  return updated + graceMs > since ? undefined : UNMAPPED;
}
