// Owns the durable webhook inbox: verified events written before they are acknowledged, duplicate detection, replay at
// start, completion, and dead letters. One table holds both states of an event id: the pending entry, then, once
// processed, a done mark kept for the duplicate window. Accepting is one insert-if-absent (a delivery whose id is
// pending or done is a duplicate) and completing is one overwrite, so each is a single write, batched with others
// by group commit, and there is no moment where an id is neither pending nor done.
import { type Clock, isoFormatter, systemClock } from "../clock.ts";
import type { Store, Table } from "../store/store.ts";
import { BatchedAdder, BatchedWriter } from "./batched-writer.ts";
import { type BookingWebhookEvent, BookingWebhookEventSchema } from "./event.ts";
import { OrderedHandoff } from "./ordered-handoff.ts";

const HOUR_MS = 3_600_000;
/** The sender retries over about 35 hours; principle 6 asks for at least 72. */
export const MIN_SEEN_TTL_MS = 72 * HOUR_MS;
export const DEFAULT_SEEN_TTL_MS = 7 * 24 * HOUR_MS;
/** How long a dead letter is kept by default (`webhooks.dead_letter_days`). */
export const DEFAULT_DEAD_LETTER_TTL_MS = 30 * 24 * HOUR_MS;
/** Longest error text a dead letter keeps. */
const MAX_ERROR_LENGTH = 500;
/** Arrivals one process can number before its order keys would run into the next process's. */
const EPOCH_SPAN = 2 ** 32;
const EPOCH_KEY = "webhooks.inbox_epoch";
/**
 * How long a done mark waits for others before they are stored together. Nobody is answered on a done mark, and until
 * it is stored the event is pending (a duplicate delivery is still recognised; a crash replays it, which the sink
 * absorbs), so lingering costs nothing but this much more time in flight; under load it turns a statement per few
 * events into one per burst (measured: ~10 µs less main-thread CPU per webhook, the server's thread alone under the
 * ingestion benchmark's load).
 */
const DONE_MARK_LINGER_MS = 20;

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
  error?: string;
  eventId?: string;
  type?: string;
  attempts?: number;
  /** Size of the delivered body, for a delivery that could not be read. */
  bytes?: number;
  receivedAt?: string;
}

/**
 * What is kept of an event that could not be processed (or a delivery that could not be read): enough to find it in
 * the sender's delivery log (id, type, size, when) and to know why, never the body, which carries customer details.
 * Kept for `deadLetterTtlMs`, then removed by the store's hourly purge (Redis expires it itself).
 */
export interface DeadLetter {
  reason: string;
  error?: string;
  eventId?: string;
  type?: string;
  attempts?: number;
  bytes?: number;
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
  /** How long dead letters are kept. Default 30 days. */
  deadLetterTtlMs?: number;
}

export type InboxListener = (entry: InboxEntry) => void;

export class WebhookInbox {
  readonly #inbox: Table<InboxRecord>;
  readonly #dead: Table<DeadLetter>;
  readonly #meta: Table<number>;
  readonly #adds: BatchedAdder<InboxRecord>;
  readonly #writes: BatchedWriter<InboxRecord>;
  #epochOnce: Promise<number> | undefined;
  /** The epoch once taken (saves each accept an await). */
  #epochValue: number | undefined;
  readonly #clock: Clock;
  readonly #iso = isoFormatter();
  readonly #seenTtlMs: number;
  readonly #deadLetterTtlMs: number;
  // Accepted entries reach listeners in order of arrival, even when their writes finish out of order.
  readonly #handoff = new OrderedHandoff<InboxEntry>();
  /** Ids accepted or replayed and not yet done, as far as this process knows. */
  readonly #pendingIds = new Set<string>();
  #tracking = true;

  constructor(options: WebhookInboxOptions) {
    this.#inbox = options.store.table<InboxRecord>("inbox");
    this.#dead = options.store.table<DeadLetter>("dead");
    this.#meta = options.store.table<number>("meta");
    this.#adds = new BatchedAdder(this.#inbox);
    this.#writes = new BatchedWriter(this.#inbox, { lingerMs: DONE_MARK_LINGER_MS });
    this.#clock = options.clock ?? systemClock;
    this.#seenTtlMs = options.seenTtlMs ?? DEFAULT_SEEN_TTL_MS;
    this.#deadLetterTtlMs = options.deadLetterTtlMs ?? DEFAULT_DEAD_LETTER_TTL_MS;
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

  /**
   * Whether this process counts what it accepts as pending: only where the inbox is processed (the leader). A standby
   * accepts deliveries the leader processes, and never learns they are done: counted, its inbox_pending only grew
   * (a false backlog alert for a healthy pair) and so did its memory. Off, nothing is counted, and the count is 0.
   */
  trackPending(on: boolean): void {
    this.#tracking = on;
    if (!on) this.#pendingIds.clear();
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
      const epoch = this.#epochValue ?? (await this.#epoch());
      // Two deliveries of one event race to one "accepted" without a lock of their own: the adder answers a second add
      // of a key waiting for the same batch false once the first is stored, and a later batch meets the stored key.
      const fresh: InboxEntry = {
        id: event.id,
        type: event.type,
        receivedAt: this.#iso(this.#clock.now()),
        seq: epoch * EPOCH_SPAN + local,
        attempts: 0,
        event,
      };
      if (!(await this.#adds.add(event.id, fresh))) return "duplicate";
      entry = fresh;
      if (this.#tracking) this.#pendingIds.add(event.id);
      return "accepted";
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
    // Done marks (most of the table: each is kept for the duplicate window) are left out by the store where it can.
    for await (const [, stored] of this.#inbox.entries({ without: "doneAt" })) if (!isDone(stored)) live.push(stored);
    live.sort((a, b) => a.seq - b.seq);
    this.#pendingIds.clear();
    for (const e of live) this.#pendingIds.add(e.id);
    // Done marks linger to share a batch: the unreadable entries' marks are awaited together at the end, not one
    // linger each (a failure is kept and thrown then; a caller that stops early leaves them to be stored anyway).
    const marks: Promise<{ error: unknown } | undefined>[] = [];
    for (const entry of live) {
      let revived: InboxEntry;
      try {
        revived = revive(entry);
      } catch (error) {
        await this.deadLetter(entry.id, {
          reason: "unreadable inbox entry",
          eventId: entry.id,
          ...(typeof entry.type === "string" ? { type: entry.type } : {}),
          error: String(error),
        });
        marks.push(
          this.markDone(entry.id).then(
            () => undefined,
            (error: unknown) => ({ error }),
          ),
        );
        continue;
      }
      yield revived;
    }
    const failed = (await Promise.all(marks)).find((m) => m !== undefined);
    if (failed) throw failed.error;
  }

  /**
   * Counts one more start at which `entry` is handed over (read by `pending()` just before): a write that joins the
   * group commit, so replaying a full inbox after a crash costs a few transactions, not two queries an entry.
   */
  async countReplay(entry: InboxEntry): Promise<void> {
    const { event, ...rest } = entry;
    await this.#writes.set(entry.id, { ...rest, event, attempts: entry.attempts + 1 });
  }

  /**
   * Takes back the start `countReplay` counted for `entry` (as read before it): the sink left it unfinished because the
   * process was stopping, which is no crash, so an event that outlives a few deploys is not set aside as poisonous.
   */
  async uncountReplay(entry: InboxEntry): Promise<void> {
    const { event, ...rest } = entry;
    await this.#writes.set(entry.id, { ...rest, event, attempts: entry.attempts });
  }

  /** Replaces the entry with its done mark: no longer pending, and later deliveries of the id are duplicates. */
  async markDone(id: string): Promise<void> {
    await this.#writes.set(id, { doneAt: this.#iso(this.#clock.now()) }, this.#seenTtlMs);
    this.#pendingIds.delete(id);
  }

  /** For a stop: done marks (and replay counts) are stored without lingering until `settleWrites()` resolves. */
  hurryWrites(): void {
    this.#writes.hurry();
  }

  /**
   * For a stop: resolves once every done mark (and replay count) requested so far is stored or has failed, so the
   * next start does not replay an event that was done; later marks linger again.
   */
  async settleWrites(): Promise<void> {
    this.#writes.hurry();
    try {
      await this.#writes.idle();
    } finally {
      this.#writes.relax();
    }
  }

  /** Keeps what is known of an event that cannot be processed, for `deadLetterTtlMs`; never its body. */
  async deadLetter(key: string, record: DeadLetterInput): Promise<void> {
    const now = new Date(this.#clock.now()).toISOString();
    const letter: DeadLetter = {
      reason: record.reason,
      ...(record.error !== undefined ? { error: record.error.slice(0, MAX_ERROR_LENGTH) } : {}),
      ...(record.eventId !== undefined ? { eventId: record.eventId } : {}),
      ...(record.type !== undefined ? { type: record.type } : {}),
      ...(record.attempts !== undefined ? { attempts: record.attempts } : {}),
      ...(record.bytes !== undefined ? { bytes: record.bytes } : {}),
      receivedAt: record.receivedAt ?? now,
      deadAt: now,
    };
    await this.#dead.set(key, letter, this.#deadLetterTtlMs);
  }

  /**
   * Dead letters written by earlier builds kept the whole body (customer details included) and never expired: each is
   * rewritten without it, to expire `deadLetterTtlMs` after it was written (removed at once when that is past).
   * Answers how many were changed. The sync engine's own entries ("appt:...") are not the inbox's and are left alone.
   */
  async minimiseDeadLetters(): Promise<number> {
    const legacy: [string, DeadLetter & { body?: unknown; encoding?: unknown }][] = [];
    for await (const [key, letter] of this.#dead.entries()) {
      if (key.startsWith("appt:")) continue;
      const held = letter as DeadLetter & { body?: unknown; encoding?: unknown };
      if (held && typeof held === "object" && ("body" in held || "encoding" in held)) legacy.push([key, held]);
    }
    for (const [key, { body, encoding, ...kept }] of legacy) {
      const deadAt = Date.parse(kept.deadAt ?? "");
      const left = (Number.isNaN(deadAt) ? this.#clock.now() : deadAt) + this.#deadLetterTtlMs - this.#clock.now();
      if (left <= 0) await this.#dead.delete(key);
      else await this.#dead.set(key, kept, left);
    }
    return legacy.length;
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
        this.#epochValue = epoch;
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
}

/** Entries written by an older version may lack fields; the event is re-read through the schema. */
function revive(stored: InboxEntry): InboxEntry {
  return { ...stored, attempts: stored.attempts ?? 0, event: BookingWebhookEventSchema.parse(stored.event) };
}
