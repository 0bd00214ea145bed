// Owns the sync dead letters: one record per appointment whose sync failed for good (a permanent error, or the attempt
// budget spent), cleared by its next success; and their count for metrics and /status.
import type { Clock } from "../clock.ts";
import type { Store, Table } from "../store/store.ts";
import type { SyncMetrics } from "./metrics.ts";

export interface DeadLetter {
  /** `appt:<appointment id>`, or `customer:<customer id>` for a customer's re-render. */
  key: string;
  error: string;
  attempts: number;
  firstAt: number;
  lastAt: number;
  reason: string;
  final: true;
}

export class DeadLetters {
  readonly #table: Table<DeadLetter>;
  readonly #clock: Clock;
  readonly #metrics: SyncMetrics;
  #count = 0;

  constructor(store: Store, clock: Clock, metrics: SyncMetrics) {
    this.#table = store.table<DeadLetter>("dead");
    this.#clock = clock;
    this.#metrics = metrics;
  }

  get count(): number {
    return this.#count;
  }

  /** The dead letter of `appt:<id>` or `customer:<id>`. */
  get(key: string): Promise<DeadLetter | undefined> {
    return this.#table.get(key);
  }

  async record(entry: { key: string; error: string; attempts: number; firstAt: number; reason: string }) {
    const prev = await this.#table.get(entry.key);
    await this.#table.set(entry.key, {
      ...entry,
      firstAt: prev?.firstAt ?? entry.firstAt,
      lastAt: this.#clock.now(),
      final: true,
    });
    if (!prev) this.#set(this.#count + 1);
  }

  async clear(key: string): Promise<void> {
    if (this.#count === 0) return;
    if (await this.#table.delete(key)) this.#set(Math.max(0, this.#count - 1));
  }

  /** Reads the count from the store (at start). */
  async load(): Promise<number> {
    let n = 0;
    for await (const [key] of this.#table.entries()) if (key.startsWith("appt:") || key.startsWith("customer:")) n++;
    this.#set(n);
    return n;
  }

  #set(n: number): void {
    this.#count = n;
    this.#metrics.deadLetters.set(n);
  }
}
