// Owns the daemon's upkeep of the links against the mapping: the report /status shows (read in the background, never
// waited for), the line at start naming therapists no longer mapped, a fresh calendar read for re-pointed therapists,
// and the leader's pass that moves events still in a calendar the mapping no longer names.
import type { Clock } from "../clock.ts";
import type { Logger } from "../log.ts";
import type { Table } from "../store/store.ts";
import type { SyncCore } from "../sync/core.ts";
import { describeError } from "../sync/errors.ts";
import {
  type MappingReport,
  type MappingStatus,
  mappingReport,
  mappingStatus,
  unmappedLine,
} from "../sync/mapping-report.ts";
import { calendarKey } from "../sync/placement.ts";
import type { SyncOutcome, SyncRequest } from "../sync/types.ts";

/** /status shows the report as of at most this long ago. */
const MAX_AGE_MS = 60_000;

export class MappingUpkeep {
  readonly #sync: SyncCore;
  readonly #tokens: Table<string>;
  readonly #clock: Clock;
  readonly #logger: Logger;
  #report: MappingReport | undefined;
  #readAt = 0;

  constructor(o: { sync: SyncCore; tokens: Table<string>; clock: Clock; logger: Logger }) {
    this.#sync = o.sync;
    this.#tokens = o.tokens;
    this.#clock = o.clock;
    this.#logger = o.logger;
  }

  /** Reads the links now. */
  async report(): Promise<MappingReport> {
    this.#report = await mappingReport(this.#sync.links, this.#sync.mapping, this.#sync.leftBehind);
    this.#readAt = this.#clock.now();
    return this.#report;
  }

  /** The last report for /status (undefined before the first); an old one is read again in the background. */
  status(): MappingStatus | undefined {
    if (this.#clock.now() - this.#readAt > MAX_AGE_MS) {
      this.#readAt = this.#clock.now();
      void this.report().catch(() => {});
    }
    return this.#report ? mappingStatus(this.#report) : undefined;
  }

  /** At start: therapists no longer mapped are named; a re-pointed therapist's calendar is read in full first. */
  async atStart(): Promise<void> {
    try {
      const r = await this.report();
      const line = unmappedLine(r);
      if (line) this.#logger.warn({ unmapped: r.unmapped }, line);
      // A sync token is one calendar's (the one the therapist had before).
      await this.#tokens.deleteMany([...r.misplaced.keys()]);
    } catch (err) {
      this.#logger.warn({ err: describeError(err) }, "the links could not be checked against the mapping at start");
    }
  }

  /** The leader's pass: every event still in a calendar the mapping no longer names moves (of these therapists). */
  async relocate(therapistIds?: readonly string[]): Promise<void> {
    const r = await this.report();
    const misplaced = [...r.misplaced].filter(([t]) => !therapistIds || therapistIds.includes(t));
    for (const [id] of misplaced) {
      const t = this.#sync.mapping.therapist(id);
      // Pointed back at a calendar whose events could not be moved before: they are the therapist's again.
      if (t) await this.#sync.leftBehind.clear(id, calendarKey(t));
    }
    await relocateEvents(this.#sync.engine, new Map(misplaced), this.#logger);
    await this.report();
  }
}

/**
 * The leader's relocation pass: each appointment's event brought to its therapist's calendar, one sync each. The pass
 * waits for each move's first attempt, not for its end: a move into a calendar that cannot be used yet (not shared, a
 * typo) waits in the engine, for up to sync.retry.unavailable_grace_minutes, and reconciliations, which wait for this
 * pass, would have waited as long for every therapist (they skip the events still in a calendar the mapping no longer
 * names). A move that failed is retried by the engine.
 */
export async function relocateEvents(
  engine: { syncAppointment(id: string, request: SyncRequest): Promise<SyncOutcome> },
  misplaced: ReadonlyMap<string, readonly string[]>,
  logger: Logger,
): Promise<void> {
  for (const [therapistId, ids] of misplaced) {
    const log = logger.child({ therapist_id: therapistId });
    log.info({ events: ids.length }, "the mapping names another calendar: calbridge's events move there");
    const outcomes = await Promise.allSettled(
      ids.map((id) =>
        engine.syncAppointment(id, { reason: "calendar changed", priority: "reconcile", only: "relocate", log }),
      ),
    );
    const failed = outcomes.filter((o) => o.status === "rejected" || !o.value.ok).length;
    log[failed > 0 ? "warn" : "info"](
      { moved: ids.length - failed, failed },
      failed > 0 ? "some events not moved yet; their syncs retry" : "events moved to the therapist's calendar",
    );
  }
}
