// Owns the leader lease of a one-shot command that writes calendars or the booking service (`reconcile`, `purge`):
// taken for the command's duration when no daemon holds it (a daemon started meanwhile stands by until it is released),
// or, when a live daemon leads the store, the holder named so the command can refuse instead of writing beside it (two
// writers on the same calendars and booking API: duplicate inserts, double write-backs, a second rate budget).
import { systemClock } from "../clock.ts";
import type { Config } from "../config/schema.ts";
import type { Logger } from "../log.ts";
import { defaultHolderId, holderGone, LEADER_KEY, LeaderLease } from "../store/lease.ts";
import type { Store } from "../store/store.ts";

/** The lease, held by this command until release(). */
export interface HeldLease {
  kind: "held";
  /** Still the lease's holder (a store that stalls past the lease ends it: the command's writes then stop). */
  leading(): boolean;
  /** Gives the lease back (a daemon standing by leads at once); idempotent. */
  release(): Promise<void>;
}

/** Another process leads the store: host and pid as its lease names them (undefined when it does not say). */
export interface BusyLease {
  kind: "busy";
  holder: string;
  host?: string;
  pid?: number;
}

/** Where builds before the SQLite lease kept their daemon's heartbeat in meta (as lease.ts). */
const EARLIER_BUILD_KEY = "calbridge:runner";

/**
 * Takes the store's leader lease for a one-shot command, or answers who holds it. A memory store is this process's
 * alone: held at once. On Redis a key won fresh is held 2/3 of store.lease_seconds before it counts (lease.ts: a key
 * Redis lost may still have a leader), so the command waits that long when no daemon runs.
 */
export async function takeCommandLease(store: Store, config: Config, log: Logger): Promise<HeldLease | BusyLease> {
  if (store.kind === "memory" || (store.kind === "sqlite" && store.leaseRow === undefined)) {
    return { kind: "held", leading: () => true, release: async () => {} };
  }
  const lease = new LeaderLease({
    store,
    holderId: defaultHolderId(),
    leaseMs: config.store.lease_seconds * 1000,
    clock: systemClock,
    logger: log,
  });
  await lease.start();
  const giveUpAt = systemClock.now() + lease.leaseMs + 1000;
  try {
    while (!lease.isLeader) {
      const other = await otherHolder(store, lease.holderId);
      if (other) {
        await lease.stop();
        return other;
      }
      if (systemClock.now() > giveUpAt) {
        await lease.stop();
        return { kind: "busy", holder: "unknown (the lease could not be taken)" };
      }
      await systemClock.sleep(100);
    }
  } catch (err) {
    await lease.stop().catch(() => {});
    throw err;
  }
  let released = false;
  return {
    kind: "held",
    leading: () => lease.isLeader,
    release: async () => {
      if (released) return;
      released = true;
      await lease.stop({ timeoutMs: 2000 });
    },
  };
}

/** The live holder of the lease other than `self`, if any (a lapsed row, or one whose process is gone, is none). */
async function otherHolder(store: Store, self: string): Promise<BusyLease | undefined> {
  if (store.kind === "redis") {
    const value = await store.redis?.get(LEADER_KEY);
    if (typeof value !== "string" || value === self) return undefined;
    // defaultHolderId(): host:pid:random
    const m = /^(.*):(\d+):[^:]*$/.exec(value);
    return m ? { kind: "busy", holder: value, host: m[1]!, pid: Number(m[2]) } : { kind: "busy", holder: value };
  }
  const row = await store.leaseRow?.read();
  if (row) {
    if (row.holder === self || row.until <= systemClock.now() || holderGone(row)) return undefined;
    return { kind: "busy", holder: row.holder, host: row.host, pid: row.pid };
  }
  // No row, yet not taken: a daemon of a build before the SQLite lease (its heartbeat in meta) runs on the file.
  const earlier = await store.table<{ holder?: unknown; host?: unknown; pid?: unknown }>("meta").get(EARLIER_BUILD_KEY);
  if (earlier && typeof earlier.host === "string" && typeof earlier.pid === "number") {
    return { kind: "busy", holder: String(earlier.holder), host: earlier.host, pid: earlier.pid };
  }
  return undefined;
}

/** "host H, pid P" of a busy lease, for messages. */
export function describeHolder(busy: BusyLease): string {
  return busy.host !== undefined && busy.pid !== undefined
    ? `host ${busy.host}, pid ${busy.pid}`
    : `lease holder ${busy.holder}`;
}
