// Owns the stray events a reconciliation removes itself: managed events that are not the appointment's own event and
// say nothing about the booking (no write-back, no change to the appointment's link).
import { eventIdFor } from "../calendar/ids.ts";
import type { Logger } from "../log.ts";
import { describeError } from "./errors.ts";
import type { HistoryRecorder } from "./history.ts";
import type { CalEvent, CalendarPort, PlanEntry, SyncRequest } from "./types.ts";

export interface Stray {
  id: string;
  therapistId: string;
  event: CalEvent;
}

export const STRAY_REASONS = {
  copy: "copy left behind in another calendar",
  earlier: "earlier generation of the event, restored beside the one that replaced it",
} as const;

const REASONS = new Set<string>(Object.values(STRAY_REASONS));

export const isStrayReason = (reason: string): boolean => REASONS.has(reason);

/** Plans the removal of `stray` for `reason`, keyed by its calendar and event id. */
export function removeStray(plan: PlanEntry[], planned: Map<string, PlanEntry>, stray: Stray, reason: string): void {
  const action: PlanEntry = {
    kind: "delete",
    appointmentId: stray.id,
    therapistId: stray.therapistId,
    eventId: stray.event.id!,
    reason,
  };
  plan.push(action);
  planned.set(`${stray.therapistId}/${stray.event.id}`, action);
}

/**
 * Whether a stray is calbridge's own earlier generation of the appointment's event, live again in the calendar the
 * link names: Google refused calbridge the id a person had deleted, the event went on under the next generation, and
 * the therapist then restored the old one from the Bin. Left alone, two events would show one appointment for good,
 * the old one perhaps at an old time (the poll and the stray pass ignore what is marked but not the linked event).
 */
export function earlierGeneration(
  link: { therapistId: string; generation?: number } | undefined,
  stray: Stray,
): boolean {
  if (!link || link.therapistId !== stray.therapistId || stray.event.status === "cancelled") return false;
  for (let g = 0; g < (link.generation ?? 0); g++) if (stray.event.id === eventIdFor(stray.id, g)) return true;
  return false;
}

const STRAY: SyncRequest = { reason: "reconcile", priority: "reconcile", origin: "reconcile" };

/**
 * Removes a copy a reconciliation found (no sync: nothing of it is the booking's), counting it (metrics, /status) and
 * telling its appointment's history; false when it failed (logged).
 */
export async function deleteStray(
  cal: Pick<CalendarPort, "delete">,
  action: Extract<PlanEntry, { kind: "delete" }>,
  log: Logger,
  told: { removed?(therapistId: string): void; history?: Pick<HistoryRecorder, "applied"> | undefined },
): Promise<boolean> {
  const deleted = await cal
    .delete(action.eventId)
    .catch((err: unknown) => void log.warn({ err: describeError(err) }, "stray event not removed"));
  if (!deleted) return false;
  if (deleted === "deleted") told.removed?.(action.therapistId);
  told.history?.applied(action.appointmentId, STRAY, action, { deleted }, { link: undefined, appt: null });
  return true;
}
