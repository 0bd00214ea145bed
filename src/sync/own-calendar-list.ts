// Owns the short-lived memory of each therapist's owned-calendar list (calendarList.list, minAccessRole=owner) that the
// moved-out look-up reads before a deletion is written back (moved-out.ts): a burst of deletions reads it once, not
// once per deletion. Whether a remembered list may answer "not moved" is the look-up's call (see there): this only
// says when the list it hands out was read.
import type { Clock } from "../clock.ts";
import type { AccountCalendar, CalendarPort } from "./types.ts";

/** How long a therapist's owned-calendar list is used again after it was read. */
export const OWN_LIST_TTL_MS = 60_000;

/** A list of the calendars the account owns, and when (our clock) the request for it was sent. */
export interface OwnList {
  calendars: AccountCalendar[];
  readAt: number;
  /** Read now for this call (not remembered from an earlier one). */
  fresh: boolean;
}

interface Entry extends Omit<OwnList, "fresh"> {
  /** The calendar (gateway) and the credentials it was read with: another one, or new credentials, read it again. */
  port: CalendarPort;
  credentials: number | undefined;
}

export class OwnCalendarLists {
  readonly #clock: Clock;
  readonly #entries = new Map<string, Entry>();
  /** Reads under way: look-ups running side by side (a burst of write-backs) wait for the same one. */
  readonly #reading = new Map<string, Omit<Entry, "calendars"> & { list: Promise<AccountCalendar[]> }>();

  constructor(clock: Clock) {
    this.#clock = clock;
  }

  /**
   * The therapist's owned calendars: remembered when read (or being read) with the same calendar and credentials less
   * than OWN_LIST_TTL_MS ago, unless `fresh`; otherwise read now through `port` and remembered. A failed read forgets.
   */
  async get(therapistId: string, port: CalendarPort, fresh = false): Promise<OwnList> {
    const now = this.#clock.now();
    const usable = (e: Omit<Entry, "calendars"> | undefined) =>
      !fresh &&
      e !== undefined &&
      e.port === port &&
      e.credentials === port.credentialsVersion &&
      now - e.readAt < OWN_LIST_TTL_MS &&
      e.readAt <= now;
    const had = this.#entries.get(therapistId);
    if (had && usable(had)) return { calendars: had.calendars, readAt: had.readAt, fresh: false };
    const under = this.#reading.get(therapistId);
    if (under && usable(under)) return { calendars: await under.list, readAt: under.readAt, fresh: false };
    const credentials = port.credentialsVersion;
    const list = port.calendarList("owner");
    const reading = { list, readAt: now, port, credentials };
    this.#reading.set(therapistId, reading);
    try {
      const calendars = await list;
      // A read begun earlier that ended later does not replace a newer one.
      const newest = this.#entries.get(therapistId);
      if (!newest || newest.readAt <= now)
        this.#entries.set(therapistId, { calendars, readAt: now, port, credentials });
      return { calendars, readAt: now, fresh: true };
    } catch (err) {
      this.#entries.delete(therapistId);
      throw err;
    } finally {
      if (this.#reading.get(therapistId) === reading) this.#reading.delete(therapistId);
    }
  }

  /** Forgets every list: a reload may have retired the gateways they were read through (the next look-ups read). */
  clear(): void {
    this.#entries.clear();
    this.#reading.clear();
  }

  /** Therapists whose list is kept (tests). */
  get size(): number {
    return this.#entries.size;
  }

  /** Forgets a therapist's list (the next look-up reads it). */
  forget(therapistId: string): void {
    this.#entries.delete(therapistId);
    this.#reading.delete(therapistId);
  }
}
