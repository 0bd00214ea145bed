// Owns what a finished reconciliation changes in the notifications' facts: the streak of failed runs and the state of
// the mass-deletion guard, and a description of a failure that never quotes an API's free text (which may echo
// customer data): error codes, statuses and counts only.
import { safeErrorSummary } from "../sync/errors.ts";
import type { ReconcileReport } from "../sync/reconcile.ts";
import type { ReconcileFacts } from "./view.ts";

/** A run's end: its report, or the error that stopped it. */
export type ReconcileOutcome = { report: ReconcileReport } | { error: unknown };

/**
 * The facts after `outcome`. A run counts as failed when it stopped on an error, some appointments failed to sync, or
 * some were left alone because their link in the store cannot be read;
 * a run held by the guard is not a failure (the guard is its own condition), nor is a calendar that could not be
 * listed (its therapist's credentials or quota are).
 */
export function afterReconcile(
  prev: ReconcileFacts | undefined,
  outcome: ReconcileOutcome,
  now: number,
): ReconcileFacts {
  if ("error" in outcome) {
    return {
      ...(prev?.guard ? { guard: prev.guard } : {}),
      failures: (prev?.failures ?? 0) + 1,
      lastError: safeErrorSummary(outcome.error),
      at: now,
    };
  }
  const { report } = outcome;
  const guard = { tripped: report.guard.tripped, destructive: report.guard.destructive, managed: report.guard.managed };
  if (report.failed > 0) {
    const n = report.failed;
    return {
      guard,
      failures: (prev?.failures ?? 0) + 1,
      lastError: `${n} ${n === 1 ? "appointment" : "appointments"} failed to sync`,
      at: now,
    };
  }
  // A damaged link leaves its appointment out of every run until a person restores or removes it: told as a failure.
  const unreadable = report.unreadableLinks.length;
  if (unreadable > 0) {
    return {
      guard,
      failures: (prev?.failures ?? 0) + 1,
      lastError:
        `${unreadable} ${unreadable === 1 ? "appointment was" : "appointments were"} left alone: ` +
        "the store's link record cannot be read; restore it from a backup or remove it",
      at: now,
    };
  }
  return { guard, failures: 0, at: now };
}
