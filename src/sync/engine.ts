// Owns syncAppointment: the one idempotent, level-triggered operation that makes the calendars match an appointment's
// current state (and pushes a therapist's calendar change back), and the one owner of its retries. Webhooks, the
// reconciliation and the calendar poller only say which appointments to sync and supply hints.
import type { Priority } from "../booking/gate.ts";
import { type Clock, systemClock } from "../clock.ts";
import { type Logger, silentLogger } from "../log.ts";
import { applyAction } from "./apply.ts";
import { type QuotaRates, queueLimits } from "./concurrency.ts";
import { customerResyncs } from "./customers.ts";
import type { DeadLetters } from "./dead-letters.ts";
import type { Effects } from "./effects.ts";
import { describeError, isCalendarKind } from "./errors.ts";
import { Failures } from "./failures.ts";
import type { LinkStore } from "./links.ts";
import type { Planner } from "./planner.ts";
import { StateReader } from "./reader.ts";
import { type RetryPolicy, withDefaults } from "./retry.ts";
import { type BookingState, hintState } from "./snapshot.ts";
import type { Action, BookingPort, Link, SyncOutcome, SyncRequest } from "./types.ts";
import { mergeRequests, type Pending, type Settle, seenIn, therapistOf, toPending } from "./work.ts";
import { type RunVerdict, WorkQueue } from "./work-queue.ts";
import { type WritebackGate, WritebackWaits } from "./writeback-gate.ts";

export interface EngineOptions {
  booking: BookingPort;
  fx: Effects;
  dead: DeadLetters;
  gate: WritebackGate;
  logger?: Logger;
  clock?: Clock;
  /** Syncs at once at least (sync.concurrency). */
  concurrency: number;
  /** Syncs at once at most (sync.max_concurrency; default: the floor, fixed). */
  maxConcurrency?: number;
  /** Google's budgets and round trip: between the two bounds, as many syncs run as keep the budget busy. */
  quota?: QuotaRates;
  retry?: Partial<RetryPolicy>;
}

/** Thrown to callers waiting for a request the engine will not finish (it stopped): the work stays where it came from. */
export class EngineStoppedError extends Error {
  constructor() {
    super("the sync engine stopped before this request was finished");
    this.name = "EngineStoppedError";
  }
}

const LANES: Record<Priority, number> = { webhook: 0, writeback: 1, reconcile: 2 };

export class SyncEngine {
  readonly #booking: BookingPort;
  readonly #fx: Effects;
  readonly #links: LinkStore;
  readonly #planner: Planner;
  readonly #read: StateReader;
  readonly #gate: WritebackGate;
  readonly #failures: Failures;
  readonly #dead: DeadLetters;
  readonly #logger: Logger;
  readonly #clock: Clock;
  readonly #retry: RetryPolicy;
  readonly #concurrency: number;
  readonly #maxConcurrency: number;
  readonly #quota: QuotaRates | undefined;
  #queue: WorkQueue<Pending>;
  #stopped = false;

  constructor(o: EngineOptions) {
    this.#booking = o.booking;
    this.#fx = o.fx;
    this.#links = o.fx.links;
    this.#planner = o.fx.planner;
    this.#read = new StateReader(o.booking, o.fx);
    this.#gate = o.gate;
    this.#dead = o.dead;
    this.#logger = o.logger ?? silentLogger;
    this.#clock = o.clock ?? systemClock;
    this.#retry = withDefaults(o.retry);
    this.#failures = new Failures({ dead: o.dead, fx: o.fx, retry: this.#retry, clock: this.#clock });
    this.#concurrency = o.concurrency;
    this.#maxConcurrency = o.maxConcurrency ?? o.concurrency;
    this.#quota = o.quota;
    this.#queue = this.#newQueue();
  }

  #newQueue(): WorkQueue<Pending> {
    const quota = this.#quota;
    return new WorkQueue<Pending>({
      concurrency: this.#concurrency,
      ...(quota ? { limits: () => queueLimits({ min: this.#concurrency, max: this.#maxConcurrency, quota }) } : {}),
      // Therapists take turns: one's backfill does not hold up another's changes.
      group: (p) => (p.customerId === undefined ? (therapistOf(p.request, undefined) ?? "") : ""),
      lanes: 3,
      merge: mergeRequests,
      run: (key, pending) =>
        pending.customerId === undefined ? this.#run(key.slice(2), pending) : this.#runCustomer(pending),
      clock: this.#clock,
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
  resyncCustomer(customerId: string, request: Pick<SyncRequest, "reason" | "priority" | "log">): Promise<SyncOutcome> {
    return new Promise<SyncOutcome>((resolve, reject) => {
      const pending = toPending(request, { until: "settled", resolve, fail: reject }, customerId);
      if (!this.#queue.add(`c:${customerId}`, pending, LANES[request.priority])) reject(new EngineStoppedError());
    });
  }

  /** The action a sync would take now, reading what it must but writing nothing anywhere (the dry run). */
  async plan(id: string, request: SyncRequest): Promise<Action> {
    const link = await this.#links.get(id);
    const state = await this.#read.booking(id, link, request);
    const event = await this.#read.event(link, state.appt, request);
    return this.#planner.plan(id, state.appt, link, event, seenIn(request));
  }

  /**
   * The action decided from what the caller already read (the link, a listing item, a listed event), without any I/O
   * or queueing; undefined when that is not enough and a sync must read for itself. The reconciliation plans thousands
   * of unchanged appointments this way.
   */
  planFromHints(id: string, link: Link | undefined, request: SyncRequest): Action | undefined {
    const cal = request.calendar;
    if (cal && "reread" in cal) return undefined;
    if (cal && link && cal.seenAt !== undefined && link.syncedAt >= cal.seenAt) return undefined;
    const state = hintState(link, request.booking);
    if (!state) return undefined;
    try {
      return this.#planner.plan(id, state.appt, link, this.#planner.eventOf(link, state.appt, cal), seenIn(request));
    } catch {
      return undefined; // e.g. a rendering problem: the full path records it properly
    }
  }

  /** Resolves when nothing is queued or running (appointments waiting to retry may remain). */
  idle(): Promise<void> {
    return this.#queue.idle();
  }

  /** Resolves when nothing is queued, running, or waiting (for a retry or a write-back's grace period). */
  drained(): Promise<void> {
    return this.#queue.drained();
  }

  /** Stops retries and new work for good, waits for the syncs in flight, and tells the callers of everything left. */
  async stop(): Promise<void> {
    this.#stopped = true;
    await this.abandon();
  }

  /**
   * Drops everything queued or waiting to retry (its callers are told, so webhook events stay in the inbox), and waits
   * for the syncs in flight. New requests are taken again afterwards: a replica that lost the lead gives up its work
   * this way, and the replica that leads next replays and reconciles it.
   */
  async abandon(): Promise<void> {
    const old = this.#queue;
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
    const parent = p.request.log ?? this.#logger;
    const log = parent.bindings().appointment_id === id ? parent : parent.child({ appointment_id: id });
    const attempt = p.counted + 1;
    const read: { state?: BookingState } = {};
    try {
      const action = await this.#syncOnce(id, p, log, attempt, read);
      await this.#dead.clear(`appt:${id}`).catch((e) => log.warn({ err: describeError(e) }, "dead letter not cleared"));
      p.resolveAll({ ok: true, action });
      return { done: true };
    } catch (err) {
      if (err instanceof WritebackWaits) return this.#waits(p, err, log);
      return this.#failures.handle(`appt:${id}`, p, err, log, read.state);
    }
  }

  /** A customer's re-render: the listing is this run's work (retried like a sync); each appointment is its own sync. */
  async #runCustomer(p: Pending): Promise<RunVerdict> {
    const customerId = p.customerId!;
    const log = (p.request.log ?? this.#logger).child({ customer_id: customerId });
    let resyncs: [string, SyncRequest][];
    try {
      resyncs = await customerResyncs(this.#booking, this.#fx.mapping.config, customerId, this.#clock.now(), {
        ...p.request,
        log,
      });
    } catch (err) {
      return this.#failures.handle(`customer:${customerId}`, p, err, log, undefined);
    }
    const waiters = p.waiters;
    p.waiters = [];
    void Promise.allSettled(resyncs.map(([id, request]) => this.settle(id, request))).then((results) => {
      const failed = results.find((r) => r.status === "rejected" || !r.value.ok);
      for (const w of waiters) {
        if (failed?.status === "rejected") w.fail(failed.reason as Error);
        else w.resolve(failed?.status === "fulfilled" ? failed.value : { ok: true, action: none(customerId) });
      }
    });
    log.info({ appointments: resyncs.length }, "customer's upcoming events re-rendered");
    return { done: true };
  }

  /** A write-back in its grace period runs again when the period ends (reading both sides again); a held one is done. */
  #waits(p: Pending, w: WritebackWaits, log: Logger): RunVerdict {
    if (w.why === "held") {
      log.info({ action: w.action.kind }, "write-back held by the guard");
      p.resolveAll({ ok: true, action: w.action, waiting: "held" });
      return { done: true };
    }
    log.info({ action: w.action.kind, grace_ms: w.inMs }, "write-back waits for the grace period");
    p.resolveAttempts({ ok: true, action: w.action, waiting: "grace" });
    const { booking: _, ...rest } = p.request;
    p.request = { ...rest, calendar: { reread: true } };
    return { done: false, retryInMs: w.inMs };
  }

  async #syncOnce(
    id: string,
    p: Pending,
    log: Logger,
    attempt: number,
    read: { state?: BookingState },
  ): Promise<Action> {
    const request = p.request;
    const link = await this.#links.get(id);
    const state = await this.#read.booking(id, link, request);
    if (state.appt) read.state = { appt: state.appt, sourceAt: state.sourceAt };
    let event = await this.#read.event(link, state.appt, request);
    for (let round = 0; ; round++) {
      const planned = this.#planner.plan(id, state.appt, link, event, seenIn(request));
      const action = await this.#gate.pass(planned, { ...state, link, override: request.override, state: p.gate });
      try {
        await applyAction(
          action,
          { ...state, id, link, event, log, attempt, maxAttempts: this.#retry.maxAttempts },
          this.#fx,
          this.#booking,
        );
        await this.#gate.done(action, link);
        return action;
      } catch (err) {
        // 412: the therapist changed the event since we last saw it. Read it and decide again, once.
        if (round === 0 && isCalendarKind(err, "precondition") && "therapistId" in action) {
          log.info({ action: action.kind }, "event changed meanwhile; re-reading it before deciding again");
          // Write-backs name no event of their own: theirs is the linked one.
          const eventId = "eventId" in action ? action.eventId : link?.eventId;
          if (eventId === undefined) throw err;
          event = await this.#fx.calendar(action.therapistId).get(eventId);
          continue;
        }
        throw err;
      }
    }
  }
}

const none = (id: string): Action => ({ kind: "none", appointmentId: id, reason: "customer re-rendered" });
