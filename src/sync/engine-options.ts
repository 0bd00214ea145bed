// Owns what a sync engine is built from: the two APIs' ports, where its decisions go, its limits and retries, and
// whether this process may sync at all (a daemon only while it leads).
import type { Clock } from "../clock.ts";
import type { Logger } from "../log.ts";
import type { QuotaRates } from "./concurrency.ts";
import type { DeadLetters } from "./dead-letters.ts";
import type { Effects } from "./effects.ts";
import type { HistoryRecorder } from "./history.ts";
import type { Relocator } from "./relocate.ts";
import type { RetryPolicy } from "./retry.ts";
import type { BookingPort } from "./types.ts";
import type { WritebackGate } from "./writeback-gate.ts";

export interface EngineOptions {
  booking: BookingPort;
  fx: Effects;
  dead: DeadLetters;
  gate: WritebackGate;
  /** Where each decision about an appointment is told (its history). */
  history?: HistoryRecorder;
  logger?: Logger;
  clock?: Clock;
  /** Syncs at once at least (sync.concurrency). */
  concurrency: number;
  /** Syncs at once at most (sync.max_concurrency; default: the floor, fixed). */
  maxConcurrency?: number;
  /** Google's budgets and round trip: between the two bounds, as many syncs run as keep the budget busy. */
  quota?: QuotaRates;
  retry?: Partial<RetryPolicy>;
  /** Brings a link's event to the calendar the mapping names now before anything else is decided about it. */
  relocator?: Relocator;
  /** Whether this process may sync now (a daemon: while it holds the leader lease); without it, always. */
  leading?: () => boolean;
}
