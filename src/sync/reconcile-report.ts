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
  ok: boolean;
}
