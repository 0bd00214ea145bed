// Owns when the reconciliation lists a calendar in full. Between full listings its calendar side is the calendar's
// incremental sync (the poller, on push and on its timer, hands every change since the sync token to the engine), so a
// run lists no calendar at all; the full listing, at the first run after a start and then every
// sync.calendar_full_listing_hours (give or take a quarter, so calendars spread over the day), catches what the
// incremental sync cannot: events left over after the window moved on (strays), links that no longer match the
// calendar (a store restored from a backup, a reconnect with another Google account), and anything a bug let slip.
//
// Google's quota guide asks for exactly this spread: "If your client needs to sync daily, have the client determine a
// random time" (developers.google.com/calendar/api/guides/quota, "Randomize traffic patterns").
import type { Clock } from "../clock.ts";

export interface FullListingsOptions {
  /** Time between two full listings of one calendar (0: every run). */
  everyMs: number;
  clock: Clock;
  random?: () => number;
  /** Whether the calendar's changes reach the engine by its incremental sync now (the poller has a token for it). */
  covered(therapistId: string): boolean;
}

const JITTER = 0.25;

export class FullListings {
  readonly #o: FullListingsOptions;
  readonly #dueAt = new Map<string, number>();
  readonly #forgotAt = new Map<string, number>();

  constructor(options: FullListingsOptions) {
    this.#o = options;
  }

  /** Whether the next run lists this calendar in full. */
  due(therapistId: string): boolean {
    if (this.#o.everyMs <= 0 || !this.#o.covered(therapistId)) return true;
    const at = this.#dueAt.get(therapistId);
    return at === undefined || this.#o.clock.now() >= at;
  }

  /**
   * The calendar behind this therapist may hold other events than the links say (credentials for another Google
   * account, a sync token Google no longer accepts): the next run lists it in full.
   */
  forget(therapistId: string): void {
    this.#dueAt.delete(therapistId);
    this.#forgotAt.set(therapistId, this.#o.clock.now());
  }

  /** The therapist left the mapping (a reload): nothing of their calendar is kept. */
  release(therapistId: string): void {
    this.#dueAt.delete(therapistId);
    this.#forgotAt.delete(therapistId);
  }

  /** Calendars whose listing times are kept (tests). */
  get size(): number {
    return new Set([...this.#dueAt.keys(), ...this.#forgotAt.keys()]).size;
  }

  /**
   * The calendar was just listed in full (by a run that began at `startedAt`): the next time is a jittered interval
   * away, unless forget() came while that run was listing (what it listed may be the calendar the links knew).
   */
  listed(therapistId: string, startedAt = this.#o.clock.now()): void {
    if ((this.#forgotAt.get(therapistId) ?? Number.NEGATIVE_INFINITY) >= startedAt) return;
    const jitter = 1 - JITTER + 2 * JITTER * (this.#o.random ?? Math.random)();
    this.#dueAt.set(therapistId, this.#o.clock.now() + Math.round(this.#o.everyMs * jitter));
  }
}
