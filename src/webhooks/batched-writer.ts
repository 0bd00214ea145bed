// Owns group commit for the inbox: writes made in the same turn of the event loop go to the store as one setMany
// (one statement, one transaction), and each caller resolves only once that write is durable.
import type { Table } from "../store/store.ts";

interface Pending<T> {
  value: T;
  ttlMs: number | undefined;
  waiters: { resolve: () => void; reject: (error: unknown) => void }[];
}

export class BatchedWriter<T> {
  readonly #table: Table<T>;
  readonly #maxBatch: number;
  #pending = new Map<string, Pending<T>>();
  #scheduled = false;

  constructor(table: Table<T>, maxBatch = 400) {
    this.#table = table;
    this.#maxBatch = maxBatch;
  }

  /** Resolves when the value is stored; a later write of the same key in the same batch wins. */
  set(key: string, value: T, ttlMs?: number): Promise<void> {
    return new Promise((resolve, reject) => {
      const earlier = this.#pending.get(key);
      const waiters = earlier ? earlier.waiters : [];
      waiters.push({ resolve, reject });
      this.#pending.set(key, { value, ttlMs, waiters });
      if (!this.#scheduled) {
        this.#scheduled = true;
        setImmediate(() => this.#flush());
      }
    });
  }

  #flush(): void {
    this.#scheduled = false;
    const batch = [...this.#pending];
    this.#pending = new Map();
    for (let i = 0; i < batch.length; i += this.#maxBatch) {
      const chunk = batch.slice(i, i + this.#maxBatch);
      const write =
        chunk.length === 1
          ? this.#table.set(chunk[0]![0], chunk[0]![1].value, chunk[0]![1].ttlMs)
          : this.#table.setMany(
              chunk.map(([key, p]) => ({ key, value: p.value, ...(p.ttlMs !== undefined ? { ttlMs: p.ttlMs } : {}) })),
            );
      write.then(
        () => {
          for (const [, p] of chunk) for (const w of p.waiters) w.resolve();
        },
        (error: unknown) => {
          for (const [, p] of chunk) for (const w of p.waiters) w.reject(error);
        },
      );
    }
  }
}

/** Deletes made in the same turn of the event loop go to the store as one deleteMany. */
export class BatchedDeleter {
  readonly #table: Table<unknown>;
  #pending = new Map<string, { resolve: () => void; reject: (error: unknown) => void }[]>();
  #scheduled = false;

  constructor(table: Table<unknown>) {
    this.#table = table;
  }

  delete(key: string): Promise<void> {
    return new Promise((resolve, reject) => {
      const waiters = this.#pending.get(key) ?? [];
      waiters.push({ resolve, reject });
      this.#pending.set(key, waiters);
      if (!this.#scheduled) {
        this.#scheduled = true;
        setImmediate(() => this.#flush());
      }
    });
  }

  #flush(): void {
    this.#scheduled = false;
    const batch = [...this.#pending];
    this.#pending = new Map();
    const keys = batch.map(([k]) => k);
    const done = keys.length === 1 ? this.#table.delete(keys[0]!).then(() => {}) : this.#table.deleteMany(keys);
    done.then(
      () => {
        for (const [, ws] of batch) for (const w of ws) w.resolve();
      },
      (error: unknown) => {
        for (const [, ws] of batch) for (const w of ws) w.reject(error);
      },
    );
  }
}
