// Owns time: the one place that reads the wall clock or sleeps, so tests can drive time instead of waiting for it.

export interface Clock {
  /** Milliseconds since the Unix epoch. */
  now(): number;
  /** Resolves after `ms` milliseconds of this clock's time; rejects with the signal's reason when aborted. */
  sleep(ms: number, signal?: AbortSignal): Promise<void>;
  /**
   * Milliseconds on a clock NTP never steps (an arbitrary origin), for time limits a step must not stretch (the leader
   * lease's safety window). Without it, `now()`.
   */
  elapsed?(): number;
}

/**
 * The longest delay one timer takes (2^31-1 ms, about 24.8 days). Node fires a longer one after 1 ms with a
 * TimeoutOverflowWarning: a loop sleeping that long (a poll interval of 3,000,000 s) spun every millisecond.
 */
export const MAX_TIMER_MS = 2_147_483_647;

/**
 * Calls `fn` once `ms` milliseconds have passed, with timers of at most MAX_TIMER_MS each; answers the cancel. An
 * infinite `ms` never calls it; a negative or NaN one calls it at the next turn of timers, as setTimeout does.
 */
export function longTimeout(fn: () => void, ms: number, unref = false): () => void {
  let left = Number.isNaN(ms) ? 0 : Math.max(0, ms);
  let timer: NodeJS.Timeout;
  const arm = () => {
    const step = Math.min(left, MAX_TIMER_MS);
    left -= step;
    timer = setTimeout(() => (left > 0 ? arm() : fn()), step);
    if (unref) timer.unref();
  };
  arm();
  return () => clearTimeout(timer);
}

export const systemClock: Clock = {
  now: () => Date.now(),
  elapsed: () => performance.now(),
  sleep: (ms, signal) =>
    new Promise<void>((resolve, reject) => {
      if (signal?.aborted) return reject(signal.reason);
      const cancel = longTimeout(() => {
        signal?.removeEventListener("abort", onAbort);
        resolve();
      }, ms);
      const onAbort = () => {
        cancel();
        reject(signal?.reason);
      };
      signal?.addEventListener("abort", onAbort, { once: true });
    }),
};

/**
 * `new Date(ms).toISOString()` that remembers the last millisecond it formatted: the stamps of a burst (a webhook's
 * receivedAt, its done mark's doneAt, several a millisecond under load) are formatted once per millisecond, not once
 * each. Each caller keeps its own.
 */
export function isoFormatter(): (ms: number) => string {
  let lastMs = Number.NaN;
  let lastText = "";
  return (ms) => {
    if (ms !== lastMs) {
      lastText = new Date(ms).toISOString();
      lastMs = ms;
    }
    return lastText;
  };
}

/**
 * A clock that only moves when told to. `sleep` resolves once `advance` has moved time past its deadline.
 * Used by tests of anything that waits (rate-limit gate, retries, webhook timestamps).
 */
export class ManualClock implements Clock {
  #now: number;
  #sleepers: { until: number; resolve: () => void }[] = [];

  constructor(start = Date.UTC(2026, 10, 22, 9, 0, 0)) {
    this.#now = start;
  }

  now(): number {
    return this.#now;
  }

  /** Number of callers currently waiting in `sleep`. */
  get waiting(): number {
    return this.#sleepers.length;
  }

  sleep(ms: number, signal?: AbortSignal): Promise<void> {
    if (ms <= 0) return Promise.resolve();
    return new Promise<void>((resolve, reject) => {
      if (signal?.aborted) return reject(signal.reason);
      const sleeper = { until: this.#now + ms, resolve };
      this.#sleepers.push(sleeper);
      signal?.addEventListener(
        "abort",
        () => {
          this.#sleepers = this.#sleepers.filter((s) => s !== sleeper);
          reject(signal.reason);
        },
        { once: true },
      );
    });
  }

  /** Moves time forward and wakes every sleeper whose deadline has passed, in deadline order. */
  async advance(ms: number): Promise<void> {
    const target = this.#now + ms;
    for (;;) {
      this.#sleepers.sort((a, b) => a.until - b.until);
      const next = this.#sleepers[0];
      if (!next || next.until > target) break;
      this.#sleepers.shift();
      this.#now = Math.max(this.#now, next.until);
      next.resolve();
      // Let the woken task run (and possibly sleep again) before waking the next one.
      await new Promise((r) => setImmediate(r));
    }
    this.#now = target;
  }

  set(epochMs: number): void {
    this.#now = epochMs;
  }
}
