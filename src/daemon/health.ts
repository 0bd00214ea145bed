// Owns the meaning of healthy and ready: the HealthSource the daemon exposes, and the readiness checks behind
// GET /readyz (store answers, reconciliation recent, booking API reachable), each with the reason it fails.
import { createTask } from "node-cron";
import type { StatusSnapshot } from "./status-page.ts";

export interface HealthSource {
  /** Resolves when the store answers a round trip; rejects (or hangs) when it does not. */
  storePing(): Promise<void>;
  /**
   * Epoch ms of the last successful full reconciliation, by any replica (read it from the shared store, so a
   * standby stays ready while the leader reconciles), or undefined when there was none yet.
   */
  lastReconcileAt(): number | undefined;
  /** Epoch ms when the daemon started. */
  startedAt: number;
  /** Whether the booking API's last answer proved it reachable (not a network or credentials failure). */
  bookingReachable(): { ok: boolean; detail?: string };
  status(): Promise<StatusSnapshot>;
}

export interface ReadinessOptions {
  /** A reconciliation older than this makes the daemon unready (e.g. 3 × the cron interval). Default 45 min. */
  maxReconcileAgeMs?: number;
  /** After start, ready without a recent reconciliation for this long. Default: maxReconcileAgeMs. */
  startupGraceMs?: number;
  /** A store ping slower than this fails the check. Default 2 s. */
  storeTimeoutMs?: number;
}

export interface Check {
  ok: boolean;
  detail: string;
}

export interface Readiness {
  ready: boolean;
  checks: { store: Check; reconcile: Check; booking: Check };
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

async function checkStore(source: HealthSource, timeoutMs: number): Promise<Check> {
  let timer: NodeJS.Timeout | undefined;
  const timeout = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new Error(`no answer within ${timeoutMs} ms`)), timeoutMs);
  });
  try {
    await Promise.race([source.storePing(), timeout]);
    return { ok: true, detail: "store answered" };
  } catch (err) {
    return { ok: false, detail: `store unreachable: ${err instanceof Error ? err.message : String(err)}` };
  } finally {
    clearTimeout(timer);
  }
}

function checkReconcile(source: HealthSource, options: ReadinessOptions, now: number): Check {
  const maxAge = options.maxReconcileAgeMs ?? DEFAULT_MAX_AGE_MS;
  const grace = options.startupGraceMs ?? maxAge;
  const last = source.lastReconcileAt();
  if (last !== undefined && now - last <= maxAge) {
    return { ok: true, detail: `last successful reconciliation ${seconds(now - last)} ago` };
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
  const store = await checkStore(source, options.storeTimeoutMs ?? 2000);
  const reconcile = checkReconcile(source, options, now);
  const booking = checkBooking(source);
  return { ready: store.ok && reconcile.ok && booking.ok, checks: { store, reconcile, booking } };
}
