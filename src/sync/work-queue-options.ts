// Owns what the keyed work queue is told and tells: its options and limits, a run's verdict, a waiter on its state.
import type { Clock } from "../clock.ts";

/**
 * What a run tells the queue: finished with this key, or run it again after `retryInMs`. `parked`: the run failed with
 * nothing it sent applied (its calendar cannot be used now), so a stop may give up its wait at once (dropParked).
 */
export type RunVerdict = { done: true } | { done: false; retryInMs: number; parked?: true };

/** How many runs may be going at once: in all, and per group. */
export interface QueueLimits {
  concurrency: number;
  perGroup: number;
}

export interface WorkQueueOptions<R> {
  /** Runs at once over different keys. */
  concurrency: number;
  /**
   * The limits now, asked before starting runs (they may follow measurements); `concurrency` above when absent, with no
   * cap per group.
   */
  limits?: () => QueueLimits;
  /** The group of a request (e.g. its therapist): groups take turns within a lane. "" is no group: never capped. */
  group?(request: R): string;
  /** Number of priority lanes; lane 0 is served first. */
  lanes: number;
  /** Runs at once per lane at most (by the lane a key was taken from); unlimited where not given. */
  laneLimits?: readonly number[];
  /**
   * Lanes with workers of their own (as many as their limit): their runs do not take one of the shared workers, so
   * work that mostly waits (for rate budget) never holds up the other lanes.
   */
  ownWorkers?: readonly number[];
  /** One request out of a pending one and a newer one for the same key (the newer carries the fresher hints). */
  merge(pending: R, next: R): R;
  /** Must not throw (a throw counts as done, so one broken key cannot stall the queue). */
  run(key: string, request: R, attempt: number): Promise<RunVerdict>;
  clock: Clock;
}

export interface Waiter {
  when: () => boolean;
  resolve: () => void;
}
