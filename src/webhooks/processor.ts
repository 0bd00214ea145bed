// Owns processing of inbox entries: replay at start, then new arrivals; per appointment one at a time and in order
// of arrival; dispatch by event type to the sink; retries with backoff, then dead letters; a child logger per event.
import type { Registry } from "prom-client";
import { type Clock, systemClock } from "../clock.ts";
import { type Logger, silentLogger } from "../log.ts";
import { APPOINTMENT_TYPES, appointmentIdOf, type BookingWebhookEvent, kindOf, orderingKeyOf } from "./event.ts";
import type { InboxEntry, WebhookInbox } from "./inbox.ts";
import { KeyedQueue, type RunResult } from "./keyed-queue.ts";
import { type WebhookMetrics, webhookMetrics } from "./metrics.ts";

/** Where processed events go (the sync engine). Both calls must be idempotent: an event may come twice. */
export interface EventSink {
  /** appointment.created/updated/cancelled/completed/no_show: the payload is a hint, not the state. */
  appointment(event: BookingWebhookEvent, log: Logger): Promise<void>;
  customerUpdated(event: BookingWebhookEvent, log: Logger): Promise<void>;
}

export interface InboxProcessorOptions {
  inbox: WebhookInbox;
  sink: EventSink;
  logger?: Logger;
  clock?: Clock;
  registry?: Registry;
  /** Sink calls at once, over different appointments (default 4). */
  concurrency?: number;
  /** Attempts before an event goes to the dead letters (default 8). */
  maxAttempts?: number;
  /** Wait before the next attempt, after `attempt` failures (default: 1 s doubling, at most 5 min, ±20%). */
  retryDelayMs?: (attempt: number) => number;
  /** How long `stop()` waits for sink calls in flight (default 10 s). */
  stopTimeoutMs?: number;
}

export function defaultRetryDelayMs(attempt: number): number {
  const base = Math.min(300_000, 1000 * 2 ** Math.max(0, attempt - 1));
  return Math.round(base * (0.8 + 0.4 * Math.random()));
}

const KNOWN_TYPES = new Set<string>([...APPOINTMENT_TYPES, "customer.updated"]);
const RECENT_LIMIT = 10_000;

export class InboxProcessor {
  readonly #inbox: WebhookInbox;
  readonly #sink: EventSink;
  readonly #logger: Logger;
  readonly #clock: Clock;
  readonly #metrics: WebhookMetrics;
  readonly #maxAttempts: number;
  readonly #retryDelayMs: (attempt: number) => number;
  readonly #stopTimeoutMs: number;
  readonly #queue: KeyedQueue<InboxEntry>;
  readonly #abort = new AbortController();
  /** Ids queued or in flight here. */
  readonly #known = new Set<string>();
  /** Ids finished here lately, so a late hint does not run them twice. */
  readonly #recent = new Set<string>();
  readonly #warnedTypes = new Set<string>();
  /** Completion marks on their way to the store (retried until stored, or until the processor stops). */
  readonly #marking = new Set<Promise<void>>();
  /** Ids processed here whose done mark is not stored yet: not to be taken again meanwhile. */
  readonly #unmarked = new Set<string>();
  #unsubscribe: (() => void) | undefined;
  #state: "new" | "running" | "stopped" = "new";

  constructor(options: InboxProcessorOptions) {
    this.#inbox = options.inbox;
    this.#sink = options.sink;
    this.#logger = (options.logger ?? silentLogger).child({ component: "webhooks" });
    this.#clock = options.clock ?? systemClock;
    this.#metrics = webhookMetrics(options.registry);
    this.#metrics.watchPending(options.inbox);
    this.#maxAttempts = options.maxAttempts ?? 8;
    this.#retryDelayMs = options.retryDelayMs ?? defaultRetryDelayMs;
    this.#stopTimeoutMs = options.stopTimeoutMs ?? 10_000;
    this.#queue = new KeyedQueue({ concurrency: options.concurrency ?? 4, run: (entry) => this.#process(entry) });
  }

  /** Replays what the inbox holds (oldest first), then takes each new arrival as it is accepted. */
  async start(): Promise<void> {
    if (this.#state !== "new") return;
    this.#state = "running";
    const arrivals: InboxEntry[] = [];
    let replaying = true;
    this.#unsubscribe = this.#inbox.subscribe((entry) => {
      if (replaying) arrivals.push(entry);
      else this.#enqueue(entry);
    });
    const replayed = new Set<string>();
    try {
      // The inbox cannot be read (a store blip at a leader change, say): nothing is lost, it stays in the store, so
      // the replay is tried again rather than failing the start (which would end the process).
      for (let failures = 0; this.#state === "running"; failures++) {
        try {
          for await (const entry of this.#inbox.pending()) {
            replayed.add(entry.id);
            this.#enqueue(entry);
          }
          break;
        } catch (error) {
          const delayMs = this.#retryDelayMs(failures + 1);
          this.#logger.error(
            { err: error, retry_in_ms: delayMs },
            "webhook events left in the inbox could not be read; trying again",
          );
          const stopped = await this.#clock.sleep(delayMs, this.#abort.signal).then(
            () => false,
            () => true,
          );
          if (stopped) return;
        }
      }
    } finally {
      replaying = false;
      if (this.#state === "running") for (const e of arrivals) if (!replayed.has(e.id)) this.#enqueue(e);
    }
    if (replayed.size > 0) this.#logger.info({ count: replayed.size }, "replaying webhook events left in the inbox");
  }

  /**
   * Makes sure an accepted id gets processed. Entries accepted through this process's inbox already arrive by
   * subscription (then this is a no-op); an id written by another process is read from the store.
   */
  async notify(id: string): Promise<void> {
    if (this.#state !== "running" || this.#taken(id)) return;
    await this.#inbox.handedOff();
    if (this.#taken(id)) return;
    const entry = await this.#inbox.get(id);
    if (entry && this.#state === "running") this.#enqueue(entry);
  }

  /** Resolves when every known event has been processed (or dead-lettered) and marked done in the store. */
  async idle(): Promise<void> {
    await this.#queue.idle();
    while (this.#marking.size > 0) await Promise.all(this.#marking);
  }

  /** Takes nothing new, cancels waits between retries, and waits (bounded) for sink calls in flight. */
  async stop(timeoutMs = this.#stopTimeoutMs): Promise<void> {
    if (this.#state === "stopped") return;
    this.#state = "stopped";
    this.#unsubscribe?.();
    this.#abort.abort(new Error("processor stopped"));
    const drained = this.#queue.stop().then(async () => {
      while (this.#marking.size > 0) await Promise.all(this.#marking);
    });
    if (this.#queue.running === 0 && this.#marking.size === 0) return;
    const timer = new AbortController();
    const timedOut = this.#clock.sleep(timeoutMs, timer.signal).then(
      () => true,
      () => false,
    );
    const gaveUp = await Promise.race([drained.then(() => false), timedOut]);
    timer.abort();
    if (gaveUp) {
      this.#logger.warn(
        { in_flight: this.#queue.running, timeout_ms: timeoutMs },
        "webhook processor stopped with sink calls in flight; their events stay in the inbox and replay at the next start",
      );
    }
  }

  /** Queued, in flight, finished lately, or finished and waiting for its done mark: not to be queued again. */
  #taken(id: string): boolean {
    return this.#known.has(id) || this.#recent.has(id) || this.#unmarked.has(id);
  }

  #enqueue(entry: InboxEntry): void {
    if (this.#taken(entry.id)) return;
    this.#known.add(entry.id);
    this.#queue.push(orderingKeyOf(entry.event), entry);
  }

  #forget(id: string): void {
    this.#known.delete(id);
    this.#recent.add(id);
    if (this.#recent.size > RECENT_LIMIT) this.#recent.delete(this.#recent.values().next().value!);
  }

  async #process(entry: InboxEntry): Promise<RunResult> {
    const { event } = entry;
    const kind = kindOf(event.type);
    const typeLabel = KNOWN_TYPES.has(event.type) || kind === "ignored" ? event.type : "unknown";
    const log = this.#logger.child({
      event_id: event.id,
      event_type: event.type,
      appointment_id: appointmentIdOf(event),
    });
    if (kind === "ignored" || kind === "unknown") {
      if (kind === "unknown" && !this.#warnedTypes.has(event.type)) {
        this.#warnedTypes.add(event.type);
        log.warn("webhook event of an unknown type acknowledged and ignored (logged once per type)");
      }
      return this.#finish(entry, log, typeLabel, kind);
    }
    try {
      if (kind === "appointment") await this.#sink.appointment(event, log);
      else await this.#sink.customerUpdated(event, log);
    } catch (error) {
      return this.#failed(entry, log, typeLabel, error);
    }
    return this.#finish(entry, log, typeLabel, "ok");
  }

  /**
   * Marks the event done without holding its slot: the mark joins the next group commit while the queue moves on, so
   * under load one write covers many events. Until the mark is stored the event is only "maybe done": a crash then
   * replays it, which the idempotent sink absorbs.
   */
  #finish(entry: InboxEntry, log: Logger, type: string, result: string): RunResult {
    this.#markDone(entry.id, log, type, () => {
      this.#metrics.processing.inc({ type, result });
      log.debug({ result }, "webhook event processed");
    });
    this.#forget(entry.id);
    return { done: true };
  }

  /**
   * Stores the done mark, retrying with the processing backoff (bounded, 5 minutes at most between tries) while the
   * store fails, so a processed event does not wait for the next start to be marked; meanwhile its id is not taken
   * again. A stop gives up: the event stays in the inbox and replays at the next start (the sink is idempotent).
   */
  #markDone(id: string, log: Logger, type: string, stored: () => void): void {
    this.#unmarked.add(id);
    const marking = (async () => {
      for (let failures = 0; ; failures++) {
        try {
          await this.#inbox.markDone(id);
          stored();
          if (failures > 0) log.info({ attempts: failures + 1 }, "done mark stored once the store answered again");
          return;
        } catch (error) {
          const delayMs = this.#retryDelayMs(failures + 1);
          if (failures === 0) {
            this.#metrics.processing.inc({ type, result: "store_error" });
            log.error(
              { err: error, retry_in_ms: delayMs },
              "webhook event processed but not marked done: the store failed; retrying until it is stored",
            );
          } else log.debug({ err: error, attempts: failures + 1, retry_in_ms: delayMs }, "done mark not stored yet");
          try {
            await this.#clock.sleep(delayMs, this.#abort.signal);
          } catch {
            log.warn("processor stopped before the done mark was stored; the event replays at the next start");
            return;
          }
        }
      }
    })().finally(() => {
      this.#unmarked.delete(id);
      this.#marking.delete(marking);
    });
    this.#marking.add(marking);
  }

  async #failed(entry: InboxEntry, log: Logger, type: string, error: unknown): Promise<RunResult> {
    entry.attempts += 1;
    const message = error instanceof Error ? error.message : String(error);
    if (entry.attempts >= this.#maxAttempts) {
      this.#metrics.processing.inc({ type, result: "dead" });
      log.error({ err: error, attempts: entry.attempts }, "webhook event failed too often: moved to the dead letters");
      try {
        await this.#inbox.deadLetter(entry.id, {
          reason: "processing failed",
          error: message,
          eventId: entry.id,
          type: entry.type,
          attempts: entry.attempts,
          receivedAt: entry.receivedAt,
        });
        this.#markDone(entry.id, log, type, () => {});
      } catch (storeError) {
        log.error(
          { err: storeError },
          "dead letter not written: the store failed; the event replays at the next start",
        );
      }
      this.#forget(entry.id);
      return { done: true };
    }
    const delayMs = this.#retryDelayMs(entry.attempts);
    this.#metrics.processing.inc({ type, result: "retry" });
    log.warn(
      { err: error, attempts: entry.attempts, retry_in_ms: delayMs },
      "webhook event processing failed; will retry",
    );
    try {
      await this.#inbox.recordFailure(entry.id, entry.attempts, message);
    } catch {
      // The count is kept in memory; only a restart would forget it.
    }
    return { done: false, retryAfter: this.#clock.sleep(delayMs, this.#abort.signal) };
  }
}
