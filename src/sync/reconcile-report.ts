// Owns what a reconciliation is asked to do (its options) and what it reports: the plan without event bodies, the
// mass-deletion guard's verdict, what was left alone and why.
import type { Logger } from "../log.ts";
import type { ActionKind, PlanEntry } from "./types.ts";

export interface ReconcileOptions {
  dryRun?: boolean;
  /** Only this therapist's appointments and calendar. */
  therapistId?: string;
  /** Apply deletions even when the mass-deletion guard would hold them. */
  force?: boolean;
  log?: Logger;
}

export interface GuardReport {
  tripped: boolean;
  destructive: number;
  managed: number;
  limit: number;
}

export interface ReconcileReport {
  dryRun: boolean;
  startedAt: string;
  durationMs: number;
  window: { from: string; to: string };
  appointments: number;
  skippedUnmapped: number;
  /** Appointments left alone because their therapist's calendar could not be used this run. */
  waitingForCalendar: number;
  /** Calendar changes held by the write-back guard (not planned again: a person decides). */
  heldWritebacks: number;
  /**
   * Events that lack (or show an older value of) fields only the full form has, after this run: one full read each,
   * with leftover rate budget (at most `perMinute` a minute), so at least `minutes` minutes.
   */
  enrichment?: { pending: number; minutes: number; perMinute: number };
  managedEvents: number;
  /** Calendars listed in full this run. */
  calendarsListed: number;
  /** Calendars not listed: their side was their incremental sync (see full-listings.ts). */
  calendarsIncremental: number;
  /** Every action other than "none", as planned (without event bodies). */
  plan: PlanEntry[];
  counts: Partial<Record<ActionKind, number>>;
  guard: GuardReport;
  /** Therapists whose calendar could not be listed (their events were left alone). */
  calendarErrors: Record<string, string>;
  failed: number;
  /**
   * Appointments left alone because their link in the store cannot be read (a damaged record): not synced until it is
   * restored or removed. The run is not ok, but still counts as the last successful reconciliation (/readyz).
   */
  unreadableLinks: string[];
  ok: boolean;
}

/** The run's report, with its counts and verdict, and the one log line that sums it up. */
export function reportOf(r: Omit<ReconcileReport, "counts" | "ok">, log: Logger): ReconcileReport {
  const counts: Partial<Record<ActionKind, number>> = {};
  for (const a of r.plan) counts[a.kind] = (counts[a.kind] ?? 0) + 1;
  const ok =
    r.failed === 0 && r.unreadableLinks.length === 0 && !r.guard.tripped && Object.keys(r.calendarErrors).length === 0;
  log.info(
    {
      dry_run: r.dryRun,
      appointments: r.appointments,
      managed: r.managedEvents,
      calendars_listed: r.calendarsListed,
      calendars_incremental: r.calendarsIncremental,
      skipped_unmapped: r.skippedUnmapped,
      waiting_for_calendar: r.waitingForCalendar,
      held_writebacks: r.heldWritebacks,
      enrichments_pending: r.enrichment?.pending ?? 0,
      counts,
      failed: r.failed,
      unreadable_links: r.unreadableLinks.length,
      guard_tripped: r.guard.tripped,
      duration_ms: r.durationMs,
    },
    "reconciliation finished",
  );
  return { ...r, counts, ok };
}
