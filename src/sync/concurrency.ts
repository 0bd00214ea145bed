// Owns how many syncs run at once: enough to spend Google's budget at the latency Google answers with (Little's law:
// requests in flight = rate x round trip), in all and per therapist, between the configured floor and ceiling.
import type { QueueLimits } from "./work-queue.ts";

/** What the sizing reads from the quota gate: the budgets' rates and the measured round trip. */
export interface QuotaRates {
  readonly projectPerSecond: number;
  readonly userPerSecond: number;
  /** Smoothed Google round trip in ms; undefined before the first answer. */
  readonly latencyMs: number | undefined;
}

export interface ConcurrencyOptions {
  /** Syncs at once at least (sync.concurrency): what the work besides Google (store, booking, rendering) needs. */
  min: number;
  /** Syncs at once at most (sync.max_concurrency). */
  max: number;
  quota: QuotaRates;
}

/** Room above the exact figure: round trips vary, and a sync spends some time outside Google's answer. */
const HEADROOM = 1.25;

/**
 * The work queue's limits now: `min` plus the requests it takes to keep the project's budget busy at the measured
 * round trip, at most `max`; per therapist, half of `min` plus what keeps one therapist's budget busy (a therapist's
 * backfill then holds no more workers than their own quota can use, and others' work finds free ones).
 */
export function queueLimits(o: ConcurrencyOptions): QueueLimits {
  const rtt = (o.quota.latencyMs ?? 0) / 1000;
  const min = Math.max(1, o.min);
  const max = Math.max(min, o.max);
  const concurrency = Math.min(max, min + Math.ceil(o.quota.projectPerSecond * rtt * HEADROOM));
  const perGroup = Math.min(concurrency, Math.ceil(min / 2) + Math.ceil(o.quota.userPerSecond * rtt * HEADROOM));
  return { concurrency, perGroup };
}
