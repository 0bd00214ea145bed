// Owns how the sync engine's work queue is set up (lanes by priority, the enrichment lane's own worker, therapists
// taking turns, limits that follow Google's budgets) and what a write-back that waits tells it.
import type { Clock } from "../clock.ts";
import type { Logger } from "../log.ts";
import { type QuotaRates, queueLimits } from "./concurrency.ts";
import type { HistoryRecorder } from "./history.ts";
import { LeadershipLostError } from "./stopped.ts";
import { EngineStoppedError, LANES, mergeRequests, type Pending, therapistOf } from "./work.ts";
import { type RunVerdict, WorkQueue } from "./work-queue.ts";
import type { WritebackWaits } from "./writeback-gate.ts";

/**
 * Enrichments run one at a time, on a worker of their own: each mostly waits at the rate-limit gate for leftover
 * budget, and a shared worker waiting there would hold up the other lanes (a cold start's thousands of writes).
 */
const LANE_LIMITS = [Number.POSITIVE_INFINITY, Number.POSITIVE_INFINITY, Number.POSITIVE_INFINITY, 1];
const OWN_WORKERS = [LANES.enrich];

export interface EngineQueueOptions {
  /** Syncs at once at least, and at most (between them, as many as keep Google's budget busy). */
  concurrency: number;
  maxConcurrency: number;
  quota: QuotaRates | undefined;
  clock: Clock;
  run(key: string, pending: Pending): Promise<RunVerdict>;
}

export function engineQueue(o: EngineQueueOptions): WorkQueue<Pending> {
  const quota = o.quota;
  return new WorkQueue<Pending>({
    concurrency: o.concurrency,
    lanes: 4,
    laneLimits: LANE_LIMITS,
    ownWorkers: OWN_WORKERS,
    ...(quota ? { limits: () => queueLimits({ min: o.concurrency, max: o.maxConcurrency, quota }) } : {}),
    // Therapists take turns: one's backfill does not hold up another's changes.
    group: (p) => (p.customerId === undefined ? (therapistOf(p.request, undefined) ?? "") : ""),
    merge: mergeRequests,
    run: o.run,
    clock: o.clock,
  });
}

/** A write-back in its grace period runs again when the period ends (reading both sides again); a held one is done. */
export function waitsVerdict(history: HistoryRecorder, id: string, p: Pending, w: WritebackWaits, log: Logger) {
  // Each grace period is told once, however often the work runs while it waits; a new one (the change to write back
  // changed) is told again.
  history.waiting(id, p.request, w, p.gate.grace ?? p.gate);
  if (w.why === "held") {
    log.info({ action: w.action.kind }, "write-back held by the guard");
    p.resolveAll({ ok: true, action: w.action, waiting: "held" });
    return { done: true } as const;
  }
  log.info({ action: w.action.kind, grace_ms: w.inMs }, "write-back waits for the grace period");
  p.resolveAttempts({ ok: true, action: w.action, waiting: "grace" });
  const { booking: _, ...rest } = p.request;
  p.request = { ...rest, calendar: { reread: true } };
  return { done: false, retryInMs: w.inMs } as const;
}

/**
 * A run given up because the engine stops: no failure (nothing counted, no dead letter). Its callers are told, as for
 * work still queued: a webhook event stays in the inbox, an enrichment stays asked for in the link.
 */
export function stoppedVerdict(p: Pending): RunVerdict {
  for (const w of p.waiters.splice(0)) w.fail(new EngineStoppedError());
  return { done: true };
}

/**
 * A run refused, or given up before its next calendar write, because this replica lost the leader lease: no failure,
 * as for a stop; its callers hear LeadershipLostError. With `log`, the sync was under way: what it wrote stays, and the
 * next leader's sync of the appointment does the rest.
 */
export function lostVerdict(p: Pending, log?: Logger): RunVerdict {
  log?.info({ reason: p.request.reason }, "sync given up: leadership was lost; the next leader syncs the appointment");
  for (const w of p.waiters.splice(0)) w.fail(new LeadershipLostError());
  return { done: true };
}
