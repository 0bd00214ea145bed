// Owns handing inbox entries to the sink (the sync engine): replay at start, then new arrivals, in order of arrival;
// an event is marked done once the sink is done with it (the engine synced it or recorded a dead letter), so the inbox
// entry is the durable record until then. Retries are the sink's own; an entry replayed too often is set aside.
import type { Registry } from "prom-client";
import { type Clock, systemClock } from "../clock.ts";
import { type Logger, silentLogger } from "../log.ts";
import { APPOINTMENT_TYPES, appointmentIdOf, type BookingWebhookEvent, isListedType, kindOf } from "./event.ts";
import type { InboxEntry, WebhookInbox } from "./inbox.ts";
import { type WebhookMetrics, webhookMetrics } from "./metrics.ts";

/**
 * Where processed events go (the sync engine). Both calls must be idempotent: an event may come twice. Each must
 * take the event in order before its first await (so calls made in arrival order are served in that order), resolve
 * once it is done with it, and reject only when it cannot finish it (it is stopping): the event then stays pending.
 */
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
  /**
   * Starts an entry may be handed over without the sink finishing it (a crash each time: a poisonous event) before it
   * is set aside in the inbox's dead letters at replay (default 5).
   */
  maxReplays?: number;
  /** How long `stop()` waits for events in flight (default 10 s). */
  stopTimeoutMs?: number;
  /**
   * How long the replay waits for one event an earlier start handed over without finishing before it hands over the
   * next (real time; default 10 s): a crash on it is then its own, while a hang does not hold the rest back for good.
   */
  suspectWaitMs?: number;
  /** Wait before retrying a replay the store could not read (default: 1 s doubling, at most 5 min). */
  retryDelayMs?: (attempt: number) => number;
}

export function defaultRetryDelayMs(attempt: number): number {
  const base = Math.min(300_000, 1000 * 2 ** Math.max(0, attempt - 1));
  return Math.round(base * (0.8 + 0.4 * Math.random()));
}

const KNOWN_TYPES = new Set<string>([...APPOINTMENT_TYPES, "customer.updated"]);

export class InboxProcessor {
  readonly #inbox: WebhookInbox;
  readonly #sink: EventSink;
  readonly #logger: Logger;
  readonly #clock: Clock;
  readonly #metrics: WebhookMetrics;
  readonly #maxReplays: number;
  readonly #retryDelayMs: (attempt: number) => number;
  readonly #stopTimeoutMs: number;
  readonly #suspectWaitMs: number;
  readonly #abort = new AbortController();
  /** Ids handed to the sink and not finished, with the promise of their finish (done mark included). */
  readonly #inFlight = new Map<string, Promise<void>>();
  /**
   * Ids finished while a notice's store read was in flight, kept only while one is: such a read may have seen the entry
   * still pending (its done mark not yet stored), and must not run it again. Nothing is kept when no notice reads.
   */
  readonly #finishedDuringReads = new Set<string>();
  #readsInFlight = 0;
  readonly #warnedTypes = new Set<string>();
  /** Replayed entries whose start was counted (countReplay) and not yet finished. */
  readonly #counted = new Set<string>();
  /** Entries waiting for the next turn, in order, and the promise that turn settles. */
  #due: InboxEntry[] = [];
  #dueTurn: Promise<void> = Promise.resolve();
  #unsubscribe: (() => void) | undefined;
  #state: "new" | "running" | "stopped" = "new";
  /** Settles when the start's replay has handed everything over: a notice waits for it (see notify). */
  #replayed: Promise<void> = Promise.resolve();

  constructor(options: InboxProcessorOptions) {
    this.#inbox = options.inbox;
    this.#sink = options.sink;
    this.#logger = (options.logger ?? silentLogger).child({ component: "webhooks" });
    this.#clock = options.clock ?? systemClock;
    this.#metrics = webhookMetrics(options.registry);
    this.#metrics.watchPending(options.inbox);
    this.#maxReplays = options.maxReplays ?? 5;
    this.#retryDelayMs = options.retryDelayMs ?? defaultRetryDelayMs;
    this.#stopTimeoutMs = options.stopTimeoutMs ?? 10_000;
    this.#suspectWaitMs = options.suspectWaitMs ?? 10_000;
  }

  /** Replays what the inbox holds (oldest first), then takes each new arrival as it is accepted. */
  async start(): Promise<void> {
    if (this.#state !== "new") return;
    this.#state = "running";
    let replayedNow!: () => void;
    this.#replayed = new Promise<void>((resolve) => {
      replayedNow = resolve;
    });
    const arrivals: InboxEntry[] = [];
    let replaying = true;
    this.#unsubscribe = this.#inbox.subscribe((entry) => {
      if (replaying) arrivals.push(entry);
      else this.#take(entry);
    });
    const replayed = new Set<string>();
    try {
      // The inbox cannot be read (a store blip at a leader change, say): nothing is lost, it stays in the store, so
      // the replay is tried again rather than failing the start (which would end the process).
      for (let failures = 0; this.#state === "running"; failures++) {
        try {
          const left: InboxEntry[] = [];
          for await (const entry of this.#inbox.pending()) {
            replayed.add(entry.id);
            left.push(entry);
          }
          await this.#replay(left);
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
      if (this.#state === "running") for (const e of arrivals) if (!replayed.has(e.id)) this.#take(e);
      replayedNow();
    }
    if (replayed.size > 0) this.#logger.info({ count: replayed.size }, "replaying webhook events left in the inbox");
  }

  /**
   * Makes sure an accepted id gets processed. Entries accepted through this process's inbox already arrive by
   * subscription (then this is a no-op); an id written by another process is read from the store.
   */
  async notify(id: string): Promise<void> {
    // During the start's replay the event may be among those it hands over: read after it, or it ran twice (and the
    // replay's count could land over its done mark).
    await this.#replayed;
    if (this.#state !== "running" || this.#inFlight.has(id)) return;
    await this.#inbox.handedOff();
    if (this.#inFlight.has(id)) return;
    let entry: InboxEntry | undefined;
    this.#readsInFlight++;
    try {
      entry = await this.#inbox.get(id);
    } finally {
      this.#readsInFlight--;
    }
    // Finished after the read began: the read may predate its done mark.
    const finishedMeanwhile = this.#finishedDuringReads.has(id);
    if (this.#readsInFlight === 0) this.#finishedDuringReads.clear();
    if (entry && !finishedMeanwhile && this.#state === "running") this.#take(entry);
  }

  /** Resolves when every event handed over has been finished (or left pending) and its done mark stored. */
  async idle(): Promise<void> {
    while (this.#inFlight.size > 0) await Promise.all(this.#inFlight.values());
  }

  /** Takes nothing new, and waits (bounded) for the events in flight; unfinished ones stay pending for a replay. */
  async stop(timeoutMs = this.#stopTimeoutMs): Promise<void> {
    if (this.#state === "stopped") return;
    this.#state = "stopped";
    this.#unsubscribe?.();
    this.#abort.abort(new Error("processor stopped"));
    // Done marks of events finishing from now on are not held back to share a batch, and those already requested
    // are awaited below even when the wait for the events in flight gives up: a done event must not replay.
    this.#inbox.hurryWrites();
    if (this.#inFlight.size === 0) return this.#inbox.settleWrites();
    const timer = new AbortController();
    const timedOut = this.#clock.sleep(timeoutMs, timer.signal).then(
      () => true,
      () => false,
    );
    const gaveUp = await Promise.race([this.idle().then(() => false), timedOut]);
    timer.abort();
    await this.#inbox.settleWrites();
    if (gaveUp) {
      this.#logger.warn(
        { in_flight: this.#inFlight.size, timeout_ms: timeoutMs },
        "webhook processor stopped with events in flight; unfinished ones stay in the inbox and replay at the next start",
      );
    }
  }

  /**
   * Hands the entries left in the inbox over again, in arrival order. Those an earlier start already handed over
   * without finishing (attempts > 0: one of them may crash the process) go one at a time, each counted just before its
   * own hand-over and finished before the next: counted all at once, the events in flight beside a poison one reached
   * maxReplays with it and were set aside unprocessed, acknowledged events lost until the next reconciliation. The
   * others follow at once. Arrival order holds: an entry no start has handed over arrived after those one has.
   */
  async #replay(left: InboxEntry[]): Promise<void> {
    for (const suspect of left.filter((e) => e.attempts > 0)) {
      if (this.#state !== "running") return;
      for (const entry of await this.#countReplays([suspect])) {
        this.#take(entry);
        await this.#dueTurn;
        let timer: NodeJS.Timeout | undefined;
        const waited = new Promise<void>((r) => {
          timer = setTimeout(r, this.#suspectWaitMs);
        });
        await Promise.race([this.#inFlight.get(entry.id), waited]).finally(() => clearTimeout(timer));
      }
    }
    if (this.#state !== "running") return;
    for (const entry of await this.#countReplays(left.filter((e) => e.attempts === 0))) this.#take(entry);
  }

  /**
   * The replayed entries to hand over again: each one's count of starts is stored first (so a crash while it runs is
   * remembered at the next start, and the write cannot land after its done mark); one handed over at too many starts
   * without finishing is set aside in the inbox's dead letters instead.
   */
  async #countReplays(entries: InboxEntry[]): Promise<InboxEntry[]> {
    const again: InboxEntry[] = [];
    await Promise.all(
      entries.map(async (entry) => {
        const log = this.#logger.child({ event_id: entry.id, event_type: entry.type });
        try {
          if (entry.attempts < this.#maxReplays) {
            await this.#inbox.countReplay(entry);
            this.#counted.add(entry.id);
            again.push(entry);
            return;
          }
          log.error({ replays: entry.attempts }, "webhook event never finished after repeated starts: set aside");
          this.#metrics.processing.inc({ type: this.#typeLabel(entry.event.type), result: "dead" });
          await this.#inbox.deadLetter(entry.id, {
            reason: `handed over at ${entry.attempts} starts without finishing (does it crash the process?)`,
            eventId: entry.id,
            type: entry.type,
            attempts: entry.attempts,
            receivedAt: entry.receivedAt,
          });
          await this.#inbox.markDone(entry.id);
        } catch (err) {
          // The store failed: hand it over anyway (losing a count is better than holding an event back).
          log.warn({ err }, "replay count not stored");
          if (!again.includes(entry)) again.push(entry);
        }
      }),
    );
    const order = new Map(entries.map((e, i) => [e.id, i]));
    return again.sort((a, b) => order.get(a.id)! - order.get(b.id)!);
  }

  /**
   * Queues an entry for hand-over on the next turn, in order: the accept that announced it (an HTTP answer) finishes
   * first, and a burst is handed over in one go (one immediate and one promise for the whole burst).
   */
  #take(entry: InboxEntry): void {
    if (this.#inFlight.has(entry.id)) return;
    if (this.#due.length === 0) {
      let turnTaken!: () => void;
      this.#dueTurn = new Promise<void>((resolve) => {
        turnTaken = resolve;
      });
      setImmediate(() => {
        for (const due of this.#due.splice(0)) this.#handOver(due);
        turnTaken();
      });
    }
    this.#due.push(entry);
    this.#inFlight.set(entry.id, this.#dueTurn);
  }

  #handOver(entry: InboxEntry): void {
    const done = this.#process(entry).finally(() => {
      this.#inFlight.delete(entry.id);
      if (this.#readsInFlight > 0) this.#finishedDuringReads.add(entry.id);
    });
    this.#inFlight.set(entry.id, done);
  }

  #typeLabel(type: string): string {
    const kind = kindOf(type);
    return KNOWN_TYPES.has(type) || kind === "ignored" ? type : "unknown";
  }

  /** Hands the event to the sink (synchronously, so arrival order holds) and marks it done when the sink is. */
  async #process(entry: InboxEntry): Promise<void> {
    const { event } = entry;
    const kind = kindOf(event.type, event.data.object);
    const type = this.#typeLabel(event.type);
    const log = this.#logger.child({
      event_id: event.id,
      event_type: event.type,
      appointment_id: appointmentIdOf(event),
    });
    if (kind === "appointment" && !isListedType(event.type) && !this.#warnedTypes.has(event.type)) {
      this.#warnedTypes.add(event.type);
      log.warn(
        "webhook event of a type the booking API's spec does not list: its appointment is read and synced (logged once per type)",
      );
    }
    if (kind === "ignored" || kind === "unknown") {
      if (kind === "unknown" && !this.#warnedTypes.has(event.type)) {
        this.#warnedTypes.add(event.type);
        log.warn("webhook event of an unknown type acknowledged and ignored (logged once per type)");
      }
      this.#counted.delete(entry.id);
      return this.#finish(entry, log, type, kind);
    }
    try {
      await (kind === "appointment" ? this.#sink.appointment(event, log) : this.#sink.customerUpdated(event, log));
    } catch (error) {
      this.#metrics.processing.inc({ type, result: "unfinished" });
      log.warn({ err: error }, "webhook event not finished; it stays in the inbox and replays at the next start");
      // The sink gives up only when stopping: an orderly stop, not a crash, so this start does not count.
      if (this.#counted.delete(entry.id)) {
        await this.#inbox
          .uncountReplay(entry)
          .catch((err: unknown) => log.warn({ err }, "replay count not taken back"));
      }
      return;
    }
    this.#counted.delete(entry.id);
    return this.#finish(entry, log, type, "ok");
  }

  /**
   * Marks the event done; the mark joins the next group commit, so under load one write covers many events. Until the
   * mark is stored the event is only "maybe done": a crash then replays it, which the idempotent sink absorbs. While
   * the store fails, the mark is retried with the backoff (at most 5 minutes apart) and the event, still in flight, is
   * not taken again; a stop gives up and leaves it in the inbox for the next start.
   */
  async #finish(entry: InboxEntry, log: Logger, type: string, result: string): Promise<void> {
    for (let failures = 0; ; failures++) {
      try {
        await this.#inbox.markDone(entry.id);
        this.#metrics.processing.inc({ type, result });
        if (failures > 0) log.info({ attempts: failures + 1 }, "done mark stored once the store answered again");
        else log.debug({ result }, "webhook event processed");
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
  }
}
