// Owns keyed scheduling: items of one key run one at a time in the order pushed, different keys run in parallel up
// to a limit, and a key waiting to retry holds no slot (controller-runtime's work queue, in small).

/** What a run tells the queue: finished with this item, or try the same item again once `retryAfter` settles. */
export type RunResult = { done: true } | { done: false; retryAfter: Promise<void> };

interface Waiter {
  when: () => boolean;
  resolve: () => void;
}

export interface KeyedQueueOptions<T> {
  concurrency: number;
  /** Must not throw; a throw counts as done, so one broken item cannot stall its key. */
  run: (item: T) => Promise<RunResult>;
}

export class KeyedQueue<T> {
  readonly #concurrency: number;
  readonly #run: (item: T) => Promise<RunResult>;
  /** Per key, its items in order; the head is the one running or waiting to retry. */
  readonly #queues = new Map<string, T[]>();
  readonly #ready: string[] = [];
  #running = 0;
  #stopped = false;
  #pumpScheduled = false;
  #waiters: Waiter[] = [];

  constructor(options: KeyedQueueOptions<T>) {
    if (!(options.concurrency >= 1)) throw new RangeError(`concurrency must be at least 1, got ${options.concurrency}`);
    this.#concurrency = options.concurrency;
    this.#run = options.run;
  }

  /** Items queued, running or waiting to retry. */
  get size(): number {
    let n = 0;
    for (const items of this.#queues.values()) n += items.length;
    return n;
  }

  get running(): number {
    return this.#running;
  }

  push(key: string, item: T): void {
    const items = this.#queues.get(key);
    if (items) {
      items.push(item);
      return;
    }
    this.#queues.set(key, [item]);
    this.#ready.push(key);
    // Started on the next turn: the caller (an HTTP answer) finishes first, and a burst is taken in one go.
    if (!this.#pumpScheduled) {
      this.#pumpScheduled = true;
      setImmediate(() => {
        this.#pumpScheduled = false;
        this.#pump();
      });
    }
  }

  /** Resolves when nothing is queued, running or waiting to retry. */
  idle(): Promise<void> {
    return this.#until(() => this.#queues.size === 0 && this.#running === 0);
  }

  /** Starts nothing new from now on; resolves when the runs in flight have finished. */
  stop(): Promise<void> {
    this.#stopped = true;
    return this.#until(() => this.#running === 0);
  }

  #pump(): void {
    while (!this.#stopped && this.#running < this.#concurrency && this.#ready.length > 0) {
      const key = this.#ready.shift()!;
      const item = this.#queues.get(key)?.[0];
      if (item === undefined) continue;
      this.#running++;
      void this.#runOne(key, item);
    }
    this.#notify();
  }

  async #runOne(key: string, item: T): Promise<void> {
    let result: RunResult;
    try {
      result = await this.#run(item);
    } catch {
      result = { done: true };
    }
    this.#running--;
    if (result.done) {
      const items = this.#queues.get(key)!;
      items.shift();
      if (items.length > 0) this.#ready.push(key);
      else this.#queues.delete(key);
    } else {
      const wake = () => {
        if (this.#stopped) return;
        this.#ready.push(key);
        this.#pump();
      };
      result.retryAfter.then(wake, wake);
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
