// Owns one appointment's pending sync work as the engine's queue holds it: the merged request, the callers waiting
// for it, and its standing in the retry policy (attempts spent, failing since).
import type { Priority } from "../booking/gate.ts";
import { mergeOrigin } from "./history-entry.ts";
import { type BookingState, mergeHints } from "./snapshot.ts";
import type { CalendarHint, SyncOutcome, SyncRequest } from "./types.ts";
import type { GateState } from "./writeback-gate.ts";

/** A caller waiting for a request: for the outcome of the attempt that covers it, or for the engine to be done. */
/** The work queue's lane of each priority: webhooks first, then write-backs, the reconciliation, enrichments. */
export const LANES: Record<Priority, number> = { webhook: 0, writeback: 1, reconcile: 2, enrich: 3 };

export { EngineStoppedError } from "./stopped.ts";

export interface Settle {
  until: "attempt" | "settled";
  resolve(outcome: SyncOutcome): void;
  fail(err: Error): void;
}

export interface Pending {
  request: SyncRequest;
  /** Set for a customer's re-render (its upcoming appointments are synced); unset for an appointment's sync. */
  customerId?: string;
  waiters: Settle[];
  /** Failed attempts that count against the attempt budget. */
  counted: number;
  /** Failed attempts of any kind since the last success. */
  runs: number;
  /** Our clock at the first failure of this chain of retries. */
  failingSince?: number;
  /** A webhook joining the chain gave it a fresh attempt budget already (once per chain: mergeRequests). */
  refreshed?: true;
  /** The write-back gate's state (the grace period running, and the write-back it is for). */
  gate: GateState;
  resolveAll(outcome: SyncOutcome): void;
  resolveAttempts(outcome: SyncOutcome): void;
}

function pending(request: SyncRequest, waiters: Settle[], from?: Pending): Pending {
  const p: Pending = {
    request,
    waiters,
    ...(from?.customerId !== undefined ? { customerId: from.customerId } : {}),
    counted: from?.counted ?? 0,
    runs: from?.runs ?? 0,
    ...(from?.failingSince !== undefined ? { failingSince: from.failingSince } : {}),
    ...(from?.refreshed ? { refreshed: true as const } : {}),
    gate: from?.gate ?? {},
    resolveAll(outcome) {
      const all = p.waiters;
      p.waiters = [];
      for (const w of all) w.resolve(outcome);
    },
    resolveAttempts(outcome) {
      const now = p.waiters.filter((w) => w.until === "attempt");
      p.waiters = p.waiters.filter((w) => w.until !== "attempt");
      for (const w of now) w.resolve(outcome);
    },
  };
  return p;
}

export function toPending(request: SyncRequest, waiter: Settle, customerId?: string): Pending {
  const p = pending(request, [waiter]);
  if (customerId !== undefined) p.customerId = customerId;
  return p;
}

const RANK: Record<Priority, number> = { webhook: 0, writeback: 1, reconcile: 2, enrich: 3 };

/**
 * A pending request and a newer one for the same appointment as one: the older one's retry standing is kept, but for
 * a webhook's, which brings new facts from the booking service and gets tries of its own: a cancellation joining a
 * move's chain on its last try (an outage of a few seconds) went to the dead letters on one try run at once, and its
 * event stayed until the next reconciliation. Once per chain: webhooks arriving often (a customer's re-renders, a
 * sender's retries) would otherwise keep a failing sync from ever ending, its webhooks unacknowledged.
 */
export function mergeRequests(older: Pending, newer: Pending): Pending {
  const merged = pending(mergeRequest(older.request, newer.request), [...older.waiters, ...newer.waiters], older);
  if (
    newer.request.priority === "webhook" &&
    newer.request.origin === "booking" &&
    older.counted > 0 &&
    !older.refreshed
  ) {
    merged.counted = 0;
    merged.refreshed = true;
  }
  return merged;
}

export function mergeRequest(a: SyncRequest, b: SyncRequest): SyncRequest {
  const booking = mergeHints(a.booking, b.booking);
  const calendar = mergeCalendar(a.calendar, b.calendar);
  const log = b.log ?? a.log;
  const override = b.override ?? a.override;
  const origin = mergeOrigin(a.origin, b.origin);
  const first = RANK[a.priority] < RANK[b.priority] ? a : b;
  return {
    // An enrichment joining another sync is not that sync's reason.
    reason: b.priority === "enrich" && a.priority !== "enrich" ? a.reason : b.reason,
    priority: first.priority,
    ...(origin ? { origin } : {}),
    ...(booking ? { booking } : {}),
    ...(calendar ? { calendar } : {}),
    ...(override ? { override } : {}),
    ...(a.enrich || b.enrich ? { enrich: true as const } : {}),
    ...(log ? { log } : {}),
  };
}

/** The later of two sightings of the event; "read it again" beats any sighting. */
function mergeCalendar(a: CalendarHint | undefined, b: CalendarHint | undefined): CalendarHint | undefined {
  if (!a || !b) return a ?? b;
  if ("reread" in a) return a;
  if ("reread" in b) return b;
  return (b.seenAt ?? Number.NEGATIVE_INFINITY) >= (a.seenAt ?? Number.NEGATIVE_INFINITY) ? b : a;
}

export function seenIn(request: SyncRequest): string | undefined {
  const cal = request.calendar;
  return cal && !("reread" in cal) ? cal.therapistId : undefined;
}

export function therapistOf(request: SyncRequest, state: BookingState | undefined): string | undefined {
  const cal = request.calendar;
  if (cal && !("reread" in cal)) return cal.therapistId;
  return state?.appt.therapist_id ?? request.booking?.appt?.therapist_id ?? undefined;
}

/**
 * What a retry asks for. After an ordinary failure it reads both sides again (the state that failed may be stale by
 * now). While the calendar is unavailable, the booking state already read is kept as the hint: retries every few
 * minutes for hours would otherwise spend the booking service's rate budget on reads that change nothing. It keeps
 * the time it was read: stamped with the failure's, it beat a listing read in between (newer) that merged into the
 * retry, and the retry wrote the older times into the calendar. A webhook's payload, not read by us, is read again.
 */
export function retryRequest(request: SyncRequest, unavailable: boolean, read: BookingState | undefined): SyncRequest {
  const calendar = request.calendar ? { reread: true as const } : undefined;
  const { booking: _, calendar: __, ...rest } = request;
  const booking =
    unavailable && read?.readAt !== undefined
      ? { appt: read.appt, readAt: read.readAt, ...(read.full ? { full: true } : {}) }
      : undefined;
  return {
    ...rest,
    reason: rest.reason.startsWith("retry of ") ? rest.reason : `retry of ${rest.reason}`,
    ...(booking ? { booking } : {}),
    ...(calendar ? { calendar } : {}),
  };
}
