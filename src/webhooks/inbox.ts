// Owns the durable webhook inbox: verified events written before they are acknowledged, duplicate detection, replay at
// start, completion, and dead letters. One table holds both states of an event id: the pending entry, then, once
// processed, a done mark kept for the duplicate window. Accepting is one insert-if-absent (a delivery whose id is
// pending or done is a duplicate) and completing is one overwrite, so each is a single write, batched with others
// by group commit, and there is no moment where an id is neither pending nor done.
import { isUtf8 } from "node:buffer";
import { type Clock, systemClock } from "../clock.ts";
import type { Store, Table } from "../store/store.ts";
import { BatchedAdder, BatchedWriter } from "./batched-writer.ts";
import { type BookingWebhookEvent, BookingWebhookEventSchema } from "./event.ts";
import { OrderedHandoff } from "./ordered-handoff.ts";

const HOUR_MS = 3_600_000;
/** The sender retries over about 35 hours; principle 6 asks for at least 72. */
export const MIN_SEEN_TTL_MS = 72 * HOUR_MS;
export const DEFAULT_SEEN_TTL_MS = 7 * 24 * HOUR_MS;
/** Arrivals one process can number before its order keys would run into the next process's. */
const EPOCH_SPAN = 2 ** 32;
const EPOCH_KEY = "webhooks.inbox_epoch";

export interface InboxEntry {
  id: string;
  type: string;
  /** ISO 8601, when the delivery was accepted. */
  receivedAt: string;
  /** Order of arrival, across restarts (process epoch, then arrival within the process): the replay order. */
  seq: number;
  /** Failed processing attempts so far (kept across restarts). */
  attempts: number;
  lastError?: string;
  event: BookingWebhookEvent;
}

export interface DeadLetterInput {
  reason: string;
  raw?: Buffer | string;
  error?: string;
  eventId?: string;
  type?: string;
  attempts?: number;
  receivedAt?: string;
}

export interface DeadLetter {
  reason: string;
  error?: string;
  eventId?: string;
  type?: string;
  attempts?: number;
  body: string;
  encoding: "utf8" | "base64";
  receivedAt: string;
  deadAt: string;
}

/** What replaces an entry once it is processed, for the duplicate window (`seenTtlMs`). */
interface DoneMark {
  doneAt: string;
}

type InboxRecord = InboxEntry | DoneMark;

const isDone = (record: InboxRecord): record is DoneMark => "doneAt" in record && !("event" in record);

export interface WebhookInboxOptions {
  store: Store;
  clock?: Clock;
  /** How long processed ids are remembered for duplicate detection; at least 72 hours. Default 7 days. */
  seenTtlMs?: number;
}

export type InboxListener = (entry: InboxEntry) => void;

export class WebhookInbox {
  readonly #inbox: Table<InboxRecord>;
  readonly #dead: Table<DeadLetter>;
  readonly #meta: Table<number>;
  readonly #adds: BatchedAdder<InboxRecord>;
  readonly #writes: BatchedWriter<InboxRecord>;
  #epochOnce: Promise<number> | undefined;
  readonly #clock: Clock;
  readonly #seenTtlMs: number;
  readonly #locks = new Map<string, Promise<unknown>>();
  // Accepted entries reach listeners in order of arrival, even when their writes finish out of order.
  readonly #handoff = new OrderedHandoff<InboxEntry>();
  /** Ids accepted or replayed and not yet done, as far as this process knows. */
  readonly #pendingIds = new Set<string>();

  constructor(options: WebhookInboxOptions) {
    this.#inbox = options.store.table<InboxRecord>("inbox");
    this.#dead = options.store.table<DeadLetter>("dead");
    this.#meta = options.store.table<number>("meta");
    this.#adds = new BatchedAdder(this.#inbox);
    this.#writes = new BatchedWriter(this.#inbox);
    this.#clock = options.clock ?? systemClock;
    this.#seenTtlMs = options.seenTtlMs ?? DEFAULT_SEEN_TTL_MS;
    if (this.#seenTtlMs < MIN_SEEN_TTL_MS) {
      throw new RangeError(
        `seenTtlMs must be at least 72 hours (the sender retries for about 35), got ${this.#seenTtlMs}`,
      );
    }
  }

  /** Events accepted and not yet done, as far as this process knows (exact after `pending()` ran). */
  get pendingCount(): number {
    return this.#pendingIds.size;
  }

  /** Calls `listener` with each newly accepted entry, once it is durable, in order of arrival. */
  subscribe(listener: InboxListener): () => void {
    return this.#handoff.subscribe(listener);
  }

  /** Resolves once every accept started before this call has settled and, if accepted, reached the listeners. */
  handedOff(): Promise<void> {
    return this.#handoff.flushed();
  }

  /**
   * Writes a verified event durably; resolves only once it is stored. Throws when the store fails.
   * `_raw` (the verified bytes) is not stored: the parsed event, with its unknown fields, is.
   */
  async accept(event: BookingWebhookEvent, _raw?: Buffer): Promise<"accepted" | "duplicate"> {
    const local = this.#handoff.ticket();
    let entry: InboxEntry | null = null;
    try {
      const epoch = await this.#epoch();
      return await this.#withLock(event.id, async () => {
        const fresh: InboxEntry = {
          id: event.id,
          type: event.type,
          receivedAt: new Date(this.#clock.now()).toISOString(),
          seq: epoch * EPOCH_SPAN + local,
          attempts: 0,
          event,
        };
        if (!(await this.#adds.add(event.id, fresh))) return "duplicate";
        entry = fresh;
        this.#pendingIds.add(event.id);
        return "accepted";
      });
    } finally {
      this.#handoff.settle(local, entry);
    }
  }

  /** The pending entry of `id`; undefined when there is none (never accepted, or done). */
  async get(id: string): Promise<InboxEntry | undefined> {
    const stored = await this.#inbox.get(id);
    return stored && !isDone(stored) ? revive(stored) : undefined;
  }

  /** Every entry left in the inbox (accepted, not done), oldest first. */
  async *pending(): AsyncIterable<InboxEntry> {
    // Snapshot first: the table pages with OFFSET, and entries change while the caller works.
    const live: InboxEntry[] = [];
    for await (const [, stored] of this.#inbox.entries()) if (!isDone(stored)) live.push(stored);
    live.sort((a, b) => a.seq - b.seq);
    this.#pendingIds.clear();
    for (const e of live) this.#pendingIds.add(e.id);
    for (const entry of live) {
      let revived: InboxEntry;
      try {
        revived = revive(entry);
      } catch (error) {
        await this.deadLetter(entry.id, {
          reason: "unreadable inbox entry",
          raw: JSON.stringify(entry),
          error: String(error),
        });
        await this.markDone(entry.id);
        continue;
      }
      yield revived;
    }
  }

  /** Keeps the failure count across restarts, so a poisonous event is not retried forever. */
  async recordFailure(id: string, attempts: number, error: string): Promise<void> {
    const stored = await this.#inbox.get(id);
    if (stored && !isDone(stored)) await this.#inbox.set(id, { ...stored, attempts, lastError: error.slice(0, 2000) });
  }

  /** Replaces the entry with its done mark: no longer pending, and later deliveries of the id are duplicates. */
  async markDone(id: string): Promise<void> {
    await this.#writes.set(id, { doneAt: new Date(this.#clock.now()).toISOString() }, this.#seenTtlMs);
    this.#pendingIds.delete(id);
  }

  async deadLetter(key: string, record: DeadLetterInput): Promise<void> {
    const now = new Date(this.#clock.now()).toISOString();
    const { raw, ...rest } = record;
    const bytes = raw === undefined ? Buffer.alloc(0) : Buffer.isBuffer(raw) ? raw : Buffer.from(raw, "utf8");
    const utf8 = isUtf8(bytes);
    await this.#dead.set(key, {
      ...rest,
      body: bytes.toString(utf8 ? "utf8" : "base64"),
      encoding: utf8 ? "utf8" : "base64",
      receivedAt: record.receivedAt ?? now,
      deadAt: now,
    });
  }

  /** The dead letters, for operators and tests. */
  deadLetters(): AsyncIterable<[string, DeadLetter]> {
    return this.#dead.entries();
  }

  /** A number taken once per process, so arrival order survives restarts without trusting the wall clock. */
  #epoch(): Promise<number> {
    if (!this.#epochOnce) {
      const once = (async () => {
        const epoch = ((await this.#meta.get(EPOCH_KEY)) ?? 0) + 1;
        await this.#meta.set(EPOCH_KEY, epoch);
        return epoch;
      })();
      // A store failure is retried by the next accept.
      once.catch(() => {
        if (this.#epochOnce === once) this.#epochOnce = undefined;
      });
      this.#epochOnce = once;
    }
    return this.#epochOnce;
  }

  /** Runs `fn` after every earlier call for the same id: two deliveries of one event race to one "accepted". */
  async #withLock<T>(id: string, fn: () => Promise<T>): Promise<T> {
    const previous = this.#locks.get(id) ?? Promise.resolve();
    const run = previous.then(fn, fn);
    const tail = run.catch(() => undefined);
    this.#locks.set(id, tail);
    try {
      return await run;
    } finally {
      if (this.#locks.get(id) === tail) this.#locks.delete(id);
    }
  }
}

/** Entries written by an older version may lack fields; the event is re-read through the schema. */
function revive(stored: InboxEntry): InboxEntry {
  return { ...stored, attempts: stored.attempts ?? 0, event: BookingWebhookEventSchema.parse(stored.event) };
}
