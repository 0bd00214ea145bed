// Owns group commit for the inbox: writes requested while the previous batch is being stored, or in the same turn of
// the event loop, go to the store together (one statement, one transaction on SQLite). Each caller resolves only
// once its own write is durable. At most one batch per writer is in flight, so under load batches grow instead of
// queueing many small transactions that SQLite would run one at a time anyway. A writer whose callers are not waiting
// to answer anyone (done marks) may also linger: its batch is stored a few milliseconds after its first write, or at
// once when full, so a burst's writes share one statement. An entry that can never be stored (the store names it: a
// value its serializer refuses) fails alone, and the rest of its batch is stored; a failure of the store itself fails
// what was not stored yet of the batch, as every entry of it would meet it.
import { type Table, UnstorableValueError } from "../store/store.ts";

interface Waiter<R> {
  resolve: (result: R) => void;
  reject: (error: unknown) => void;
}

/** What became of one entry of a batch. */
type Outcome<R> = { ok: true; value: R } | { ok: false; error: unknown };

/** Requests by key, stored a batch at a time by `store`, which answers one outcome per key of the batch. */
class GroupCommit<V, R> {
  readonly #store: (batch: [string, V][]) => Promise<Outcome<R>[]>;
  readonly #lingerMs: number;
  readonly #fullAt: number;
  #hurried = false;
  #idleWaiters: (() => void)[] = [];
  #pending = new Map<string, { value: V; waiters: Waiter<R>[] }>();
  #scheduled: { timer: NodeJS.Timeout } | { immediate: NodeJS.Immediate } | undefined;
  #inFlight = false;

  constructor(store: (batch: [string, V][]) => Promise<Outcome<R>[]>, lingerMs = 0, fullAt = Number.POSITIVE_INFINITY) {
    this.#store = store;
    this.#lingerMs = lingerMs;
    this.#fullAt = fullAt;
  }

  /** Queues `value` for `key`; a request for a key already waiting replaces its value and shares its result. */
  submit(key: string, value: V): Promise<R> {
    return new Promise((resolve, reject) => {
      const waiters = this.#pending.get(key)?.waiters ?? [];
      waiters.push({ resolve, reject });
      this.#pending.set(key, { value, waiters });
      this.#schedule();
    });
  }

  /** The result of the request for `key` waiting for the next batch, without changing it; undefined when none waits. */
  join(key: string): Promise<R> | undefined {
    const pending = this.#pending.get(key);
    if (!pending) return undefined;
    return new Promise((resolve, reject) => pending.waiters.push({ resolve, reject }));
  }

  /** Stores without lingering until `relax()`, beginning with the batch waiting now. */
  hurry(): void {
    if (this.#hurried) return;
    this.#hurried = true;
    if (this.#scheduled && "timer" in this.#scheduled) {
      this.#cancelScheduled();
      this.#schedule();
    }
  }

  relax(): void {
    this.#hurried = false;
  }

  /** Resolves once nothing waits and no batch is in flight (whatever their outcome). */
  async idle(): Promise<void> {
    while (this.#inFlight || this.#pending.size > 0) await new Promise<void>((r) => this.#idleWaiters.push(r));
  }

  /**
   * Stores the waiting batch on the next turn of the event loop, or `lingerMs` after it started waiting, or at once
   * when it is full; never while the previous batch is in flight (its end schedules the next).
   */
  #schedule(): void {
    if (this.#inFlight || this.#pending.size === 0) return;
    if (this.#pending.size >= this.#fullAt) {
      this.#cancelScheduled();
      void this.#flush();
      return;
    }
    if (this.#scheduled) return;
    this.#scheduled =
      this.#lingerMs > 0 && !this.#hurried
        ? { timer: setTimeout(() => this.#flushScheduled(), this.#lingerMs) }
        : { immediate: setImmediate(() => this.#flushScheduled()) };
  }

  #flushScheduled(): void {
    this.#scheduled = undefined;
    void this.#flush();
  }

  #cancelScheduled(): void {
    const scheduled = this.#scheduled;
    if (scheduled === undefined) return;
    if ("timer" in scheduled) clearTimeout(scheduled.timer);
    else clearImmediate(scheduled.immediate);
    this.#scheduled = undefined;
  }

  async #flush(): Promise<void> {
    const batch = [...this.#pending];
    this.#pending = new Map();
    this.#inFlight = true;
    try {
      const outcomes = await this.#store(batch.map(([key, p]) => [key, p.value]));
      for (const [i, [, p]] of batch.entries()) {
        const outcome = outcomes[i]!;
        for (const w of p.waiters) {
          if (outcome.ok) w.resolve(outcome.value);
          else w.reject(outcome.error);
        }
      }
    } catch (error) {
      for (const [, p] of batch) for (const w of p.waiters) w.reject(error);
    } finally {
      this.#inFlight = false;
      this.#schedule();
      for (const wake of this.#idleWaiters.splice(0)) wake();
    }
  }
}

type Entry<T> = { value: T; ttlMs: number | undefined };

function entriesOf<T>(chunk: [string, Entry<T>][]): { key: string; value: T; ttlMs?: number }[] {
  return chunk.map(([key, { value, ttlMs }]) => (ttlMs === undefined ? { key, value } : { key, value, ttlMs }));
}

/**
 * Writes `items` with `write` in slices of `size`, one after the other. Within a slice, entries the store names as
 * unstorable fail on their own and the others are written in one more call (nothing of a slice is written when its
 * values do not all serialize); any other error, also on that one more call, fails that slice and those after it,
 * while the slices already written succeed: their callers must not be told "not stored" (a webhook answered 503
 * although stored is retried by its sender, found stored, answered "duplicate", and never processed).
 */
async function inChunks<V, R>(
  items: [string, V][],
  size: number,
  write: (chunk: [string, V][]) => Promise<R[]>,
): Promise<Outcome<R>[]> {
  const out: Outcome<R>[] = [];
  for (let i = 0; i < items.length; i += size) {
    const chunk = items.slice(i, i + size);
    try {
      for (const value of await write(chunk)) out.push({ ok: true, value });
    } catch (error) {
      const bad = error instanceof UnstorableValueError ? new Set(error.keys) : undefined;
      if (!bad || !chunk.some(([key]) => bad.has(key))) {
        if (i === 0) throw error;
        for (let rest = i; rest < items.length; rest++) out.push({ ok: false, error });
        return out;
      }
      const rest = chunk.filter(([key]) => !bad.has(key));
      let written: R[];
      try {
        written = rest.length > 0 ? await write(rest) : [];
      } catch (failure) {
        // The store failed on the retry: as above, this slice and those after it fail with it, and the slices already
        // written still succeed (thrown, it would fail every caller of the batch). The unstorable entries keep their
        // own error, true whatever the store's state (the route sets them aside instead of answering 503 to be sent
        // again), so even a failure of the first slice is answered entry by entry rather than thrown.
        for (const [key] of chunk) out.push({ ok: false, error: bad.has(key) ? error : failure });
        for (let later = i + chunk.length; later < items.length; later++) out.push({ ok: false, error: failure });
        return out;
      }
      let next = 0;
      for (const [key] of chunk) out.push(bad.has(key) ? { ok: false, error } : { ok: true, value: written[next++]! });
    }
  }
  return out;
}

export interface BatchedWriterOptions {
  /** Entries per statement (default 400). */
  maxBatch?: number;
  /**
   * How long a batch waits for more writes after its first one (default 0: the next turn of the event loop). Only for
   * writes nobody answers on: each caller waits this much longer.
   */
  lingerMs?: number;
}

export class BatchedWriter<T> {
  readonly #commit: GroupCommit<Entry<T>, undefined>;

  constructor(table: Table<T>, options: BatchedWriterOptions = {}) {
    const maxBatch = options.maxBatch ?? 400;
    this.#commit = new GroupCommit(
      (batch) =>
        inChunks(batch, maxBatch, async (chunk) => {
          if (chunk.length === 1) await table.set(chunk[0]![0], chunk[0]![1].value, chunk[0]![1].ttlMs);
          else await table.setMany(entriesOf(chunk));
          return chunk.map(() => undefined);
        }),
      options.lingerMs ?? 0,
      maxBatch,
    );
  }

  /** Resolves when the value is stored; a later write of the same key in the same batch wins. */
  set(key: string, value: T, ttlMs?: number): Promise<undefined> {
    return this.#commit.submit(key, { value, ttlMs });
  }

  /** Stops lingering until `relax()` (a stop): what waits is stored now, and later writes on the next turn. */
  hurry(): void {
    this.#commit.hurry();
  }

  /** Lingers again (after `hurry()`). */
  relax(): void {
    this.#commit.relax();
  }

  /** Resolves once every write made so far has been stored or has failed. */
  idle(): Promise<void> {
    return this.#commit.idle();
  }
}

/** Insert-if-absent (Table.addMany) under group commit. */
export class BatchedAdder<T> {
  readonly #commit: GroupCommit<Entry<T>, boolean>;

  constructor(table: Table<T>, maxBatch = 400) {
    this.#commit = new GroupCommit((batch) => inChunks(batch, maxBatch, (chunk) => table.addMany(entriesOf(chunk))));
  }

  /**
   * Resolves true when the value was stored because the key was absent (or expired), false when the key was taken.
   * Of two adds of one key waiting for the same batch, the second writes nothing: it is answered false once the first
   * is stored, and fails with it when the store fails (it must not be reported as taken when nothing was stored).
   */
  add(key: string, value: T, ttlMs?: number): Promise<boolean> {
    const earlier = this.#commit.join(key);
    if (earlier) return earlier.then(() => false);
    return this.#commit.submit(key, { value, ttlMs });
  }
}
