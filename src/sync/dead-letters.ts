// Owns the sync dead letters: one record per appointment whose sync failed for good (a permanent error, or the attempt
// budget spent), cleared by its next success or expired once the appointment has left the sync window; and their
// count for metrics and /status.
import type { Clock } from "../clock.ts";
import type { Logger } from "../log.ts";
import type { Store, Table } from "../store/store.ts";
import { describeError } from "./errors.ts";
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

const DAY = 86_400_000;
/** Past the end of the window, as links (src/sync/links.ts): then the appointment is not synced any more. */
const MARGIN_DAYS = 2;

export class DeadLetters {
  readonly #table: Table<DeadLetter>;
  readonly #clock: Clock;
  readonly #metrics: SyncMetrics;
  readonly #window: () => { past_days: number; future_days: number };
  #count = 0;
  #loaded = false;

  constructor(
    store: Store,
    clock: Clock,
    metrics: SyncMetrics,
    /** The sync window as it is now (a reload changes it). */
    window: () => { past_days: number; future_days: number } = () => ({ past_days: 7, future_days: 90 }),
  ) {
    this.#table = store.table<DeadLetter>("dead");
    this.#clock = clock;
    this.#metrics = metrics;
    this.#window = window;
  }

  get count(): number {
    return this.#count;
  }

  /** The dead letter of `appt:<id>` or `customer:<id>`. */
  get(key: string): Promise<DeadLetter | undefined> {
    return this.#table.get(key);
  }

  /**
   * Records a failure for good. It expires when its appointment leaves the sync window: `endsAt` (the appointment's
   * end, when known) plus the window's past days and a margin; without it, a whole window's length from now.
   */
  async record(entry: {
    key: string;
    error: string;
    attempts: number;
    firstAt: number;
    reason: string;
    endsAt?: number | undefined;
  }) {
    const { endsAt, ...fields } = entry;
    const prev = await this.#table.get(entry.key);
    const now = this.#clock.now();
    const { past_days: past, future_days: future } = this.#window();
    const expiry =
      endsAt !== undefined && Number.isFinite(endsAt)
        ? endsAt + (past + MARGIN_DAYS) * DAY
        : now + (past + future + MARGIN_DAYS) * DAY;
    await this.#table.set(
      entry.key,
      { ...fields, firstAt: prev?.firstAt ?? entry.firstAt, lastAt: now, final: true },
      Math.max(DAY, expiry - now),
    );
    if (!prev) this.#set(this.#count + 1);
  }

  async clear(key: string): Promise<void> {
    // Known to be none (counted at start): no delete per successful sync. Not counted (a one-shot command, which never
    // starts), an earlier process's dead letter may be there: a success clears it.
    if (this.#loaded && this.#count === 0) return;
    if (await this.#table.delete(key)) this.#set(Math.max(0, this.#count - 1));
  }

  /** Clears the dead letters among `keys` (one listing of the table, which holds few; none when it is known empty). */
  async clearMany(keys: readonly string[]): Promise<void> {
    if ((this.#loaded && this.#count === 0) || keys.length === 0) return;
    const wanted = new Set(keys);
    const found: string[] = [];
    for await (const [key] of this.#table.entries()) if (wanted.has(key)) found.push(key);
    for (const key of found) await this.clear(key);
  }

  /** After a success: the key's dead letter, if any, cleared; a store failure is only logged (the success stands). */
  async cleared(key: string, log: Logger): Promise<void> {
    await this.clear(key).catch((e: unknown) => log.warn({ err: describeError(e) }, "dead letter not cleared"));
  }

  /** Reads the count from the store (at start, and after the hourly purge removed expired ones). */
  async load(): Promise<number> {
    let n = 0;
    for await (const [key] of this.#table.entries()) if (key.startsWith("appt:") || key.startsWith("customer:")) n++;
    this.#set(n);
    this.#loaded = true;
    return n;
  }

  #set(n: number): void {
    this.#count = n;
    this.#metrics.deadLetters.set(n);
  }
}
