// Owns the therapist-to-calendar mapping as the sync side sees it: which therapists are mapped, with which settings,
// and which calendar each one's events go to; a therapist without a usable calendar is mapped but unavailable.
import type { Config, TherapistConfig, WritebackConfig } from "../config/schema.ts";
import { writebackFor } from "../config/schema.ts";
import type { CalendarPort } from "./types.ts";

/** No calendar can be used for a mapped therapist now (credentials missing or broken at start). Not final. */
export class CalendarUnavailableError extends Error {
  readonly therapistId: string;
  constructor(therapistId: string, detail: string) {
    super(`calendar of therapist ${therapistId} is not available: ${detail}`);
    this.name = "CalendarUnavailableError";
    this.therapistId = therapistId;
  }
}

/**
 * An event gone from one therapist's calendar may have been moved ("Change calendar") to another mapped therapist's
 * calendar, or to another calendar of the therapist's own account, that cannot be looked at now (not connected yet,
 * credentials broken, a quota pause, no longer shared, the account's calendar list not read): until it can be, a
 * deletion cannot be told from that move, so the cancellation waits like any sync of an unavailable calendar and is
 * never sent on a guess. `therapistId` is the first of `unseen`; `from` itself among them stands for its account's
 * other calendars.
 */
export class OtherCalendarUnavailableError extends CalendarUnavailableError {
  /** The therapist whose calendar lost the event. */
  readonly from: string;
  /** The therapists whose calendars could not be looked at, with why. */
  readonly unseen: ReadonlyMap<string, string>;
  constructor(from: string, unseen: ReadonlyMap<string, string>) {
    const [first] = unseen.keys();
    super(first ?? "?", "");
    this.name = "OtherCalendarUnavailableError";
    this.from = from;
    this.unseen = unseen;
    const which = [...unseen]
      .map(([id, why]) => `${id === from ? `the other calendars of ${from}'s account` : id}: ${why}`)
      .join("; ");
    const where = unseen.has(from) ? "another calendar of its account" : "a mapped therapist's calendar";
    this.message =
      `the event gone from ${from}'s calendar may have been moved to ${where} that cannot be ` +
      `looked at now (${which}); the cancellation is not sent and waits for it`;
  }
}

export class Mapping {
  #config: Config;
  #therapists: Map<string, TherapistConfig>;
  #calendars: Map<string, CalendarPort>;
  #unavailable: Map<string, string>;
  #version = 0;
  /** Since when each therapist's calendar has been watched (see watched.ts); unset in tools that only plan. */
  watched: { since(therapistId: string): number } | undefined;
  /**
   * Whether the therapist's calendar may also be another mapped therapist's (its real id is theirs, or not known yet):
   * the stray pass removes nothing from it. Unset in tools that do not resolve calendars.
   */
  sharesCalendar: ((therapistId: string) => boolean) | undefined;
  /**
   * What the therapist's calendar is known as besides its calendar_id: its real id once Google told it, and `primary`
   * when the account's own calendar (as Google answered it for these credentials) is this one. A link naming one of
   * them is in place (placement.ts). Unset in tools that do not resolve calendars.
   */
  calendarNames: ((therapistId: string) => readonly string[]) | undefined;

  constructor(config: Config, calendars: Map<string, CalendarPort>, unavailable = new Map<string, string>()) {
    this.#config = config;
    this.#therapists = new Map(config.therapists.map((t) => [t.therapist_id, t]));
    this.#calendars = calendars;
    this.#unavailable = unavailable;
  }

  get config(): Config {
    return this.#config;
  }

  /**
   * Counts the mapping's changes: a reader that started on an older version (a calendar poll in flight during a
   * reload) knows that what it read may come from a calendar that is no longer the therapist's.
   */
  get version(): number {
    return this.#version;
  }

  /** The configuration object was changed in place (a reload swapped its sections): take up its therapists. */
  reloaded(): void {
    this.#therapists = new Map(this.#config.therapists.map((t) => [t.therapist_id, t]));
    this.#version++;
  }

  /** The mapped therapist, or undefined when `id` is not (or no longer) mapped. */
  therapist(id: string | null | undefined): TherapistConfig | undefined {
    return id == null ? undefined : this.#therapists.get(id);
  }

  get therapists(): readonly TherapistConfig[] {
    return this.#config.therapists;
  }

  /** The calendar of a mapped therapist; throws CalendarUnavailableError when it cannot be used now. */
  calendar(therapistId: string): CalendarPort {
    const cal = this.#calendars.get(therapistId);
    if (cal) return cal;
    const why = this.#unavailable.get(therapistId);
    if (why !== undefined || this.#therapists.has(therapistId)) {
      throw new CalendarUnavailableError(therapistId, why ?? "no calendar configured");
    }
    throw new CalendarUnavailableError(therapistId, "the therapist is not mapped");
  }

  /** The calendar when there is a usable one. */
  calendarIfAny(therapistId: string): CalendarPort | undefined {
    return this.#calendars.get(therapistId);
  }

  /** Usable calendars by therapist id. */
  get calendars(): ReadonlyMap<string, CalendarPort> {
    return this.#calendars;
  }

  /** Why a mapped therapist has no usable calendar, when that is so. */
  unavailableReason(therapistId: string): string | undefined {
    return this.#unavailable.get(therapistId);
  }

  /**
   * Epoch ms since which calbridge has watched the therapist's calendar under the current mapping: a calendar change
   * older than that was made while it did not (the therapist was out of the mapping) and is not written back.
   */
  watchedSince(therapistId: string | undefined): number {
    return therapistId === undefined ? 0 : (this.watched?.since(therapistId) ?? 0);
  }

  /** Write-back settings of a therapist (the defaults for one not mapped). */
  writeback(therapistId: string | undefined): WritebackConfig {
    const t = this.therapist(therapistId);
    return t ? writebackFor(this.#config, t) : { ...this.#config.sync.writeback };
  }
}
