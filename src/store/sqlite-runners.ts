// Owns the warning that a second `calbridge run` uses the same SQLite file. A SQLite store means one replica, always
// leader (lease.ts): two daemons on one file (a rolling update on a shared volume, a second `run` started by hand)
// both process the inbox, reconcile, poll and notify, so notifications and push channels double and both write to the
// calendars. Each daemon keeps a heartbeat entry in "meta"; finding another live daemon's entry there is logged as an
// error (again every ten minutes while it lasts), naming its host and pid. It stops nothing: a rolling update that
// waits for the new replica to be ready must not deadlock on it, and the old one stops by itself.
import { hostname } from "node:os";
import { type Clock, systemClock } from "../clock.ts";
import type { Logger } from "../log.ts";
import type { Store, Table } from "./store.ts";

export const RUNNER_KEY = "calbridge:runner";
/** How often a warning is repeated while another daemon keeps writing its heartbeat. */
const REPEAT_MS = 10 * 60_000;

export interface Runner {
  holder: string;
  host: string;
  pid: number;
  /** When the entry was written (epoch ms). */
  at: number;
}

export interface SqliteRunnersOptions {
  store: Store;
  /** This daemon's id (the lease's holder id). */
  holderId: string;
  /** How long an entry lives without a heartbeat (store.lease_seconds); written every third of it. */
  ttlMs: number;
  logger: Logger;
  clock?: Clock;
}

export class SqliteRunners {
  readonly #o: SqliteRunnersOptions;
  readonly #meta: Table<Runner>;
  readonly #clock: Clock;
  #timer: NodeJS.Timeout | undefined;
  #warnedAt = Number.NEGATIVE_INFINITY;

  constructor(options: SqliteRunnersOptions) {
    this.#o = options;
    this.#meta = options.store.table<Runner>("meta");
    this.#clock = options.clock ?? systemClock;
  }

  /** Looks for another daemon's heartbeat, writes this one's, and keeps doing so until stop(). */
  async start(): Promise<void> {
    await this.#beat();
    this.#timer = setInterval(
      () => {
        this.#beat().catch((err: unknown) => this.#o.logger.debug({ err }, "store heartbeat not written"));
      },
      Math.max(1000, Math.floor(this.#o.ttlMs / 3)),
    );
    this.#timer.unref();
  }

  /** Stops the heartbeat and removes this daemon's entry (only if it is still this daemon's). */
  async stop(): Promise<void> {
    if (this.#timer) clearInterval(this.#timer);
    this.#timer = undefined;
    const found = await this.#meta.get(RUNNER_KEY);
    if (found?.holder === this.#o.holderId) await this.#meta.delete(RUNNER_KEY);
  }

  async #beat(): Promise<void> {
    const found = await this.#meta.get(RUNNER_KEY);
    if (found && found.holder !== this.#o.holderId && !earlierSelf(found)) this.#warn(found);
    const now = this.#clock.now();
    const mine: Runner = { holder: this.#o.holderId, host: hostname(), pid: process.pid, at: now };
    await this.#meta.set(RUNNER_KEY, mine, this.#o.ttlMs);
  }

  #warn(other: Runner): void {
    const now = this.#clock.now();
    if (now - this.#warnedAt < REPEAT_MS) return;
    this.#warnedAt = now;
    this.#o.logger.error(
      { other_host: other.host, other_pid: other.pid, seen_ms_ago: Math.max(0, now - other.at) },
      "another calbridge daemon uses this SQLite store file: a SQLite store is for one replica, and both act as its leader (notifications and push channels double, both write to the calendars). Stop one of them; for two replicas use a Redis store, and for a rolling update on a shared volume stop the old one first (Recreate)",
    );
  }
}

/**
 * An entry left by an earlier daemon of this host that is gone: this very process (an app started again in it, as
 * tests do) or a pid no longer running. Another host's entry cannot be checked; it lapses with its ttl.
 */
function earlierSelf(r: Runner): boolean {
  if (r.host !== hostname()) return false;
  if (r.pid === process.pid) return true;
  try {
    process.kill(r.pid, 0);
    return false;
  } catch (err) {
    return (err as NodeJS.ErrnoException).code === "ESRCH";
  }
}
