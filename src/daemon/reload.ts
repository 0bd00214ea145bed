// Owns reloading the configuration in a running daemon (SIGHUP): the file is read again; a file with problems is
// reported in the log, one line per problem, and changes nothing; a valid one is applied at one point between
// reconciliations and between syncs, so no sync sees half of the old mapping and half of the new. The daemon's parts
// share one Config object: the reload replaces its sections in place at that point, and tells the parts that copied a
// value at start (gateways, mapping, guard limits, poll interval, readiness, cron). What only a restart takes up
// (listeners, store, clients, notification targets; see RESTART_ONLY) is kept as it was, and the log line says so.
// Webhooks are accepted into the inbox throughout; their syncs wait in the engine's queue while the swap happens.

import type { CalendarGateway } from "../calendar/gateway.ts";
import {
  appliedConfig,
  type ConfigChanges,
  configChanges,
  describeChanges,
  nothingChanged,
} from "../config/changes.ts";
import { ConfigError } from "../config/load.ts";
import type { Config, TherapistConfig } from "../config/schema.ts";
import type { Logger } from "../log.ts";
import type { Table } from "../store/store.ts";
import type { CalendarPoller } from "../sync/calendar-poller.ts";
import type { SyncCore } from "../sync/core.ts";
import { describeError } from "../sync/errors.ts";
import { calendarKey, sameCalendarId } from "../sync/placement.ts";
import type { TherapistCalendars } from "./calendars.ts";
import { reconcileMaxAgeMs } from "./health.ts";
import type { PushChannels } from "./push.ts";

export interface ReloadParts {
  /** The live configuration every part reads; changed in place. */
  config: Config;
  gateways: TherapistCalendars;
  sync: SyncCore;
  poller: CalendarPoller;
  push: PushChannels;
  /** Calendar sync tokens by therapist id: a token belongs to one calendar. */
  tokens: Table<string>;
  /** The readiness check's options (its reconciliation age follows the cron). */
  readiness: { maxReconcileAgeMs?: number; scheduleChangedAt?: number };
  /** The daemon's clock (epoch ms). */
  now(): number;
  logger: Logger;
  /** Runs `fn` once the running reconciliation is over, holding new ones back until it is done. */
  betweenReconciliations<T>(fn: () => Promise<T>): Promise<T>;
  /** Leader work after the swap: poller, cron, push channels, moving events, backfills. */
  leading(): boolean;
  restartLeaderTimers(): void;
  /** Moves the events of these therapists to the calendars the mapping names now (the leader's relocation pass). */
  relocate(therapistIds: readonly string[]): Promise<void>;
  backfill(therapistId: string): Promise<void>;
  /** The next reconciliation lists this therapist's calendar in full (FullListings.forget). */
  forgetListing(therapistId: string): void;
  /** Therapists taken out of the mapping: what the daemon kept of each (listing times, push health) goes. */
  released(therapistIds: readonly string[]): void;
}

/** Applies a valid configuration to the running daemon; answers what changed. */
export async function applyReload(parts: ReloadParts, next: Config): Promise<ConfigChanges> {
  const live = parts.config;
  const previous = new Map(live.therapists.map((t) => [t.therapist_id, t]));
  // The same Google calendar written another way (`primary` and its address, as Google told it) is no re-point.
  const changes = configChanges(live, next, (was, now) => parts.gateways.sameCalendar(was, now));
  if (nothingChanged(changes)) {
    // The file says what the daemon runs already (a SIGHUP from log rotation or a config-management job): nothing is
    // stopped or started again. Restarting the poller would poll every calendar at once, one Google call each. What
    // is kept in memory of therapists removed earlier still goes once it no longer counts (their write-backs).
    parts.sync.tidy();
    logChanges(parts.logger, changes);
    return changes;
  }
  const applied = appliedConfig(live, next);
  // Everything that can take time or fail happens before the swap: new gateways, the cron's readiness age.
  const staged = await parts.gateways.stage(live.therapists, applied.therapists);
  const maxAge = await reconcileMaxAgeMs(applied.sync.reconcile_cron);
  const repointed = changes.repointed.map((r) => r.therapistId);
  let retired: Map<string, CalendarGateway> | undefined;
  try {
    await parts.betweenReconciliations(async () => {
      parts.poller.stop();
      await parts.sync.engine.between(async () => {
        // A sync token is one calendar's: a re-pointed therapist's new calendar is read in full first. So is the
        // calendar of a therapist mapped again: a token of their earlier watch would report what they changed while
        // unmapped as new, and it is not theirs to write back (watched.ts).
        // Only the leader settles the ledger (watched.ts); a standby settles it when it comes to lead.
        const begun = parts.leading()
          ? await parts.sync.watched.settle(
              applied.therapists,
              (b) => parts.tokens.deleteMany(b),
              (t, watched) => watchedStill(previous.get(t.therapist_id), t, watched, repointed),
            )
          : [];
        await parts.tokens.deleteMany([...new Set(repointed.filter((id) => !begun.includes(id)))]);
        // Their calendar is another one now (or watched afresh): its full listing is due at the next run, not at the
        // old calendar's date (up to a day later), so what an earlier installation left in it goes at once.
        for (const id of new Set([...repointed, ...changes.added, ...begun])) parts.forgetListing(id);
        Object.assign(live, applied);
        retired = parts.gateways.swap(staged);
        parts.sync.reloaded();
        parts.released(changes.removed);
        parts.poller.intervalMs = applied.sync.calendar_poll_seconds * 1000;
        if (parts.readiness.maxReconcileAgeMs !== maxAge) parts.readiness.scheduleChangedAt = parts.now();
        parts.readiness.maxReconcileAgeMs = maxAge;
      });
    });
  } finally {
    if (!retired) {
      // Not applied (the store refused the tokens' removal, say): the running configuration goes on as it was.
      for (const gw of staged.made.values()) gw.close();
      if (parts.leading()) parts.restartLeaderTimers();
    }
  }
  const out = retired ?? new Map<string, CalendarGateway>();
  logChanges(parts.logger, changes);
  if (parts.leading()) {
    parts.restartLeaderTimers();
    for (const [therapistId, gw] of out) await parts.push.retire(therapistId, gw);
    void parts.push.renew();
    void followUps(parts, changes.added, repointed);
  }
  for (const gw of out.values()) gw.close();
  return changes;
}

/** The reload's one line: what changed, and what waits for a restart. */
function logChanges(logger: Logger, changes: ConfigChanges): void {
  logger[changes.restartNeeded.length > 0 ? "warn" : "info"](
    {
      added: changes.added,
      removed: changes.removed,
      repointed: changes.repointed,
      changed: changes.changed,
      settings: changes.settings,
      restart_needed: changes.restartNeeded,
    },
    describeChanges(changes),
  );
}

/** The calendar watched under the previous mapping (`was`'s) is `t`'s still: written another way, not re-pointed. */
function watchedStill(was: TherapistConfig | undefined, t: TherapistConfig, watched: string, repointed: string[]) {
  return was !== undefined && !repointed.includes(t.therapist_id) && sameCalendarId(watched, calendarKey(was));
}

/**
 * New therapists are backfilled at once; re-pointed ones get their events moved, then a reconciliation. A therapist
 * mapped again with another calendar than their events are in counts as added, not re-pointed: their events move too
 * (the relocation pass takes only events in a calendar the mapping no longer names).
 */
async function followUps(parts: ReloadParts, added: string[], repointed: string[]): Promise<void> {
  try {
    if (repointed.length + added.length > 0) await parts.relocate([...repointed, ...added]);
    for (const therapistId of [...added, ...repointed]) await parts.backfill(therapistId);
  } catch (err) {
    parts.logger.warn({ err: describeError(err) }, "backfill after the reload failed; the next reconciliation retries");
  }
}

export interface ReloaderOptions {
  file: string;
  load(file: string): Config;
  reload(next: Config): Promise<ConfigChanges>;
  logger: Logger;
  /** Reloads wait for this (the daemon's start). */
  after?: Promise<unknown>;
}

/** SIGHUP's handler: one reload at a time; signals during a reload are answered by one more reload after it. */
export class ConfigReloader {
  readonly #o: ReloaderOptions;
  #chain: Promise<unknown>;
  #queued = false;

  constructor(options: ReloaderOptions) {
    this.#o = options;
    this.#chain = (options.after ?? Promise.resolve()).catch(() => {});
  }

  /** Asks for a reload; resolves when it (or the one it joined) is over. Never rejects. */
  request(): Promise<void> {
    if (this.#queued) return this.#chain.then(() => {});
    this.#queued = true;
    this.#chain = this.#chain.then(() => {
      this.#queued = false;
      return this.#reload();
    });
    return this.#chain.then(() => {});
  }

  async #reload(): Promise<void> {
    const { file, logger } = this.#o;
    logger.info({ file }, "reloading the configuration (SIGHUP)");
    let next: Config;
    try {
      next = this.#o.load(file);
    } catch (err) {
      const problems = err instanceof ConfigError ? err.problems : [describeError(err)];
      for (const problem of problems) logger.error({ file, problem }, `invalid configuration ${file}: ${problem}`);
      logger.warn(
        { file, problems: problems.length },
        "configuration not reloaded: the daemon goes on with the configuration it has",
      );
      return;
    }
    try {
      await this.#o.reload(next);
    } catch (err) {
      logger.error(
        { file, err: describeError(err) },
        "configuration not applied; the daemon goes on with the configuration it has",
      );
    }
  }
}
