// Owns the assembly of the sync side from the mapping and the two APIs: links, planner, effects, dead letters and the
// engine, so the daemon and the one-shot commands wire the same pieces and hand each caller only what it uses.
import type { Clock } from "../clock.ts";
import { type Config, writebackFor } from "../config/schema.ts";
import type { Logger } from "../log.ts";
import type { Store } from "../store/store.ts";
import { Activity } from "./activity.ts";
import type { QuotaRates } from "./concurrency.ts";
import { DeadLetters } from "./dead-letters.ts";
import { Effects } from "./effects.ts";
import { SyncEngine } from "./engine.ts";
import { History } from "./history.ts";
import { HistoryLog } from "./history-log.ts";
import { LeftBehindEvents } from "./left-behind.ts";
import { Leftovers } from "./leftovers.ts";
import { linkUpgrade } from "./link-upgrade.ts";
import { LinkStore } from "./links.ts";
import { Mapping } from "./mapping.ts";
import type { SyncMetrics } from "./metrics.ts";
import { PendingWritebacks } from "./pending-writebacks.ts";
import { Planner } from "./planner.ts";
import { Relocator, type RelocatorOptions } from "./relocate.ts";
import type { RetryPolicy } from "./retry.ts";
import type { BookingPort, CalendarPort } from "./types.ts";
import { WatchedCalendars } from "./watched.ts";
import { longestGraceMs, WritebackGate } from "./writeback-gate.ts";
import { type HeldWriteback, WritebackGuard } from "./writeback-guard.ts";

export interface SyncCoreOptions {
  config: Config;
  /** Whether this process may sync and write back now (it holds the leader lease); without it, always. */
  leading?: () => boolean;
  booking: BookingPort;
  /** Usable calendars by therapist id (the map may change later: a reload adds and removes entries). */
  calendars: Map<string, CalendarPort>;
  /** Mapped therapists without a usable calendar, with the reason. */
  unavailable?: Map<string, string>;
  store: Store;
  clock: Clock;
  logger: Logger;
  metrics: SyncMetrics;
  /** Overrides of the retry policy (tests shorten it); the configuration's sync.retry otherwise. */
  retry?: Partial<RetryPolicy>;
  /** Opens a calendar the mapping no longer names, to move events out of it (without it, none are moved). */
  openCalendar?: RelocatorOptions["open"];
  /** Google's budgets and measured round trip: the engine runs as many syncs at once as keep them busy. */
  quota?: QuotaRates;
}

export interface SyncCore {
  mapping: Mapping;
  links: LinkStore;
  planner: Planner;
  fx: Effects;
  dead: DeadLetters;
  activity: Activity;
  guard: WritebackGuard;
  /** Each appointment's history: what the engine decided, and who caused it. */
  history: History;
  /** Managed events per therapist as the last reconciliation counted them (the write-back guard's base). */
  managed: Map<string, number>;
  engine: SyncEngine;
  /** Events left in old calendars that could not be reached when they were to move. */
  leftBehind: LeftBehindEvents;
  /** Since when each mapped therapist's calendar has been watched: settled at start and by each reload. */
  watched: WatchedCalendars;
  /** Write-backs waiting out their grace period, kept across a restart (the leader resumes them). */
  pendingWritebacks: PendingWritebacks;
  /** The configuration object was changed in place (a reload): the mapping and the guard's limits follow it. */
  reloaded(): void;
  /**
   * Forgets what is kept in memory for therapists the mapping no longer names and that no longer counts (a removed
   * therapist's write-backs past the horizon); `reloaded` does it too. A reload that changed nothing calls it alone.
   */
  tidy(): void;
}

export function createSyncCore(o: SyncCoreOptions): SyncCore {
  const mapping = new Mapping(o.config, o.calendars, o.unavailable);
  const watched = new WatchedCalendars(o.store, o.clock);
  mapping.watched = watched;
  const links = new LinkStore(o.store, mapping, o.clock);
  const planner = new Planner(mapping, o.clock);
  links.upgrade = linkUpgrade(mapping, planner);
  const activity = new Activity(o.clock);
  const leftBehind = new LeftBehindEvents(o.store, o.clock);
  const leftovers = new Leftovers(o.store, o.clock);
  const fx = new Effects({
    mapping,
    links,
    planner,
    metrics: o.metrics,
    activity,
    clock: o.clock,
    leftBehind,
    leftovers,
  });
  // The window as the live configuration has it: a reload replaces config.sync.
  const dead = new DeadLetters(o.store, o.clock, o.metrics, () => o.config.sync.window);
  const managed = new Map<string, number>();
  const limits = {
    ...guardLimits(o.config),
    // A therapist's own longest grace period, of the write-backs they have on (another's 1-day grace made 4 deletions
    // of a therapist with the defaults, 2 hours apart, count as one burst: held). Not mapped: the longest of all.
    graceOf: (therapistId: string) =>
      mapping.therapist(therapistId) ? longestGraceMs(mapping.writeback(therapistId)) : undefined,
  };
  const guard = new WritebackGuard({
    holds: o.store.table<HeldWriteback>("holds"),
    sent: o.store.table<Record<string, number>>("meta"),
    limits,
    managedCount: (therapistId) => managed.get(therapistId),
    clock: o.clock,
    logger: o.logger,
    metrics: { held: o.metrics.writebacksHeld, tripped: o.metrics.writebackGuardTripped },
  });
  const pendingWritebacks = new PendingWritebacks(o.store, o.clock);
  const gate = new WritebackGate({
    guard,
    mapping,
    planner,
    clock: o.clock,
    pending: pendingWritebacks,
    ...(o.leading ? { leading: o.leading } : {}),
  });
  const history = new History(historyLog(o.store, o.config, o.clock, o.logger), o.clock);
  const relocator = o.openCalendar
    ? new Relocator({
        fx,
        leftBehind,
        open: o.openCalendar,
        clock: o.clock,
        logger: o.logger,
        // A deletion the engine waits out or holds was the therapist's: relocating does not undo it silently.
        waiting: async (id) => (await guard.isHeld(id)) || (await pendingWritebacks.has(id)),
      })
    : undefined;
  const engine = new SyncEngine({
    booking: o.booking,
    fx,
    dead,
    gate,
    history,
    logger: o.logger,
    clock: o.clock,
    concurrency: o.config.sync.concurrency,
    maxConcurrency: o.config.sync.max_concurrency,
    ...(o.quota ? { quota: o.quota } : {}),
    retry: {
      maxAttempts: o.config.sync.retry.attempts,
      unavailableGraceMs: o.config.sync.retry.unavailable_grace_minutes * 60_000,
      ...o.retry,
    },
    ...(relocator ? { relocator } : {}),
    // A replica that lost the lease starts no sync, also one its reconciliation planned before (the next leader's).
    ...(o.leading ? { leading: o.leading } : {}),
  });
  // Every saved link that awaits an enrichment queues one (a no-op while enrichments are off).
  links.onEnrichmentDue = (id) => engine.enrich(id);
  // What is kept per therapist goes with a therapist the reload took out of the mapping.
  const tidy = () => {
    const mapped = (therapistId: string) => mapping.therapist(therapistId) !== undefined;
    activity.forgetUnmapped(mapped);
    guard.forgetUnmapped(mapped);
    for (const therapistId of managed.keys()) if (!mapped(therapistId)) managed.delete(therapistId);
  };
  const reloaded = () => {
    mapping.reloaded();
    // The guard reads its limits from this object at every decision.
    Object.assign(limits, guardLimits(o.config));
    tidy();
    // The owned-calendar lists may have been read through a gateway the reload retired (another calendar, other
    // credentials): read again when needed.
    fx.ownLists.clear();
  };
  return {
    mapping,
    links,
    planner,
    fx,
    dead,
    activity,
    guard,
    history,
    managed,
    engine,
    leftBehind,
    watched,
    pendingWritebacks,
    reloaded,
    tidy,
  };
}

function guardLimits(config: Config) {
  const limits = config.sync.writeback_guard;
  const graces = [config.sync.writeback, ...config.therapists.map((t) => writebackFor(config, t))].flatMap((w) => [
    w.cancel_grace_seconds,
    w.reschedule_grace_seconds,
  ]);
  const graceMs = Math.max(0, ...graces) * 1000;
  return { windowMs: limits.window_minutes * 60_000, maxRatio: limits.max_ratio, floor: limits.floor, graceMs };
}

/** The history's store, as the configuration keeps it (the daemon's, and `calbridge history`'s). */
export function historyLog(store: Store, config: Config, clock: Clock, logger?: Logger): HistoryLog {
  return new HistoryLog({
    store,
    clock,
    retentionMs: config.history.retention_days * 86_400_000,
    maxEntries: config.history.max_entries,
    ...(logger ? { logger } : {}),
  });
}
