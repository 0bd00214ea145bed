// Owns the leader lease: of the daemons sharing a store (replicas on Redis; on a SQLite file, a rolling update's new
// daemon or a second `run` started by hand) exactly one holds `calbridge:leader` and runs leader-only work; the others
// stand by and take over when the lease lapses or is released. A memory store is one process's: always leader.
import { randomUUID } from "node:crypto";
import { readlinkSync } from "node:fs";
import { hostname } from "node:os";
import { type Clock, systemClock } from "../clock.ts";
import { type Logger, silentLogger } from "../log.ts";
import { StoreFileLostError } from "./sqlite-file-identity.ts";
import type { LeaseHolder, LeaseRow, RedisClient, Store } from "./store.ts";

export const LEADER_KEY = "calbridge:leader";
/** Published by a replica that releases the lease, so a standby takes over at once instead of at its next poll. */
export const RELEASED_CHANNEL = "calbridge:leader:released";

// KEYS[1] lease key · ARGV[1] holder id · ARGV[2] lease ms. Both act only while the value is still ours.
const RENEW_SCRIPT = `if redis.call("GET", KEYS[1]) == ARGV[1] then return redis.call("PEXPIRE", KEYS[1], ARGV[2]) end return 0`;
// RELEASE_SCRIPT: ARGV[2] the channel to tell standbys on, "" for none.
const RELEASE_SCRIPT = `if redis.call("GET", KEYS[1]) == ARGV[1] then redis.call("DEL", KEYS[1]) if ARGV[2] ~= "" then redis.call("PUBLISH", ARGV[2], ARGV[1]) end return 1 end return 0`;

/** What a Redis user needs for the lease, named wherever Redis refuses it (NOPERM). */
export const LEASE_PERMISSIONS_FIX =
  "let calbridge's Redis user run scripts: `ACL SETUSER <user> +@scripting` (at least `+eval`), besides GET, SET, " +
  "PTTL, PEXPIRE, DEL, PUBLISH and SUBSCRIBE on the calbridge:* keys and channels (README: Deployment)";

/** What a Redis user needs for calbridge's notices between replicas, named wherever Redis refuses SUBSCRIBE. */
export const SUBSCRIBE_PERMISSIONS_FIX =
  "let calbridge's Redis user subscribe to its channels: `ACL SETUSER <user> +subscribe &calbridge:*` (README: Deployment)";

// The start's check: every command of the two scripts, on a key of its own that is never there, and a channel no replica
// listens on (a notice on RELEASED_CHANNEL would let a standby lead at once). KEYS[1] probe key · ARGV[1] channel.
const PROBE_SCRIPT = `redis.call("GET", KEYS[1]) redis.call("PEXPIRE", KEYS[1], 1) redis.call("DEL", KEYS[1]) redis.call("PUBLISH", ARGV[1], "") return 1`;

/**
 * Redis refused a command under its ACL: `NOPERM ...`, or for a command inside a script (Redis 7) `ERR The user
 * executing the script can't run this command ...`. A setting, which no retry gets past.
 */
export function isNoPermission(err: unknown): boolean {
  return err instanceof Error && /^NOPERM\b|The user executing the script can't run/.test(err.message);
}

/**
 * Redis refused SUBSCRIBE at start (NOPERM): replicas tell each other on calbridge's channels of accepted webhooks, new
 * credentials, push notifications and a released lease; `refusal` is Redis's own message.
 */
export class SubscribePermissionError extends Error {
  readonly refusal: string;
  constructor(refusal: string) {
    super(
      `store: Redis refuses SUBSCRIBE on calbridge's channels (replicas tell each other of accepted webhooks, new credentials and a released lease there): ${refusal}; ${SUBSCRIBE_PERMISSIONS_FIX}`,
    );
    this.refusal = refusal;
    this.name = "SubscribePermissionError";
  }
}

/** Redis refused the lease's script at start (NOPERM); `refusal` is Redis's own message. */
export class LeasePermissionError extends Error {
  readonly refusal: string;
  constructor(refusal: string) {
    super(`store: Redis refuses the leader lease: ${refusal}; ${LEASE_PERMISSIONS_FIX}`);
    this.refusal = refusal;
    this.name = "LeasePermissionError";
  }
}

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

/** Where builds before the SQLite lease kept their daemon's heartbeat in meta (see #earlierBuild). */
const EARLIER_BUILD_KEY = "calbridge:runner";

/** How often a standby on SQLite reads the lease row at most (no release notice there): one indexed read. */
const SQLITE_STANDBY_POLL_MS = 1000;

/** Holder ids whose lease may still be running work in this process (started, and not stopped with a release). */
const runningHere = new Set<string>();

/** This process's pid namespace on Linux ("pid:[4026531836]"); undefined elsewhere. */
const PID_NS = (() => {
  try {
    return readlinkSync("/proc/self/ns/pid");
  } catch {
    return undefined;
  }
})();

/**
 * The holder of a SQLite lease row is known to be gone: a process of this host (and pid namespace, where a pid means
 * the same process) that no longer runs (killed, crashed: `kill -9`, an OOM kill), or a lease of this very process
 * that was stopped with a release or never started here (a process restarted under the same pid in one namespace: a
 * restarted container has a new namespace, so its predecessor's row is only taken over once it lapses). Anything
 * else (another host or container, a process that is there but stalled) is only taken over once the row lapses.
 */
export function holderGone(row: LeaseHolder): boolean {
  if (row.host !== hostname() || row.pidNs !== PID_NS) return false;
  if (row.pid === process.pid) return !runningHere.has(row.holder);
  try {
    process.kill(row.pid, 0);
    return false;
  } catch (err) {
    return (err as NodeJS.ErrnoException).code === "ESRCH";
  }
}

type Outcome<T> =
  | { kind: "ok"; value: T }
  | { kind: "error"; error: unknown }
  | { kind: "timeout" }
  | { kind: "aborted" };

/**
 * On SQLite the lease is a row of the store file (store.ts `LeaseRow`), taken, renewed and released each by one
 * conditional statement; a standby reads the row (at most every second, an indexed read) and claims it once it is
 * released, lapsed, or its holder is known to be gone (holderGone). A daemon alone on the file leads at once.
 *
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
  /** The holder last seen in the SQLite row while standing by (its log line is written once per holder). */
  #seenHolder: string | undefined;
  /** The other holder's row as this standby last saw it change, and when (its monotonic clock): see #acquireRow. */
  #observed: { holder: string; until: number; at: number } | undefined;
  #stop: AbortController | undefined;
  #wake = new AbortController();
  #loop: Promise<void> | undefined;
  #subscriber: RedisClient | undefined;
  /** Why Redis refuses the lease (NOPERM), until a lease command goes through again. */
  #problem: string | undefined;

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
    return this.#solo || this.#mono() < this.#confirmedAt + this.#safeMs;
  }

  /**
   * This process's time for the lease's own limits (confirmedAt, the safety window, the renewal pace): a clock NTP
   * never steps. On the wall clock, a step back while Redis was out of reach kept a leader that many seconds past its
   * window while another replica led too. Rows and keys other processes read keep the wall clock.
   */
  #mono(): number {
    return this.#clock.elapsed?.() ?? this.#clock.now();
  }

  /** A store only this process uses (memory): no lease to hold. */
  get #solo(): boolean {
    return this.#store.kind !== "redis" && this.#store.leaseRow === undefined;
  }

  get #row(): LeaseRow {
    const row = this.#store.leaseRow;
    if (!row) throw new Error("lease: the store has no lease row");
    return row;
  }

  /** Set while Redis refuses the lease's commands (an ACL without scripting): no replica can lead. */
  get problem(): string | undefined {
    return this.#problem;
  }

  /**
   * Runs the scripts' commands once, changing nothing (PROBE_SCRIPT), and throws when Redis refuses them (its ACL): a
   * user without scripting would win the key, have every renewal refused and never lead, silently. Other failures
   * (Redis away, slow) are left to the lease's own retries. A no-op on stores without a lease.
   */
  async checkPermissions(): Promise<void> {
    if (this.#store.kind !== "redis") return;
    const probe = await this.#call(
      () => this.#redis.eval(PROBE_SCRIPT, { keys: [`${this.#key}:probe`], arguments: [`${RELEASED_CHANNEL}:probe`] }),
      this.#renewEveryMs,
    );
    if (probe.kind === "error" && isNoPermission(probe.error)) {
      throw new LeasePermissionError(messageOf(probe.error));
    }
    const deaf = await this.#probeSubscribe(this.#renewEveryMs);
    if (deaf !== undefined) throw new SubscribePermissionError(deaf);
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
    if (this.#solo) {
      this.#set(true, "single process store");
      return;
    }
    await this.checkPermissions();
    runningHere.add(this.holderId);
    if (this.#store.kind === "redis") this.#subscribe();
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
    this.#seenHolder = undefined;
    if (this.#leader) this.#set(false, "stopping");
    if (this.#solo) return;
    if (options.release === false) {
      // Kept as running here: a standby of this process (tests run two) waits for the row to lapse, as for a stall.
      this.#log.info("leader lease left to lapse: leader work still running");
    } else {
      runningHere.delete(this.holderId);
      const released = await this.#call(
        () =>
          this.#store.kind === "redis"
            ? this.#redis.eval(RELEASE_SCRIPT, {
                keys: [this.#key],
                arguments: [this.holderId, wasLeader ? RELEASED_CHANNEL : ""],
              })
            : this.#row.release(this.holderId),
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
    if (this.#store.kind !== "redis") return this.#acquireRow(signal);
    const sentAt = this.#mono();
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
    this.#permitted(set, false);
    if (set.kind === "ok" && !won) {
      // Still ours (a restart of the loop after a lost renewal, or a slow answer we gave up on): take it back.
      const renewed = await this.#call(() => this.#evalRenew(), timeout, signal);
      this.#permitted(renewed);
      won = renewed.kind === "ok" && Number(renewed.value) === 1;
    }
    if (signal.aborted) return 0;
    if (won) {
      // A fresh key (not straight after a release notice) may have replaced one whose holder still leads: hold it.
      if (wonNx) this.#heldSince = afterRelease ? undefined : sentAt;
      // Only an answer that came back quickly leaves enough of the lease to act on; otherwise confirm again first.
      if (this.#mono() - sentAt >= this.#renewEveryMs) return 0;
      this.#confirmedAt = sentAt;
      const leadFrom = this.#heldSince === undefined ? sentAt : this.#heldSince + this.#safeMs;
      if (sentAt < leadFrom) {
        return Math.max(0, Math.min(sentAt + this.#renewEveryMs, leadFrom) - this.#mono());
      }
      this.#heldSince = undefined;
      this.#set(true, "acquired the leader lease");
      return Math.max(0, sentAt + this.#renewEveryMs - this.#mono());
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

  /**
   * One attempt on the SQLite row. A row won here leads at once, without Redis's hold of 2L/3 after a won SET NX: that
   * hold covers a key Redis lost while its holder still led, and a committed row is not lost that way. The file keeps
   * it across a crash of any process (WAL, synchronous=NORMAL); a power loss may drop the last transactions, but it
   * also stops every process of the host that could still be leading; a lone daemon thus leads right away.
   */
  async #acquireRow(signal: AbortSignal): Promise<number> {
    const timeout = this.#renewEveryMs;
    const poll = Math.min(this.#renewEveryMs, SQLITE_STANDBY_POLL_MS);
    // A read first: a standby's polls take no write lock while the row is held.
    const found = await this.#call(() => this.#row.read(), timeout, signal);
    if (signal.aborted) return 0;
    if (found.kind !== "ok") {
      this.#log.debug({ err: errorOf(found) }, "lease: the lease row was not read");
      return poll;
    }
    const held = found.value;
    const orphan = held && held.holder !== this.holderId && holderGone(held) ? held.holder : undefined;
    const other = held && held.holder !== this.holderId ? held : undefined;
    if (other && !orphan) {
      // Lapsed when the row has not changed for a whole lease of this process's own monotonic time: its holder renews
      // every L/3 and gives up at 2L/3. Its `until` is the holder's wall clock, and judging it by this one's made a
      // clock step give two leaders (forward) or none for as long as the step (back).
      const seen = this.#observed;
      if (seen?.holder !== other.holder || seen.until !== other.until) {
        this.#observed = { holder: other.holder, until: other.until, at: this.#mono() };
      }
      const unchanged = this.#mono() - this.#observed!.at;
      if (unchanged < this.leaseMs) {
        if (this.#seenHolder !== other.holder) {
          this.#seenHolder = other.holder;
          this.#log.info(
            { other_host: other.host, other_pid: other.pid, other_holder: other.holder },
            "another calbridge daemon holds the leader lease of this store: this one is a standby",
          );
        }
        return Math.min(poll, this.leaseMs - unchanged + 5);
      }
    }
    const earlier = await this.#earlierBuild(timeout, signal);
    if (signal.aborted) return 0;
    if (earlier !== undefined) return poll;
    const sentAt = this.#clock.now();
    const sentMono = this.#mono();
    const lease: LeaseHolder = {
      holder: this.holderId,
      host: hostname(),
      pid: process.pid,
      ...(PID_NS ? { pidNs: PID_NS } : {}),
      until: sentAt + this.leaseMs,
    };
    const claimed = await this.#call(() => this.#row.claim(lease, other, orphan), timeout, signal);
    if (signal.aborted) return 0;
    if (claimed.kind !== "ok") {
      this.#log.debug({ err: errorOf(claimed) }, "lease: acquire attempt failed");
      return poll;
    }
    if (!claimed.value) return 0; // another standby was first: read who holds it now
    // Only an answer that came back quickly leaves enough of the lease to act on; otherwise confirm again first.
    if (this.#mono() - sentMono >= this.#renewEveryMs) return 0;
    this.#confirmedAt = sentMono;
    this.#seenHolder = undefined;
    if (orphan) this.#log.warn({ other_holder: orphan }, "took over the leader lease of a daemon that is gone");
    this.#set(true, "acquired the leader lease");
    return Math.max(0, sentMono + this.#renewEveryMs - this.#mono());
  }

  /**
   * A daemon of a build from before the SQLite lease (it always led on SQLite, and kept only a heartbeat in meta,
   * EARLIER_BUILD_KEY, written every L/3 with a ttl of L): while its entry is fresh and its process is not known to be
   * gone, the first rolling update to this build stands by instead of leading beside it. The entry lapses within L of
   * that daemon's stop (an orderly stop deletes it). Undefined when there is none, or it cannot be read (then the row
   * decides, as before).
   */
  async #earlierBuild(timeout: number, signal: AbortSignal): Promise<{ host: string; pid: number } | undefined> {
    const read = await this.#call(
      () => this.#store.table<{ holder?: unknown; host?: unknown; pid?: unknown }>("meta").get(EARLIER_BUILD_KEY),
      timeout,
      signal,
    );
    if (read.kind !== "ok" || !read.value) return undefined;
    const { holder, host, pid } = read.value;
    if (typeof holder !== "string" || holder === this.holderId || typeof host !== "string" || typeof pid !== "number")
      return undefined;
    if (holderGone({ holder, host, pid, until: 0 })) return undefined;
    if (this.#seenHolder !== holder) {
      this.#seenHolder = holder;
      this.#log.warn(
        { other_host: host, other_pid: pid, other_holder: holder },
        "a daemon of an earlier calbridge build (without the SQLite leader lease) uses this store: this one stands by until it stops",
      );
    }
    return { host, pid };
  }

  /** One renewal while leader; gives leadership up when it cannot be confirmed in time. */
  async #renew(signal: AbortSignal): Promise<number> {
    const sentAt = this.#mono();
    const deadline = this.#confirmedAt + this.#safeMs;
    if (sentAt >= deadline) return this.#lose("no confirmed renewal in time");
    const until = this.#clock.now() + this.leaseMs; // the row's, compared by other processes: the wall clock
    const result = await this.#call(
      () => (this.#store.kind === "redis" ? this.#evalRenew() : this.#row.renew(this.holderId, until)),
      deadline - sentAt,
      signal,
    );
    this.#permitted(result);
    if (result.kind === "aborted") return 0;
    if (result.kind === "ok") {
      if (Number(result.value) !== 1) return this.#lose("the lease expired or another replica holds it");
      this.#confirmedAt = sentAt;
      return Math.max(0, sentAt + this.#renewEveryMs - this.#mono());
    }
    if (result.kind === "timeout") return this.#lose(`the store did not answer within ${deadline - sentAt} ms`);
    // The file holding the row is gone: no retry brings it back, and a daemon started now leads on a new file.
    if (result.kind === "error" && result.error instanceof StoreFileLostError) return this.#lose(result.error.message);
    const left = deadline - this.#mono();
    if (left <= 0) return this.#lose(`renewal failed: ${String(errorOf(result))}`);
    this.#log.warn({ err: errorOf(result), leftMs: left }, "lease: renewal failed, retrying");
    return Math.min(left, Math.max(50, Math.floor(this.leaseMs / 10)));
  }

  #evalRenew(): Promise<unknown> {
    return this.#redis.eval(RENEW_SCRIPT, { keys: [this.#key], arguments: [this.holderId, String(this.leaseMs)] });
  }

  /**
   * Notes a refusal under Redis's ACL (logged at error once, shown in /status) and, at a script's answer (`clears`),
   * its end: a SET going through says nothing of the scripts.
   */
  #permitted(outcome: Outcome<unknown>, clears = true): void {
    if (outcome.kind === "ok") {
      if (!clears) return;
      if (this.#problem !== undefined) this.#log.info("Redis runs the leader lease's commands again");
      this.#problem = undefined;
    } else if (outcome.kind === "error" && isNoPermission(outcome.error)) {
      const problem = `Redis refuses the leader lease: ${messageOf(outcome.error)}`;
      if (this.#problem === undefined) {
        this.#log.error({ fix: LEASE_PERMISSIONS_FIX }, `${problem}: no replica can lead`);
      }
      this.#problem = problem;
    }
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
        if (this.#subscriber !== sub) return;
        // Checked at start: a refusal here means the ACL changed since; hand-overs then wait for the lease to lapse.
        if (isNoPermission(err))
          this.#log.warn(
            { err, fix: SUBSCRIBE_PERMISSIONS_FIX },
            `lease: Redis refuses SUBSCRIBE on ${RELEASED_CHANNEL}: a standby takes over only when the lease lapses`,
          );
        else this.#log.debug({ err }, "lease: no release notices, polling only");
      });
  }

  /**
   * Subscribes once to the release notices' channel on a connection of its own; answers Redis's refusal (NOPERM), or
   * undefined (allowed, or not answered within `timeoutMs`: the lease's own retries and the store check say that).
   */
  async #probeSubscribe(timeoutMs: number): Promise<string | undefined> {
    const sub = this.#redis.duplicate();
    sub.on("error", () => {});
    try {
      const outcome = await this.#call(async () => {
        await sub.connect();
        await sub.subscribe(RELEASED_CHANNEL, () => {});
      }, timeoutMs);
      return outcome.kind === "error" && isNoPermission(outcome.error) ? messageOf(outcome.error) : undefined;
    } finally {
      if (sub.isOpen) sub.destroy();
    }
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

function messageOf(err: unknown): string {
  return err instanceof Error ? err.message : String(err);
}

function errorOf(outcome: Outcome<unknown>): unknown {
  return outcome.kind === "error" ? outcome.error : outcome.kind;
}
