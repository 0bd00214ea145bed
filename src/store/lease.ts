// Owns the leader lease: on a shared Redis store exactly one replica holds `calbridge:leader` and runs leader-only
// work; a standby takes over when the lease lapses or is released. SQLite and memory stores mean one replica: always leader.
import { randomUUID } from "node:crypto";
import { hostname } from "node:os";
import { type Clock, systemClock } from "../clock.ts";
import { type Logger, silentLogger } from "../log.ts";
import type { RedisClient, Store } from "./store.ts";

export const LEADER_KEY = "calbridge:leader";
/** Published by a replica that releases the lease, so a standby takes over at once instead of at its next poll. */
export const RELEASED_CHANNEL = "calbridge:leader:released";

// KEYS[1] lease key · ARGV[1] holder id · ARGV[2] lease ms. Both act only while the value is still ours.
const RENEW_SCRIPT = `if redis.call("GET", KEYS[1]) == ARGV[1] then return redis.call("PEXPIRE", KEYS[1], ARGV[2]) end return 0`;
// RELEASE_SCRIPT: ARGV[2] the channel to tell standbys on, "" for none.
const RELEASE_SCRIPT = `if redis.call("GET", KEYS[1]) == ARGV[1] then redis.call("DEL", KEYS[1]) if ARGV[2] ~= "" then redis.call("PUBLISH", ARGV[2], ARGV[1]) end return 1 end return 0`;

export interface LeaderLeaseOptions {
  store: Store;
  /** Unique per process (see defaultHolderId); two processes with one id would both think they lead. */
  holderId: string;
  leaseMs: number;
  clock?: Clock;
  logger?: Logger;
  /** Called with true on gaining and false on losing (or stopping) leadership. Must not throw. */
  onChange?: (isLeader: boolean) => void;
  /** Key of the lease in Redis (tests use their own). */
  key?: string;
}

/** host:pid:random, readable in `GET calbridge:leader` and unique across restarts. */
export function defaultHolderId(): string {
  return `${hostname()}:${process.pid}:${randomUUID().slice(0, 8)}`;
}

type Outcome<T> =
  | { kind: "ok"; value: T }
  | { kind: "error"; error: unknown }
  | { kind: "timeout" }
  | { kind: "aborted" };

/**
 * Timing, with L = leaseMs: the lease is renewed every L/3. Leadership counts from the moment the last successful
 * acquire or renew was *sent* (Redis starts the TTL later, so the real expiry is later still) and is given up at
 * 2L/3 without a confirmed renewal, L/3 before any other replica could acquire the key. `isLeader` checks that
 * deadline itself, so a stalled event loop never reads a stale true.
 * The key may also vanish without expiring (Redis restarted without persistence, FLUSHALL, a failover to a replica
 * that lacked it) while its holder still leads. So a key won with SET NX is held, and renewed, without leading for
 * 2L/3 (by then any former holder has passed its own deadline) before leadership starts; only a take-over right after
 * a leader's release notice (it stopped leading, then deleted the key) starts at once.
 */
export class LeaderLease {
  readonly holderId: string;
  readonly leaseMs: number;
  readonly #store: Store;
  readonly #clock: Clock;
  readonly #log: Logger;
  readonly #onChange: ((isLeader: boolean) => void) | undefined;
  readonly #key: string;
  #leader = false;
  #confirmedAt = 0;
  /** When the key we hold without leading yet was won with SET NX (sent); undefined when not holding. */
  #heldSince: number | undefined;
  /** A leader's release notice arrived since the last acquire attempt began. */
  #released = false;
  #stop: AbortController | undefined;
  #wake = new AbortController();
  #loop: Promise<void> | undefined;
  #subscriber: RedisClient | undefined;

  constructor(options: LeaderLeaseOptions) {
    if (!(options.leaseMs >= 300)) throw new Error(`lease: leaseMs must be at least 300 (got ${options.leaseMs})`);
    this.holderId = options.holderId;
    this.leaseMs = options.leaseMs;
    this.#store = options.store;
    this.#clock = options.clock ?? systemClock;
    this.#log = (options.logger ?? silentLogger).child({ component: "lease", holder: options.holderId });
    this.#onChange = options.onChange;
    this.#key = options.key ?? LEADER_KEY;
  }

  get isLeader(): boolean {
    if (!this.#leader) return false;
    return this.#store.kind !== "redis" || this.#clock.now() < this.#confirmedAt + this.#safeMs;
  }

  get #renewEveryMs(): number {
    return Math.floor(this.leaseMs / 3);
  }

  get #safeMs(): number {
    return Math.floor((this.leaseMs * 2) / 3);
  }

  get #redis(): RedisClient {
    const client = this.#store.redis;
    if (!client) throw new Error("lease: the redis store has no client");
    return client;
  }

  /**
   * Makes the first attempt, then keeps the lease in the background. A replica that wins a free key leads 2L/3
   * later (see the class comment), not when this resolves.
   */
  async start(): Promise<void> {
    if (this.#stop) return;
    const stop = new AbortController();
    this.#stop = stop;
    if (this.#store.kind !== "redis") {
      this.#set(true, "single replica store");
      return;
    }
    this.#subscribe();
    const firstDelay = await this.#acquire(stop.signal);
    this.#loop = this.#run(stop.signal, firstDelay);
  }

  /**
   * Gives leadership up: onChange(false), then the key is deleted (only if still ours) and standbys are told.
   * Call it after leader-only work has stopped, so a successor never overlaps with it; with `release: false` (that
   * work is still running) the key is left to lapse. `timeoutMs` bounds the wait for Redis to answer the release.
   */
  async stop(options: { release?: boolean; timeoutMs?: number } = {}): Promise<void> {
    const stop = this.#stop;
    if (!stop) return;
    stop.abort();
    await this.#loop;
    this.#loop = undefined;
    this.#stop = undefined;
    // Only a leader's release is a clean hand-over; a key held without leading yet is deleted without a notice.
    const wasLeader = this.#leader;
    this.#heldSince = undefined;
    if (this.#leader) this.#set(false, "stopping");
    if (this.#store.kind !== "redis") return;
    if (options.release === false) {
      this.#log.info("leader lease left to lapse: leader work still running");
    } else {
      const released = await this.#call(
        () =>
          this.#redis.eval(RELEASE_SCRIPT, {
            keys: [this.#key],
            arguments: [this.holderId, wasLeader ? RELEASED_CHANNEL : ""],
          }),
        Math.min(this.#renewEveryMs, options.timeoutMs ?? Number.POSITIVE_INFINITY),
      );
      if (released.kind === "ok" && Number(released.value) === 1) this.#log.info("released the leader lease");
      else if (released.kind !== "ok") this.#log.warn({ err: errorOf(released) }, "could not release the leader lease");
    }
    if (this.#subscriber?.isOpen) this.#subscriber.destroy();
    this.#subscriber = undefined;
  }

  async #run(signal: AbortSignal, firstDelay: number): Promise<void> {
    let delay = firstDelay;
    while (!signal.aborted) {
      // A standby's wait is cut short by a release notice; a leader's renewals keep their own rhythm.
      if (this.#wake.signal.aborted) {
        this.#wake = new AbortController();
        if (!this.#leader) delay = 0;
      }
      const wait = linked(this.#leader ? [signal] : [signal, this.#wake.signal]);
      await this.#clock.sleep(delay, wait.signal).catch(() => {});
      wait.unlink();
      if (signal.aborted) break;
      delay = this.#leader ? await this.#renew(signal) : await this.#acquire(signal);
    }
  }

  /** One attempt to become leader; returns how long to wait before the next step. */
  async #acquire(signal: AbortSignal): Promise<number> {
    const sentAt = this.#clock.now();
    const timeout = this.#renewEveryMs;
    const afterRelease = this.#released;
    this.#released = false;
    const set = await this.#call(
      () =>
        this.#redis.set(this.#key, this.holderId, { condition: "NX", expiration: { type: "PX", value: this.leaseMs } }),
      timeout,
      signal,
    );
    const wonNx = set.kind === "ok" && set.value === "OK";
    let won = wonNx;
    if (set.kind === "ok" && !won) {
      // Still ours (a restart of the loop after a lost renewal, or a slow answer we gave up on): take it back.
      const renewed = await this.#call(() => this.#evalRenew(), timeout, signal);
      won = renewed.kind === "ok" && Number(renewed.value) === 1;
    }
    if (signal.aborted) return 0;
    if (won) {
      // A fresh key (not straight after a release notice) may have replaced one whose holder still leads: hold it.
      if (wonNx) this.#heldSince = afterRelease ? undefined : sentAt;
      // Only an answer that came back quickly leaves enough of the lease to act on; otherwise confirm again first.
      if (this.#clock.now() - sentAt >= this.#renewEveryMs) return 0;
      this.#confirmedAt = sentAt;
      const leadFrom = this.#heldSince === undefined ? sentAt : this.#heldSince + this.#safeMs;
      if (sentAt < leadFrom) {
        return Math.max(0, Math.min(sentAt + this.#renewEveryMs, leadFrom) - this.#clock.now());
      }
      this.#heldSince = undefined;
      this.#set(true, "acquired the leader lease");
      return Math.max(0, sentAt + this.#renewEveryMs - this.#clock.now());
    }
    if (set.kind !== "ok") {
      this.#log.debug({ err: errorOf(set) }, "lease: acquire attempt failed");
      return this.#renewEveryMs;
    }
    // Someone else holds it: wake up right when it would expire (a release notice may wake us sooner).
    const ttl = await this.#call(() => this.#redis.pTTL(this.#key), timeout, signal);
    const ms = ttl.kind === "ok" ? Number(ttl.value) : -1;
    return ms > 0 ? Math.min(ms + 5, this.#renewEveryMs) : ms === -2 ? 0 : this.#renewEveryMs;
  }

  /** One renewal while leader; gives leadership up when it cannot be confirmed in time. */
  async #renew(signal: AbortSignal): Promise<number> {
    const sentAt = this.#clock.now();
    const deadline = this.#confirmedAt + this.#safeMs;
    if (sentAt >= deadline) return this.#lose("no confirmed renewal in time");
    const result = await this.#call(() => this.#evalRenew(), deadline - sentAt, signal);
    if (result.kind === "aborted") return 0;
    if (result.kind === "ok") {
      if (Number(result.value) !== 1) return this.#lose("the lease expired or another replica holds it");
      this.#confirmedAt = sentAt;
      return Math.max(0, sentAt + this.#renewEveryMs - this.#clock.now());
    }
    if (result.kind === "timeout") return this.#lose(`Redis did not answer within ${deadline - sentAt} ms`);
    const left = deadline - this.#clock.now();
    if (left <= 0) return this.#lose(`renewal failed: ${String(errorOf(result))}`);
    this.#log.warn({ err: errorOf(result), leftMs: left }, "lease: renewal failed, retrying");
    return Math.min(left, Math.max(50, Math.floor(this.leaseMs / 10)));
  }

  #evalRenew(): Promise<unknown> {
    return this.#redis.eval(RENEW_SCRIPT, { keys: [this.#key], arguments: [this.holderId, String(this.leaseMs)] });
  }

  #lose(reason: string): number {
    this.#log.warn({ reason }, "lost the leader lease");
    this.#set(false, reason);
    return 0;
  }

  #set(leader: boolean, reason: string): void {
    if (this.#leader === leader) return;
    this.#leader = leader;
    if (leader) this.#log.info({ reason }, "became leader");
    try {
      this.#onChange?.(leader);
    } catch (err) {
      this.#log.error({ err }, "lease: onChange threw");
    }
  }

  /** Listens for release notices on a second connection; failures only mean standbys fall back to polling. */
  #subscribe(): void {
    const sub = this.#redis.duplicate();
    this.#subscriber = sub;
    sub.on("error", () => {});
    sub
      .connect()
      .then(() =>
        sub.subscribe(RELEASED_CHANNEL, (holder) => {
          if (holder !== this.holderId && !this.#leader) {
            this.#released = true;
            this.#wake.abort();
          }
        }),
      )
      .catch((err: unknown) => {
        if (this.#subscriber === sub) this.#log.debug({ err }, "lease: no release notices, polling only");
      });
  }

  /** Runs a Redis call that may hang (an unreachable server queues commands) against a deadline. */
  async #call<T>(fn: () => Promise<T>, timeoutMs: number, signal?: AbortSignal): Promise<Outcome<T>> {
    const timer = linked(signal ? [signal] : []);
    try {
      const op = Promise.resolve()
        .then(fn)
        .then(
          (value): Outcome<T> => ({ kind: "ok", value }),
          (error: unknown): Outcome<T> => ({ kind: "error", error }),
        );
      const late = this.#clock.sleep(Math.max(0, timeoutMs), timer.signal).then(
        (): Outcome<T> => ({ kind: "timeout" }),
        (): Outcome<T> => ({ kind: "aborted" }),
      );
      return await Promise.race([op, late]);
    } finally {
      timer.unlink();
      timer.abort();
    }
  }
}

/** A controller that also aborts when one of `parents` does; unlink() drops the listeners (no AbortSignal.any on the
 * long-lived stop signal, which would collect one dependant per step for the daemon's whole life). */
function linked(parents: AbortSignal[]): { signal: AbortSignal; abort(): void; unlink(): void } {
  const own = new AbortController();
  const abort = () => own.abort();
  for (const p of parents) {
    if (p.aborted) own.abort();
    else p.addEventListener("abort", abort, { once: true });
  }
  return {
    signal: own.signal,
    abort,
    unlink: () => {
      for (const p of parents) p.removeEventListener("abort", abort);
    },
  };
}

function errorOf(outcome: Outcome<unknown>): unknown {
  return outcome.kind === "error" ? outcome.error : outcome.kind;
}
