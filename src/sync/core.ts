// Owns the assembly of the sync side from the mapping and the two APIs: links, planner, effects, dead letters and the
// engine, so the daemon and the one-shot commands wire the same pieces and hand each caller only what it uses.
import type { Clock } from "../clock.ts";
import type { Config } from "../config/schema.ts";
import type { Logger } from "../log.ts";
import type { Store } from "../store/store.ts";
import { Activity } from "./activity.ts";
import type { QuotaRates } from "./concurrency.ts";
import { DeadLetters } from "./dead-letters.ts";
import { Effects } from "./effects.ts";
import { SyncEngine } from "./engine.ts";
import { LinkStore } from "./links.ts";
import { Mapping } from "./mapping.ts";
import type { SyncMetrics } from "./metrics.ts";
import { Planner } from "./planner.ts";
import type { RetryPolicy } from "./retry.ts";
import type { BookingPort, CalendarPort } from "./types.ts";
import { WritebackGate } from "./writeback-gate.ts";
import { type HeldWriteback, WritebackGuard } from "./writeback-guard.ts";

export interface SyncCoreOptions {
  config: Config;
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
  /** Managed events per therapist as the last reconciliation counted them (the write-back guard's base). */
  managed: Map<string, number>;
  engine: SyncEngine;
}

export function createSyncCore(o: SyncCoreOptions): SyncCore {
  const mapping = new Mapping(o.config, o.calendars, o.unavailable);
  const links = new LinkStore(o.store, mapping, o.clock);
  const planner = new Planner(mapping);
  const activity = new Activity(o.clock);
  const fx = new Effects({ mapping, links, planner, metrics: o.metrics, activity, clock: o.clock });
  const dead = new DeadLetters(o.store, o.clock, o.metrics);
  const managed = new Map<string, number>();
  const limits = o.config.sync.writeback_guard;
  const guard = new WritebackGuard({
    holds: o.store.table<HeldWriteback>("holds"),
    limits: { windowMs: limits.window_minutes * 60_000, maxRatio: limits.max_ratio, floor: limits.floor },
    managedCount: (therapistId) => managed.get(therapistId),
    clock: o.clock,
    logger: o.logger,
    metrics: { held: o.metrics.writebacksHeld, tripped: o.metrics.writebackGuardTripped },
  });
  const gate = new WritebackGate({ guard, mapping, planner, clock: o.clock });
  const engine = new SyncEngine({
    booking: o.booking,
    fx,
    dead,
    gate,
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
  });
  return { mapping, links, planner, fx, dead, activity, guard, managed, engine };
}
