// Owns the meaning of healthy and ready: the HealthSource the daemon exposes, and the readiness checks behind
// GET /readyz (store answers and takes a write, its disk has room, reconciliation recent, booking API reachable), each
// with the reason it fails.
import { statfs } from "node:fs/promises";
import { dirname, resolve } from "node:path";
import { createTask } from "node-cron";
import type { StatusSnapshot } from "./status-page.ts";

export interface HealthSource {
  /** Resolves when the store answers a round trip; rejects (or hangs) when it does not. */
  storePing(): Promise<void>;
  /**
   * Resolves when the store accepts a small write (a probe entry); rejects when it refuses writes (a full disk, a
   * read-only file system, Redis over its maxmemory), which a ping alone does not show.
   */
  storeWrite(): Promise<void>;
  /** The folder of a file-backed store (SQLite), whose free space is checked; undefined for Redis. */
  storeFolder?: string;
  /**
   * Epoch ms of the last successful full reconciliation, by any replica (read it from the shared store, so a
   * standby stays ready while the leader reconciles), or undefined when there was none yet.
   */
  lastReconcileAt(): number | undefined;
  /** Epoch ms when the daemon started. */
  startedAt: number;
  /**
   * Whether the booking API answers, from the daemon's own requests to it (see src/booking/reachability.ts): not ready
   * after a few failed requests in a row (no answer, 5xx, credentials refused) or a reconciliation failing on them,
   * ready again at the next answer. A standby, which makes no booking calls, reports ok.
   */
  bookingReachable(): { ok: boolean; detail?: string };
  status(): Promise<StatusSnapshot>;
}

export interface ReadinessOptions {
  /** A reconciliation older than this makes the daemon unready (e.g. 3 × the cron interval). Default 45 min. */
  maxReconcileAgeMs?: number;
  /** After start, ready without a recent reconciliation for this long. Default: maxReconcileAgeMs. */
  startupGraceMs?: number;
  /**
   * When a reload last changed maxReconcileAgeMs (the cron): the runs before it were made on the old schedule, so the
   * new limit counts from then (a reconciliation made more frequent failed /readyz at once, before it ran once).
   */
  scheduleChangedAt?: number;
  /** A store ping or write probe slower than this fails the check. Default 2 s. */
  storeTimeoutMs?: number;
  /** Less free space than this in the store's folder fails the check (0: no check). Default 64 MiB. */
  minFreeBytes?: number;
}

export interface Check {
  ok: boolean;
  detail: string;
}

export interface Readiness {
  ready: boolean;
  checks: { store: Check; store_write: Check; disk: Check; reconcile: Check; booking: Check };
}

const DEFAULT_MAX_AGE_MS = 45 * 60_000;

/** 3 × the longest gap between the next runs of a cron expression (uneven schedules such as "0 9,17 * * *"). */
export async function reconcileMaxAgeMs(cron: string, factor = 3): Promise<number> {
  const task = createTask(cron, () => {});
  try {
    const runs = task.getNextRuns(24).map((d) => d.getTime());
    let gap = 0;
    for (let i = 1; i < runs.length; i++) gap = Math.max(gap, runs[i]! - runs[i - 1]!);
    return gap > 0 ? gap * factor : DEFAULT_MAX_AGE_MS;
  } finally {
    await task.destroy();
  }
}

function seconds(ms: number): string {
  return `${Math.round(ms / 1000)}s`;
}

type ProbeKind = "ping" | "write";

/**
 * Per check and source: the probe in flight, and the last probe's failure. A check while a probe is still out waits for
 * that one instead of sending another: behind another process's SQLite lock each write waits up to the busy timeout
 * (10 s), and one more per /readyz would queue up without end. A probe that failed after its check gave up on it ("no
 * answer within 2000 ms") is named by the next check: its SQLITE_BUSY is what tells ops why.
 */
const probes = {
  ping: new WeakMap<object, { work: Promise<unknown>; startedAt: number }>(),
  write: new WeakMap<object, { work: Promise<unknown>; startedAt: number }>(),
};
const lastFailures = { ping: new WeakMap<object, string>(), write: new WeakMap<object, string>() };

/** A probe out longer than this is not waited for again (a store call that never settles must not hold /readyz). */
const PROBE_REUSE_MS = 30_000;

function probeOnce(kind: ProbeKind, source: object, start: () => Promise<unknown>): Promise<unknown> {
  const running = probes[kind].get(source);
  if (running && performance.now() - running.startedAt < PROBE_REUSE_MS) return running.work;
  const probe = { work: start(), startedAt: performance.now() };
  probes[kind].set(source, probe);
  probe.work.then(
    () => lastFailures[kind].delete(source),
    (err: unknown) => {
      const after = ((performance.now() - probe.startedAt) / 1000).toFixed(1);
      lastFailures[kind].set(source, `failed after ${after} s: ${messageOf(err)}`);
    },
  );
  void probe.work
    .catch(() => {})
    .finally(() => {
      if (probes[kind].get(source) === probe) probes[kind].delete(source);
    });
  return probe.work;
}

function withTimeout<T>(work: Promise<T>, timeoutMs: number, note: () => string = () => ""): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  const timeout = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new Error(`no answer within ${timeoutMs} ms${note()}`)), timeoutMs);
  });
  return Promise.race([work, timeout]).finally(() => clearTimeout(timer));
}

function lateNote(kind: ProbeKind, source: object): string {
  const failure = lastFailures[kind].get(source);
  return failure ? ` (the probe before ${failure})` : "";
}

const messageOf = (err: unknown) => (err instanceof Error ? err.message : String(err));

/** The store's round trip (also what `calbridge doctor` runs). */
export async function checkStore(source: Pick<HealthSource, "storePing">, timeoutMs: number): Promise<Check> {
  try {
    await withTimeout(
      probeOnce("ping", source, () => source.storePing()),
      timeoutMs,
      () => lateNote("ping", source),
    );
    return { ok: true, detail: "store answered" };
  } catch (err) {
    return { ok: false, detail: `store unreachable: ${messageOf(err)}` };
  }
}

/** The store's write probe (also what `calbridge doctor` runs). */
export async function checkStoreWrite(source: Pick<HealthSource, "storeWrite">, timeoutMs: number): Promise<Check> {
  try {
    await withTimeout(
      probeOnce("write", source, () => source.storeWrite()),
      timeoutMs,
      () => lateNote("write", source),
    );
    return { ok: true, detail: "store took a write" };
  } catch (err) {
    return { ok: false, detail: `store refuses writes: ${messageOf(err)}` };
  }
}

const MIB = 1024 * 1024;

/** The folder of a sqlite:// store as openStore resolves it; undefined for Redis and in-memory stores. */
export function storeFolderOf(storeUrl: string, cwd = process.cwd()): string | undefined {
  if (!storeUrl.startsWith("sqlite://")) return undefined;
  const path = storeUrl.slice("sqlite://".length);
  return path === ":memory:" ? undefined : dirname(resolve(cwd, path));
}

/** Free space in the store's folder against store.min_free_mb (also what `calbridge doctor` runs). */
export async function checkDisk(folder: string | undefined, minFreeBytes: number, timeoutMs = 2000): Promise<Check> {
  if (folder === undefined) return { ok: true, detail: "no local store file" };
  if (minFreeBytes <= 0) return { ok: true, detail: "free space not checked (store.min_free_mb is 0)" };
  try {
    // Bounded too: statfs takes a thread of libuv's pool, which SQLite statements waiting for another process's lock
    // can hold for their whole busy timeout.
    const fs = await withTimeout(statfs(folder), timeoutMs);
    const free = fs.bavail * fs.bsize;
    const shown = `${Math.floor(free / MIB)} MiB free in ${folder}`;
    if (free >= minFreeBytes) return { ok: true, detail: shown };
    return {
      ok: false,
      detail: `${shown}, below store.min_free_mb (${Math.round(minFreeBytes / MIB)} MiB): writes will soon fail`,
    };
  } catch (err) {
    return { ok: false, detail: `free space of ${folder} unknown: ${messageOf(err)}` };
  }
}

function checkReconcile(source: HealthSource, options: ReadinessOptions, now: number): Check {
  const maxAge = options.maxReconcileAgeMs ?? DEFAULT_MAX_AGE_MS;
  const grace = options.startupGraceMs ?? maxAge;
  const last = source.lastReconcileAt();
  if (last !== undefined && now - last <= maxAge) {
    return { ok: true, detail: `last successful reconciliation ${seconds(now - last)} ago` };
  }
  const changed = options.scheduleChangedAt;
  if (changed !== undefined && changed <= now && now - changed <= maxAge) {
    const before = last === undefined ? "none yet" : `the last ${seconds(now - last)} ago`;
    return {
      ok: true,
      detail: `reconciliation schedule changed ${seconds(now - changed)} ago (${before}); limit ${seconds(maxAge)} from then`,
    };
  }
  const uptime = now - source.startedAt;
  if (uptime <= grace) {
    return { ok: true, detail: `starting: ${seconds(uptime)} since start, grace period ${seconds(grace)}` };
  }
  return {
    ok: false,
    detail:
      last === undefined
        ? `no successful reconciliation in ${seconds(uptime)} since start (grace period ${seconds(grace)})`
        : `last successful reconciliation ${seconds(now - last)} ago, older than ${seconds(maxAge)}`,
  };
}

function checkBooking(source: HealthSource): Check {
  const { ok, detail } = source.bookingReachable();
  if (ok) return { ok, detail: detail ?? "booking API reachable" };
  return { ok, detail: `booking API unreachable: ${detail ?? "last request failed"}` };
}

export async function checkReadiness(source: HealthSource, options: ReadinessOptions, now: number): Promise<Readiness> {
  const timeoutMs = options.storeTimeoutMs ?? 2000;
  const [store, store_write, disk] = await Promise.all([
    checkStore(source, timeoutMs),
    checkStoreWrite(source, timeoutMs),
    checkDisk(source.storeFolder, options.minFreeBytes ?? 64 * MIB, timeoutMs),
  ]);
  const reconcile = checkReconcile(source, options, now);
  const booking = checkBooking(source);
  const checks = { store, store_write, disk, reconcile, booking };
  return { ready: Object.values(checks).every((c) => c.ok), checks };
}
