// Owns keyed scheduling for all sync work (controller-runtime's work queue, in small): one run per key at a time,
// requests for a key that is not running yet merged into one, priority lanes, and a key that waits to retry holds no
// worker. The caller's `run` decides whether a key is done or retried after a delay; the queue only keeps time.
import type { Clock } from "../clock.ts";

/** What a run tells the queue: finished with this key, or run it again after `retryInMs`. */
export type RunVerdict = { done: true } | { done: false; retryInMs: number };

export interface WorkQueueOptions<R> {
  /** Runs at once over different keys. */
  concurrency: number;
  /** Number of priority lanes; lane 0 is served first. */
  lanes: number;
  /** Runs at once per lane at most (by the lane a key was taken from); unlimited where not given. */
  laneLimits?: readonly number[];
  /**
   * Lanes with workers of their own (as many as their limit): their runs do not take one of the `concurrency` shared
   * workers, so work that mostly waits (for rate budget) never holds up the other lanes.
   */
  ownWorkers?: readonly number[];
  /** One request out of a pending one and a newer one for the same key (the newer carries the fresher hints). */
  merge(pending: R, next: R): R;
  /** Must not throw (a throw counts as done, so one broken key cannot stall the queue). */
  run(key: string, request: R, attempt: number): Promise<RunVerdict>;
  clock: Clock;
}

interface Waiter {
  when: () => boolean;
  resolve: () => void;
}

interface Entry<R> {
  request: R;
  lane: number;
  /** Runs of this key so far in its current chain of retries. */
  attempts: number;
  /** The lane it was taken from while it runs (its lane's limit counts it). */
  ranIn?: number;
  state: "ready" | "running" | "waiting";
  /** A request that arrived while this key was running: it runs after, merged into a retry if there is one. */
  next?: { request: R; lane: number };
  wake?: AbortController;
}

export class WorkQueue<R> {
  readonly #o: WorkQueueOptions<R>;
  readonly #entries = new Map<string, Entry<R>>();
  readonly #ready: string[][];
  #running = 0;
  readonly #runningIn: number[];
  #stopped = false;
  #paused = false;
  #pumpScheduled = false;
  #waiters: Waiter[] = [];

  constructor(options: WorkQueueOptions<R>) {
    if (!(options.concurrency >= 1)) throw new RangeError(`concurrency must be at least 1, got ${options.concurrency}`);
    this.#o = options;
    this.#ready = Array.from({ length: Math.max(1, options.lanes) }, () => []);
    this.#runningIn = this.#ready.map(() => 0);
  }

  /** Keys queued, running or waiting to retry. */
  get size(): number {
    return this.#entries.size;
  }

  get running(): number {
    return this.#running;
  }

  /** Keys waiting for their next try. */
  get waiting(): number {
    let n = 0;
    for (const e of this.#entries.values()) if (e.state === "waiting") n++;
    return n;
  }

  has(key: string): boolean {
    return this.#entries.has(key);
  }

  /**
   * Queues `request` for `key`. A key that is queued or waiting takes it merged into its pending request (and a
   * waiting key runs again at once: the new request is new information); a running key runs once more afterwards.
   * Returns false after stop(): nothing is queued then.
   */
  add(key: string, request: R, lane = 0): boolean {
    if (this.#stopped) return false;
    const l = Math.min(Math.max(0, lane), this.#ready.length - 1);
    const entry = this.#entries.get(key);
    if (!entry) {
      this.#entries.set(key, { request, lane: l, attempts: 0, state: "ready" });
      this.#enqueue(key, l);
    } else if (entry.state === "running") {
      entry.next = entry.next
        ? { request: this.#o.merge(entry.next.request, request), lane: Math.min(entry.next.lane, l) }
        : { request, lane: l };
    } else {
      entry.request = this.#o.merge(entry.request, request);
      if (entry.state === "waiting") {
        entry.wake?.abort();
        entry.wake = undefined;
        entry.state = "ready";
        entry.lane = Math.min(entry.lane, l);
        this.#enqueue(key, entry.lane);
      } else if (l < entry.lane) {
        // Promote: it is found in the higher lane first; the stale position in the lower lane is skipped.
        entry.lane = l;
        this.#enqueue(key, l);
      }
    }
    return true;
  }

  /** Resolves when nothing is queued or running (keys waiting to retry may remain). */
  idle(): Promise<void> {
    return this.#until(() => this.#running === 0 && this.waiting === this.#entries.size);
  }

  /** Resolves when nothing is queued, running or waiting to retry. */
  drained(): Promise<void> {
    return this.#until(() => this.#entries.size === 0 && this.#running === 0);
  }

  /**
   * Starts nothing new from now on and cancels waits between retries; resolves, once the runs in flight have finished,
   * with the requests that never ran to the end (so their callers can be told).
   */
  async stop(): Promise<R[]> {
    this.#stopped = true;
    for (const entry of this.#entries.values()) entry.wake?.abort();
    await this.#until(() => this.#running === 0);
    const left: R[] = [];
    for (const entry of this.#entries.values()) {
      left.push(entry.request);
      if (entry.next) left.push(entry.next.request);
    }
    this.#entries.clear();
    for (const lane of this.#ready) lane.length = 0;
    this.#notify();
    return left;
  }

  /**
   * Starts nothing new until resume() (requests are still taken, queued and merged); resolves once the runs in flight
   * have finished. A configuration reload swaps the mapping in that gap, so no run sees half of each.
   */
  pause(): Promise<void> {
    this.#paused = true;
    return this.#until(() => this.#running === 0);
  }

  resume(): void {
    this.#paused = false;
    this.#pump();
  }

  #enqueue(key: string, lane: number): void {
    this.#ready[lane]!.push(key);
    // Started on the next turn: the caller finishes first, and a burst is taken in one go.
    if (!this.#pumpScheduled) {
      this.#pumpScheduled = true;
      setImmediate(() => {
        this.#pumpScheduled = false;
        this.#pump();
      });
    }
  }

  #nextReady(sharedFree: boolean): string | undefined {
    for (const [lane, keys] of this.#ready.entries()) {
      if (this.#runningIn[lane]! >= (this.#o.laneLimits?.[lane] ?? Number.POSITIVE_INFINITY)) continue;
      if (!sharedFree && !this.#o.ownWorkers?.includes(lane)) continue;
      while (keys.length > 0) {
        const key = keys.shift()!;
        const entry = this.#entries.get(key);
        if (entry?.state === "ready" && entry.lane === lane) return key;
      }
    }
    return undefined;
  }

  /** Runs on the shared workers (those of lanes without workers of their own). */
  #shared(): number {
    let n = 0;
    for (const [lane, count] of this.#runningIn.entries()) if (!this.#o.ownWorkers?.includes(lane)) n += count;
    return n;
  }

  #pump(): void {
    while (!this.#stopped && !this.#paused) {
      const key = this.#nextReady(this.#shared() < this.#o.concurrency);
      if (key === undefined) break;
      const entry = this.#entries.get(key)!;
      entry.state = "running";
      entry.attempts += 1;
      entry.ranIn = entry.lane;
      this.#runningIn[entry.lane]! += 1;
      this.#running++;
      void this.#runOne(key, entry);
    }
    this.#notify();
  }

  async #runOne(key: string, entry: Entry<R>): Promise<void> {
    let verdict: RunVerdict;
    try {
      verdict = await this.#o.run(key, entry.request, entry.attempts);
    } catch {
      verdict = { done: true };
    }
    this.#running--;
    this.#runningIn[entry.ranIn ?? 0]! -= 1;
    const next = entry.next;
    entry.next = undefined;
    if (this.#stopped) {
      if (!verdict.done || next) {
        if (next) entry.request = verdict.done ? next.request : this.#o.merge(entry.request, next.request);
        entry.state = "waiting";
      } else this.#entries.delete(key);
    } else if (verdict.done) {
      if (next) {
        this.#entries.set(key, { request: next.request, lane: next.lane, attempts: 0, state: "ready" });
        this.#enqueue(key, next.lane);
      } else this.#entries.delete(key);
    } else if (next) {
      // A newer request joins the retry and runs at once.
      entry.request = this.#o.merge(entry.request, next.request);
      entry.lane = Math.min(entry.lane, next.lane);
      entry.state = "ready";
      this.#enqueue(key, entry.lane);
    } else {
      entry.state = "waiting";
      const wake = new AbortController();
      entry.wake = wake;
      this.#o.clock.sleep(verdict.retryInMs, wake.signal).then(
        () => {
          if (entry.wake !== wake || this.#stopped) return;
          entry.wake = undefined;
          entry.state = "ready";
          this.#enqueue(key, entry.lane);
        },
        () => {},
      );
    }
    this.#pump();
  }

  #until(when: () => boolean): Promise<void> {
    if (when()) return Promise.resolve();
    return new Promise((resolve) => this.#waiters.push({ when, resolve }));
  }

  #notify(): void {
    if (this.#waiters.length === 0) return;
    const still: Waiter[] = [];
    for (const waiter of this.#waiters) {
      if (waiter.when()) waiter.resolve();
      else still.push(waiter);
    }
    this.#waiters = still;
  }
}
