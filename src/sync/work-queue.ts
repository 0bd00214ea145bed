// Owns keyed scheduling for all sync work (controller-runtime's work queue, in small): one run per key at a time,
// requests for a key that is not running yet merged into one, priority lanes served round-robin over groups (a
// therapist) with a cap of runs per group, and a key that waits to retry holds no worker. The caller's `run` decides
// whether a key is done or retried after a delay; the queue only keeps time.
import { FairLane } from "./fair-lane.ts";
import type { QueueLimits, RunVerdict, Waiter, WorkQueueOptions } from "./work-queue-options.ts";

export type { QueueLimits, RunVerdict, WorkQueueOptions } from "./work-queue-options.ts";

interface Entry<R> {
  request: R;
  lane: number;
  /** Runs of this key so far in its current chain of retries. */
  attempts: number;
  state: "ready" | "running" | "waiting";
  group: string;
  /** The lane it was taken from while it runs (its lane's limit counts it). */
  ranIn?: number;
  /** A request that arrived while this key was running: it runs after, merged into a retry if there is one. */
  next?: { request: R; lane: number };
  wake?: AbortController;
  /** Waiting after a run that sent nothing applied (RunVerdict.parked). */
  parked?: boolean;
}

export class WorkQueue<R> {
  readonly #o: WorkQueueOptions<R>;
  readonly #entries = new Map<string, Entry<R>>();
  readonly #ready: FairLane[];
  #running = 0;
  readonly #runningIn = new Map<string, number>();
  readonly #runningInLane: number[];
  #stopped = false;
  #paused = false;
  #pumpScheduled = false;
  #waiters: Waiter[] = [];

  constructor(options: WorkQueueOptions<R>) {
    if (!(options.concurrency >= 1)) throw new RangeError(`concurrency must be at least 1, got ${options.concurrency}`);
    this.#o = options;
    this.#ready = Array.from({ length: Math.max(1, options.lanes) }, () => new FairLane());
    this.#runningInLane = this.#ready.map(() => 0);
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
      const fresh: Entry<R> = { request, lane: l, attempts: 0, state: "ready", group: this.#groupOf(request) };
      this.#entries.set(key, fresh);
      this.#enqueue(key, fresh);
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
        this.#enqueue(key, entry);
      } else if (l < entry.lane) {
        // Promote: it is found in the higher lane first; the stale position in the lower lane is skipped.
        entry.lane = l;
        this.#enqueue(key, entry);
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
    for (const lane of this.#ready) lane.clear();
    this.#notify();
    return left;
  }

  /** Removes the keys waiting to retry after a run that sent nothing (parked), and returns their requests. */
  dropParked(): R[] {
    const dropped: R[] = [];
    for (const [key, entry] of this.#entries) {
      if (entry.state !== "waiting" || !entry.parked) continue;
      entry.wake?.abort();
      this.#entries.delete(key);
      dropped.push(entry.request);
    }
    this.#notify();
    return dropped;
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

  #groupOf(request: R): string {
    return this.#o.group?.(request) ?? "";
  }

  #enqueue(key: string, entry: Entry<R>): void {
    this.#ready[entry.lane]!.push(entry.group, key);
    // Started on the next turn: the caller finishes first, and a burst is taken in one go.
    if (!this.#pumpScheduled) {
      this.#pumpScheduled = true;
      setImmediate(() => {
        this.#pumpScheduled = false;
        this.#pump();
      });
    }
  }

  /** The limits to start runs by now. */
  get limits(): QueueLimits {
    return this.#o.limits?.() ?? { concurrency: this.#o.concurrency, perGroup: Number.POSITIVE_INFINITY };
  }

  #nextReady(perGroup: number, sharedFree: boolean): string | undefined {
    const full = (group: string) => group !== "" && (this.#runningIn.get(group) ?? 0) >= perGroup;
    for (const [lane, keys] of this.#ready.entries()) {
      if (this.#runningInLane[lane]! >= (this.#o.laneLimits?.[lane] ?? Number.POSITIVE_INFINITY)) continue;
      if (!sharedFree && !this.#o.ownWorkers?.includes(lane)) continue;
      const key = keys.take(full, (k) => {
        const entry = this.#entries.get(k);
        return entry?.state === "ready" && entry.lane === lane;
      });
      if (key !== undefined) return key;
    }
    return undefined;
  }

  /** Runs on the shared workers (those of lanes without workers of their own). */
  #shared(): number {
    let n = 0;
    for (const [lane, count] of this.#runningInLane.entries()) if (!this.#o.ownWorkers?.includes(lane)) n += count;
    return n;
  }

  #pump(): void {
    const { concurrency, perGroup } = this.limits;
    while (!this.#stopped && !this.#paused) {
      const key = this.#nextReady(Math.max(1, perGroup), this.#shared() < Math.max(1, concurrency));
      if (key === undefined) break;
      const entry = this.#entries.get(key)!;
      entry.state = "running";
      entry.attempts += 1;
      entry.ranIn = entry.lane;
      this.#runningInLane[entry.lane]! += 1;
      this.#running++;
      this.#runningIn.set(entry.group, (this.#runningIn.get(entry.group) ?? 0) + 1);
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
    this.#runningInLane[entry.ranIn ?? 0]! -= 1;
    const left = (this.#runningIn.get(entry.group) ?? 1) - 1;
    if (left > 0) this.#runningIn.set(entry.group, left);
    else this.#runningIn.delete(entry.group);
    const next = entry.next;
    entry.next = undefined;
    if (this.#stopped) {
      if (!verdict.done || next) {
        if (next) entry.request = verdict.done ? next.request : this.#o.merge(entry.request, next.request);
        entry.state = "waiting";
      } else this.#entries.delete(key);
    } else if (verdict.done) {
      if (next) {
        const fresh: Entry<R> = {
          request: next.request,
          lane: next.lane,
          attempts: 0,
          state: "ready",
          group: this.#groupOf(next.request),
        };
        this.#entries.set(key, fresh);
        this.#enqueue(key, fresh);
      } else this.#entries.delete(key);
    } else if (next) {
      // A newer request joins the retry and runs at once.
      entry.request = this.#o.merge(entry.request, next.request);
      entry.lane = Math.min(entry.lane, next.lane);
      entry.state = "ready";
      this.#enqueue(key, entry);
    } else {
      entry.state = "waiting";
      entry.parked = verdict.parked === true;
      const wake = new AbortController();
      entry.wake = wake;
      this.#o.clock.sleep(verdict.retryInMs, wake.signal).then(
        () => {
          if (entry.wake !== wake || this.#stopped) return;
          entry.wake = undefined;
          entry.state = "ready";
          this.#enqueue(key, entry);
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
