// Owns read batching for the inbox's duplicate checks: point reads made in the same turn of the event loop go to
// the store as one getMany (one statement instead of one per delivery under load).
import type { Table } from "../store/store.ts";

interface Waiter<T> {
  resolve: (value: T | undefined) => void;
  reject: (error: unknown) => void;
}

export class BatchedReader<T> {
  readonly #table: Table<T>;
  readonly #maxBatch: number;
  #waiting = new Map<string, Waiter<T>[]>();
  #scheduled = false;

  constructor(table: Table<T>, maxBatch = 500) {
    this.#table = table;
    this.#maxBatch = maxBatch;
  }

  get(key: string): Promise<T | undefined> {
    return new Promise((resolve, reject) => {
      const waiters = this.#waiting.get(key);
      if (waiters) waiters.push({ resolve, reject });
      else this.#waiting.set(key, [{ resolve, reject }]);
      if (!this.#scheduled) {
        this.#scheduled = true;
        setImmediate(() => this.#flush());
      }
    });
  }

  #flush(): void {
    this.#scheduled = false;
    const batch = this.#waiting;
    this.#waiting = new Map();
    const keys = [...batch.keys()];
    for (let i = 0; i < keys.length; i += this.#maxBatch) {
      const chunk = keys.slice(i, i + this.#maxBatch);
      const read = chunk.length === 1 ? this.#table.get(chunk[0]!).then((v) => [v]) : this.#table.getMany(chunk);
      read.then(
        (values) => {
          for (const [j, key] of chunk.entries()) for (const w of batch.get(key) ?? []) w.resolve(values[j]);
        },
        (error: unknown) => {
          for (const key of chunk) for (const w of batch.get(key) ?? []) w.reject(error);
        },
      );
    }
  }
}
