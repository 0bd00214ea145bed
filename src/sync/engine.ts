// Owns syncAppointment: the one idempotent, level-triggered operation that makes the calendars match an appointment's
// current state (and pushes a therapist's calendar change back), and the one owner of its retries. Webhooks, the
// reconciliation and the calendar poller only say which appointments to sync and supply hints.
import { type Clock, systemClock } from "../clock.ts";
import { type Logger, silentLogger } from "../log.ts";
import { type AttemptDeps, attemptSync, planReading } from "./attempt.ts";
import type { QuotaRates } from "./concurrency.ts";
import { customerResyncs, tellWhenSettled } from "./customers.ts";
import type { DeadLetters } from "./dead-letters.ts";
import type { Effects } from "./effects.ts";
import type { EngineOptions } from "./engine-options.ts";
import { engineQueue, lostVerdict, stoppedVerdict, waitsVerdict } from "./engine-queue.ts";
import { Failures } from "./failures.ts";
import { type HistoryRecorder, noHistory } from "./history.ts";
import { KeyedSerial } from "./keyed.ts";
import type { LinkStore } from "./links.ts";
import type { Planner } from "./planner.ts";
import { StateReader } from "./reader.ts";
import type { Relocator } from "./relocate.ts";
import { type RetryPolicy, withDefaults } from "./retry.ts";
import { type BookingState, hintState } from "./snapshot.ts";
import { LeadershipLostError } from "./stopped.ts";
import type { Action, BookingHint, BookingPort, Link, SyncOutcome, SyncRequest } from "./types.ts";
import { EngineStoppedError, LANES, type Pending, type Settle, seenIn, toPending } from "./work.ts";
import type { RunVerdict, WorkQueue } from "./work-queue.ts";
import { WritebackWaits } from "./writeback-gate.ts";

const ignore = () => {};
type CustomerRequest = Pick<SyncRequest, "reason" | "priority" | "origin" | "log">;
export class SyncEngine {
  readonly #booking: BookingPort;
  readonly #fx: Effects;
  readonly #links: LinkStore;
  readonly #planner: Planner;
  readonly #read: StateReader;
  readonly #failures: Failures;
  readonly #dead: DeadLetters;
  readonly #history: HistoryRecorder;
  readonly #logger: Logger;
  readonly #clock: Clock;
  readonly #retry: RetryPolicy;
  readonly #concurrency: number;
  readonly #relocator: Relocator | undefined;
  readonly #deps: AttemptDeps;
  readonly #maxConcurrency: number;
  readonly #quota: QuotaRates | undefined;
  #queue: WorkQueue<Pending>;
  readonly #serial = new KeyedSerial();
  #stopped = false;
  #enrichment = false;
  /** Aborts enrichments waiting for leftover budget when the engine stops or gives up its work. */
  #abort = new AbortController();

  constructor(o: EngineOptions) {
    this.#booking = o.booking;
    this.#fx = o.fx;
    this.#links = o.fx.links;
    this.#planner = o.fx.planner;
    this.#read = new StateReader(o.booking, o.fx);
    this.#dead = o.dead;
    this.#history = o.history ?? noHistory;
    this.#logger = o.logger ?? silentLogger;
    this.#clock = o.clock ?? systemClock;
    this.#retry = withDefaults(o.retry);
    this.#failures = new Failures({ ...o, retry: this.#retry, clock: this.#clock, history: this.#history });
    this.#concurrency = o.concurrency;
    this.#relocator = o.relocator;
    this.#deps = {
      booking: o.booking,
      fx: o.fx,
      read: this.#read,
      gate: o.gate,
      maxAttempts: this.#retry.maxAttempts,
      history: this.#history,
      ...(o.relocator ? { relocator: o.relocator } : {}),
      leading: o.leading ?? (() => true),
    };
    this.#maxConcurrency = o.maxConcurrency ?? o.concurrency;
    this.#quota = o.quota;
    this.#queue = this.#newQueue();
  }

  #newQueue(): WorkQueue<Pending> {
    return engineQueue({
      concurrency: this.#concurrency,
      maxConcurrency: this.#maxConcurrency,
      quota: this.#quota,
      clock: this.#clock,
      // One run per key across queues too: an abandoned queue's may still be in flight (abandon()).
      run: (key, p) =>
        this.#serial.run(key, () => (p.customerId === undefined ? this.#run(key.slice(2), p) : this.#runCustomer(p))),
    });
  }

  /** Appointments waiting for, in, or retrying a sync. */
  get queueDepth(): number {
    return this.#queue.size;
  }

  /** Syncs running now, and the limits they start under (in all, and per therapist). */
  get load(): { running: number; concurrency: number; perTherapist: number } {
    const { concurrency, perGroup } = this.#queue.limits;
    return { running: this.#queue.running, concurrency, perTherapist: perGroup };
  }

  /**
   * Asks for appointment `id` to be synced; resolves with the outcome of the attempt that covered this request (a
   * failure that is not final is retried by the engine afterwards). Requests for one appointment run one at a time;
   * requests that wait together are merged, keeping the freshest hints.
   */
  syncAppointment(id: string, request: SyncRequest): Promise<SyncOutcome> {
    return this.#enqueue(id, request, "attempt");
  }

  /**
   * Like syncAppointment, but resolves only when the engine is done with the request: synced, or given up on and
   * recorded in the dead letters. Rejects with EngineStoppedError when the engine stops first. The queueing happens
   * before this returns, so callers that ask in order are served in order.
   */
  settle(id: string, request: SyncRequest): Promise<SyncOutcome> {
    return this.#enqueue(id, request, "settled");
  }

  /**
   * Re-renders a customer's upcoming appointments (their name or contact details changed): lists them, then syncs each.
   * Resolves like settle(), once every one of them is done.
   */
  resyncCustomer(customerId: string, request: CustomerRequest): Promise<SyncOutcome> {
    return new Promise<SyncOutcome>((resolve, reject) => {
      const pending = toPending(request, { until: "settled", resolve, fail: reject }, customerId);
      if (!this.#queue.add(`c:${customerId}`, pending, LANES[request.priority])) reject(new EngineStoppedError());
    });
  }

  /** Enrichments on (the leading daemon) or off (one-shot commands, a standby: the leader's reconciliation asks). */
  setEnrichment(on: boolean): void {
    this.#enrichment = on && !this.#stopped;
  }

  /**
   * Queues an enrichment of appointment `id` in the lowest lane: a full read with leftover rate budget, then the event
   * brought up to date. Nothing happens when enrichments are off, or when the link no longer asks for one when it runs.
   */
  enrich(id: string): void {
    if (!this.#enrichment) return;
    const request: SyncRequest = { reason: "enrichment", priority: "enrich", enrich: true };
    this.#queue.add(`a:${id}`, toPending(request, { until: "settled", resolve: ignore, fail: ignore }), LANES.enrich);
  }

  /**
   * The action a sync would take now, reading what it must but writing nothing anywhere (the dry run). `onRead` gets
   * the full form when one was read, so the caller can hand it to the sync that applies the action.
   */
  async plan(id: string, request: SyncRequest, onRead?: (hint: BookingHint) => void): Promise<Action> {
    const link = await this.#links.get(id);
    if (this.#relocator?.pending(link)) return this.#relocator.planned(link)!;
    const state = await this.#read.booking(id, link, request);
    // A live later generation of a deleted linked event is decided from, as the sync would (nothing saved here).
    const { link: decided, event } = await this.#read.decidable(link, state.appt, request);
    const readAt = this.#clock.now(); // before the full read: a link written meanwhile is newer than it
    const planned = await planReading(this.#deps, id, decided, state, event, request, undefined, undefined, (full) => {
      if (full.appt) onRead?.({ appt: full.appt, readAt, full: true });
    });
    return planned.action;
  }

  /**
   * The action decided from what the caller already read (the link, a listing item, a listed event), without any I/O
   * or queueing; undefined when that is not enough and a sync must read for itself. The reconciliation plans thousands
   * of unchanged appointments this way.
   */
  planFromHints(id: string, link: Link | undefined, request: SyncRequest): Action | undefined {
    const cal = request.calendar;
    if ((cal && "reread" in cal) || this.#relocator?.pending(link)) return undefined;
    if (cal && link && cal.seenAt !== undefined && link.syncedAt >= cal.seenAt) return undefined;
    const state = hintState(link, request.booking);
    if (!state) return undefined;
    try {
      const event = this.#planner.eventOf(link, state.appt, cal);
      if (link?.present && event?.status === "cancelled") return undefined; // a later generation may live: read it
      return this.#planner.plan(id, state, link, event, seenIn(request), request.priority);
    } catch {
      return undefined; // a full read is needed, or a rendering problem: the full path records it properly
    }
  }

  /**
   * Whether this process may sync now. A daemon that lost the leader lease refuses every sync (LeadershipLostError)
   * before it starts, also one queued or retried while it led, and one under way sends no further calendar write.
   */
  get leading(): boolean {
    return this.#deps.leading();
  }

  /** Resolves when nothing is queued or running (appointments waiting to retry may remain). */
  idle(): Promise<void> {
    return this.#queue.idle();
  }

  /** Resolves when nothing is queued, running, or waiting (for a retry or a write-back's grace period). */
  drained(): Promise<void> {
    return this.#queue.drained();
  }

  /** Runs `fn` while no sync runs: those in flight finish first, new ones wait queued. `fn` must not await a sync. */
  async between<T>(fn: () => T | Promise<T>): Promise<T> {
    const queue = this.#queue;
    await queue.pause();
    return (async () => fn())().finally(() => queue.resume());
  }

  /** Runs `fn` while no sync of appointment `id` runs, as one more in its turn (a stray's deletion: reconcile.ts). */
  exclusive = <T>(id: string, fn: () => Promise<T>): Promise<T> => this.#serial.run(`a:${id}`, fn);

  /**
   * A stop begins: syncs' Google calls waiting for quota or a retry, nothing sent, give up, and so do syncs waiting for
   * their calendar to be usable again (their callers are told: webhook events stay in the inbox); the others finish.
   */
  giveUpWaits(): void {
    this.#abort.abort(new EngineStoppedError());
    for (const p of this.#queue.dropParked()) stoppedVerdict(p);
  }

  /** Stops retries and new work for good, waits for the syncs in flight, and tells the callers of everything left. */
  async stop(): Promise<void> {
    this.#stopped = true;
    this.#enrichment = false;
    await this.abandon();
  }

  /**
   * Drops everything queued or waiting to retry (its callers are told, so webhook events stay in the inbox), and waits
   * for the syncs in flight. New requests are taken again afterwards: a replica that lost the lead gives up its work
   * this way, and the replica that leads next replays and reconciles it.
   */
  async abandon(): Promise<void> {
    const old = this.#queue;
    this.#abort.abort(new EngineStoppedError());
    this.#abort = new AbortController();
    if (!this.#stopped) this.#queue = this.#newQueue();
    const left = await old.stop();
    for (const pending of left) for (const s of pending.waiters) s.fail(new EngineStoppedError());
  }

  #enqueue(id: string, request: SyncRequest, until: Settle["until"]): Promise<SyncOutcome> {
    return new Promise<SyncOutcome>((resolve, reject) => {
      const pending = toPending(request, { until, resolve, fail: reject });
      if (!this.#queue.add(`a:${id}`, pending, LANES[request.priority])) reject(new EngineStoppedError());
    });
  }

  async #run(id: string, p: Pending): Promise<RunVerdict> {
    if (!this.#deps.leading()) return lostVerdict(p);
    const parent = p.request.log ?? this.#logger;
    const log = parent.bindings().appointment_id === id ? parent : parent.child({ appointment_id: id });
    const attempt = p.counted + 1;
    const read: { state?: BookingState } = {};
    const abort = this.#abort.signal;
    try {
      const { action, writeback } = await attemptSync(this.#deps, id, p, log, attempt, read, abort);
      await this.#dead.cleared(`appt:${id}`, log);
      p.resolveAll({ ok: true, action, ...(writeback ? { writeback } : {}) });
      return { done: true };
    } catch (err) {
      if (err instanceof WritebackWaits) return waitsVerdict(this.#history, id, p, err, log);
      if (err instanceof LeadershipLostError) return lostVerdict(p, log); // its next calendar write was not sent
      // Given up because the engine stops (a Google call waiting for quota, an enrichment for leftover budget).
      if (abort.aborted && (err === abort.reason || p.request.priority === "enrich")) return stoppedVerdict(p);
      const verdict = await this.#failures.handle(`appt:${id}`, p, err, log, read.state);
      // Parked while a stop gives up waits: given up as those already parked were.
      return !verdict.done && verdict.parked && abort.aborted ? stoppedVerdict(p) : verdict;
    }
  }

  /** A customer's re-render: the listing is this run's work (retried like a sync); each appointment is its own sync. */
  async #runCustomer(p: Pending): Promise<RunVerdict> {
    if (!this.#deps.leading()) return lostVerdict(p);
    const customerId = p.customerId!;
    const log = (p.request.log ?? this.#logger).child({ customer_id: customerId });
    let resyncs: [string, SyncRequest][];
    try {
      resyncs = await customerResyncs(this.#fx, this.#booking, customerId, this.#clock.now(), {
        ...p.request,
        log,
      });
    } catch (err) {
      return this.#failures.handle(`customer:${customerId}`, p, err, log, undefined);
    }
    await this.#dead.cleared(`customer:${customerId}`, log);
    tellWhenSettled(
      p.waiters.splice(0),
      customerId,
      resyncs.map(([id, request]) => this.settle(id, request)),
    );
    log.info({ appointments: resyncs.length }, "customer's upcoming events re-rendered");
    return { done: true };
  }
}
