// Owns where appointment histories are kept: one store entry per appointment (its entries, oldest first), appended to
// in batches off the sync path, pruned to the retention period and a bound per appointment, expiring with the last
// entry; and the short list of appointments with recent entries that /status links.
import type { Clock } from "../clock.ts";
import { type Logger, silentLogger } from "../log.ts";
import type { Store, Table } from "../store/store.ts";
import { describeError } from "./errors.ts";
import type { HistoryEntry } from "./history-entry.ts";

/** What the store keeps per appointment. */
export interface StoredHistory {
  entries: HistoryEntry[];
  /** Older entries dropped to keep within the bound per appointment. */
  dropped?: number;
}

/** An appointment with a recent entry: the newest entry's time, what it was, who caused it. */
export interface RecentHistory {
  appointmentId: string;
  at: string;
  kind: HistoryEntry["kind"];
  origin: HistoryEntry["origin"];
}

export interface HistoryLogOptions {
  store: Store;
  clock: Clock;
  /** How long an entry is kept. */
  retentionMs: number;
  /** Entries kept per appointment at most (the oldest go first). */
  maxEntries: number;
  logger?: Logger;
}

/** Appointments listed as recent. */
export const RECENT = 20;
/** How long entries gather before they are stored together, unless BATCH of them wait already. */
const LINGER_MS = 1_000;
const BATCH = 1_000;
/** Entries waiting for the store at most (the store failing for long): later ones are dropped and counted. */
const MAX_PENDING = 50_000;
const RECENT_KEY = "history_recent";
const RETRY_MS = [1_000, 5_000, 30_000, 60_000];

export class HistoryLog {
  readonly #table: Table<StoredHistory>;
  readonly #meta: Table<RecentHistory[]>;
  readonly #clock: Clock;
  readonly #logger: Logger;
  readonly retentionMs: number;
  readonly #maxEntries: number;
  #pending = new Map<string, HistoryEntry[]>();
  #pendingCount = 0;
  #dropped = 0;
  /** Newest last; an appointment appears once. */
  #recent = new Map<string, RecentHistory>();
  #recentChanged = false;
  #timer: NodeJS.Timeout | undefined;
  #inFlight: Promise<void> | undefined;
  /** Batches that failed in a row (the next waits longer). */
  #failures = 0;

  constructor(o: HistoryLogOptions) {
    this.#table = o.store.table<StoredHistory>("history");
    this.#meta = o.store.table<RecentHistory[]>("meta");
    this.#clock = o.clock;
    this.#logger = o.logger ?? silentLogger;
    this.retentionMs = o.retentionMs;
    this.#maxEntries = o.maxEntries;
  }

  /** Queues an entry; it is stored with the next batch (within about a second). Never throws. */
  append(appointmentId: string, entry: HistoryEntry): void {
    if (this.#pendingCount >= MAX_PENDING) {
      if (this.#dropped++ === 0) {
        this.#logger.error({ pending: this.#pendingCount }, "history entries are not being stored; new ones dropped");
      }
      return;
    }
    const list = this.#pending.get(appointmentId);
    if (list) list.push(entry);
    else this.#pending.set(appointmentId, [entry]);
    this.#pendingCount++;
    this.#recent.delete(appointmentId);
    this.#recent.set(appointmentId, { appointmentId, at: entry.at, kind: entry.kind, origin: entry.origin });
    if (this.#recent.size > RECENT) this.#recent.delete(this.#recent.keys().next().value!);
    this.#recentChanged = true;
    if (this.#inFlight) return;
    if (!this.#timer) this.#arm(LINGER_MS);
    else if (this.#pendingCount === BATCH && this.#failures === 0) this.#arm(0);
  }

  /** One appointment's history within the retention period, oldest first (entries still queued included). */
  async read(appointmentId: string): Promise<StoredHistory> {
    const stored = await this.#table.get(appointmentId);
    const merged = this.#merge(valid(stored), this.#pending.get(appointmentId) ?? []);
    return merged;
  }

  /** Appointments with the newest entries, newest first. */
  recent(): RecentHistory[] {
    return [...this.#recent.values()].reverse();
  }

  /** Reads the recent list another process (the leader, an earlier run) stored, unless this one has its own news. */
  async loadRecent(): Promise<void> {
    if (this.#recentChanged || this.#pendingCount > 0) return;
    const stored = await this.#meta.get(RECENT_KEY);
    if (!Array.isArray(stored) || this.#recentChanged) return;
    this.#recent = new Map(
      stored
        .slice(0, RECENT)
        .reverse()
        .map((r) => [r.appointmentId, r]),
    );
  }

  /** Stores everything queued so far (one attempt, even while a retry waits); for a stop, and for tests. */
  async flush(): Promise<void> {
    this.#disarm();
    while (this.#inFlight) await this.#inFlight;
    if (this.#pendingCount > 0 || this.#recentChanged) await this.#run();
  }

  /** Stores what is queued and stops retrying; what could not be stored is reported. */
  async close(): Promise<void> {
    await this.flush();
    this.#disarm();
    if (this.#pendingCount > 0 || this.#dropped > 0) {
      this.#logger.warn({ lost: this.#pendingCount + this.#dropped }, "history entries not stored before the stop");
    }
  }

  #arm(ms: number): void {
    this.#disarm();
    this.#timer = setTimeout(() => {
      this.#timer = undefined;
      void this.#run();
    }, ms);
    this.#timer.unref();
  }

  #disarm(): void {
    clearTimeout(this.#timer);
    this.#timer = undefined;
  }

  /** One batch at a time; what comes meanwhile, or stays after a failure, goes with a later one. */
  #run(): Promise<void> {
    if (this.#inFlight) return this.#inFlight;
    const run = this.#store().finally(() => {
      this.#inFlight = undefined;
      if (this.#timer || (this.#pendingCount === 0 && !this.#recentChanged)) return;
      const retry = RETRY_MS[Math.min(this.#failures, RETRY_MS.length) - 1];
      this.#arm(retry ?? (this.#pendingCount >= BATCH ? 0 : LINGER_MS));
    });
    this.#inFlight = run;
    return run;
  }

  /** One batch: what is queued now, appended to what the store holds (one read and one write for all of it). */
  async #store(): Promise<void> {
    const batch = this.#pending;
    const recentChanged = this.#recentChanged;
    this.#pending = new Map();
    this.#pendingCount = 0;
    this.#recentChanged = false;
    try {
      const ids = [...batch.keys()];
      const stored = await this.#table.getMany(ids);
      await this.#table.setMany(
        ids.map((id, i) => ({
          key: id,
          value: this.#merge(valid(stored[i]), batch.get(id)!),
          ttlMs: this.retentionMs,
        })),
      );
      if (recentChanged) await this.#meta.set(RECENT_KEY, this.recent());
      this.#failures = 0;
    } catch (err) {
      // Put back in front of what came meanwhile, and try again later: the store may be restarting.
      for (const [id, entries] of this.#pending) batch.set(id, [...(batch.get(id) ?? []), ...entries]);
      this.#pending = batch;
      this.#pendingCount = [...batch.values()].reduce((n, e) => n + e.length, 0);
      this.#recentChanged ||= recentChanged;
      if (this.#failures++ === 0) {
        this.#logger.warn({ err: describeError(err), pending: this.#pendingCount }, "history not stored; retrying");
      }
    }
  }

  /** `more` after `held`, within the retention period and the bound; a repeat of the last entry is counted in it. */
  #merge(held: StoredHistory, more: HistoryEntry[]): StoredHistory {
    const since = this.#clock.now() - this.retentionMs;
    const entries = held.entries.filter((e) => Date.parse(e.lastAt ?? e.at) >= since);
    for (const e of more) {
      const last = entries.at(-1);
      if (last && sameStep(last, e))
        entries[entries.length - 1] = { ...last, repeats: (last.repeats ?? 1) + 1, lastAt: e.at };
      else entries.push(e);
    }
    const over = Math.max(0, entries.length - this.#maxEntries);
    const dropped = (held.dropped ?? 0) + over;
    return { entries: entries.slice(over), ...(dropped > 0 ? { dropped } : {}) };
  }
}

/** What the store held, or nothing when it is not a history (written by something else, or damaged). */
function valid(stored: StoredHistory | undefined): StoredHistory {
  return stored && Array.isArray(stored.entries) ? stored : { entries: [] };
}

/** The same decision taken again (a failing sync retried by every reconciliation): counted, not listed again. */
function sameStep(a: HistoryEntry, b: HistoryEntry): boolean {
  const { at: _a, lastAt: _la, repeats: _ra, ...restA } = a;
  const { at: _b, lastAt: _lb, repeats: _rb, ...restB } = b;
  return JSON.stringify(restA) === JSON.stringify(restB);
}
