// Owns what one entry of an appointment's history says: when, which side caused it, what calbridge did, and the other
// side's answer (its error code, never its message). Pure: made from an action, a wait or a failure. Entries hold ids,
// times, statuses, kinds, reasons and codes only, never a customer's details nor an event's title or description.
import { BookingApiError } from "../booking/errors.ts";
import { CalendarError } from "../calendar/errors.ts";
import { RenderError } from "../calendar/render.ts";
import type { Applied } from "./apply.ts";
import { CalendarUnavailableError, OtherCalendarUnavailableError } from "./mapping.ts";
import type { Action, Link, Origin, Snapshot, SyncRequest } from "./types.ts";

export type HistoryKind =
  | "event_created"
  | "event_updated"
  | "event_restored"
  | "event_deleted"
  | "event_moved"
  | "event_relocated"
  | "event_adopted"
  | "booking_changed"
  | "writeback"
  | "writeback_waiting"
  | "writeback_held"
  | "sync_failed"
  | "dead_letter";

export interface HistoryEntry {
  /** When (ISO 8601, UTC). */
  at: string;
  /** Which side caused it. */
  origin: Origin;
  /** What asked for the sync: a webhook's type, "calendar change", "reconcile", "retry of ...". */
  trigger: string;
  kind: HistoryKind;
  /** Why calbridge decided so (the plan's reason). */
  reason?: string;
  /** The therapist whose calendar the event was in. */
  therapistId?: string;
  /** A reassignment: the therapist whose calendar the event went (or was moved) to. */
  toTherapistId?: string;
  /** A "deletion" that was a move to another calendar of the therapist's account: that calendar. */
  calendarId?: string;
  eventId?: string;
  /** The event's times as written, or the start sent to the booking service. */
  start?: string;
  end?: string;
  /** The booking's status at the time. */
  status?: string;
  /** A write-back: what was sent (or would have been). */
  writeback?: "reschedule" | "cancel" | "reassign";
  /**
   * The answer: ok, already, refused, failed, gone, disabled, moved_back, rewritten (write-backs); deleted, already_gone,
   * not_mapped (deletions).
   */
  result?: string;
  /** Who answered with an error, and its code (booking `error.code`, Google's reason) and HTTP status. */
  side?: "booking" | "google" | "calbridge";
  code?: string;
  httpStatus?: number;
  attempts?: number;
  /** A write-back's grace period: how long it waits. */
  waitSeconds?: number;
  /** The same step taken again: how often in all, and when last. */
  repeats?: number;
  lastAt?: string;
}

const BY_PRIORITY: Record<SyncRequest["priority"], Origin> = {
  webhook: "booking",
  writeback: "calendar",
  reconcile: "reconcile",
  enrich: "reconcile",
};

/** Who caused a request: an administrator's decision, else the request's own origin, else what its priority serves. */
export function originOf(request: SyncRequest): Origin {
  return request.override ? "admin" : (request.origin ?? BY_PRIORITY[request.priority]);
}

const RANK: Record<Origin, number> = { admin: 0, booking: 1, calendar: 2, reconcile: 3 };

/** Of two merged requests' origins the one that says most: an administrator, a booking webhook, a calendar change. */
export function mergeOrigin(a: Origin | undefined, b: Origin | undefined): Origin | undefined {
  if (!a || !b) return a ?? b;
  return RANK[b] <= RANK[a] ? b : a;
}

/** Who answered with an error, and its code: never the message, which may repeat what was sent. */
export function answerOf(err: unknown): Pick<HistoryEntry, "side" | "code" | "httpStatus"> {
  if (err instanceof BookingApiError) return { side: "booking", code: err.code, ...status(err.status) };
  if (err instanceof CalendarError) return { side: "google", code: err.reason ?? err.kind, ...status(err.status) };
  if (err instanceof OtherCalendarUnavailableError) return { side: "calbridge", code: "other_calendar_unavailable" };
  if (err instanceof CalendarUnavailableError) return { side: "calbridge", code: "calendar_unavailable" };
  if (err instanceof RenderError) return { side: "calbridge", code: "render_error" };
  return { side: "calbridge", code: err instanceof Error ? err.name : "error" };
}

const status = (s: number | undefined) => (s === undefined ? {} : { httpStatus: s });

const KIND = {
  create: "event_created",
  update: "event_updated",
  restore: "event_restored",
  delete: "event_deleted",
  move: "event_moved",
  adopt: "event_adopted",
} as const;

const UNSENT =
  "the event was deleted in the calendar while calbridge had no record of it: the cancellation was not sent, and the event is back with a note";

/**
 * The entry for an action carried out; undefined when there is nothing to tell (nothing to do, and the booking's status
 * did not change either): a warm reconciliation of thousands of unchanged appointments records nothing.
 */
export function actionEntry(
  base: Pick<HistoryEntry, "at" | "origin" | "trigger">,
  action: Action,
  applied: Applied,
  before: { link: Link | undefined; appt: Snapshot | null },
): HistoryEntry | undefined {
  const status = before.appt?.status ?? undefined;
  const withStatus = status ? { status } : {};
  switch (action.kind) {
    case "none": {
      const was = before.link?.booking.status;
      if (!before.link || !status || was === status) return undefined;
      return { ...base, kind: "booking_changed", reason: action.reason, ...withStatus };
    }
    case "adopt":
      return {
        ...base,
        kind: KIND.adopt,
        reason: action.reason,
        therapistId: action.therapistId,
        ...ids(action.event.id),
      };
    case "create":
    case "update":
    case "restore":
      return {
        ...base,
        kind: KIND[action.kind],
        reason: applied.unsent ? `${action.reason}; ${UNSENT}` : action.reason,
        therapistId: action.therapistId,
        eventId: applied.eventId ?? action.eventId,
        ...times(action.body.start.dateTime, action.body.end.dateTime),
        ...withStatus,
      };
    case "delete":
      return {
        ...base,
        kind: KIND.delete,
        reason: action.reason,
        therapistId: action.therapistId,
        eventId: action.eventId,
        ...(applied.deleted ? { result: applied.deleted } : {}),
        ...withStatus,
      };
    case "move":
      return {
        ...base,
        kind: KIND.move,
        reason: action.reason,
        therapistId: action.from.therapistId,
        toTherapistId: action.to.therapistId,
        eventId: applied.eventId ?? action.to.eventId,
        ...times(action.body.start.dateTime, action.body.end.dateTime),
        ...withStatus,
      };
    case "writeback_reschedule":
    case "writeback_cancel": {
      const wb = applied.writeback;
      // The event was moved, not deleted: the action's "event deleted in the calendar" would read as a cancellation in
      // a "who cancelled this?" dispute, though nothing was cancelled.
      const moved =
        wb?.kind === "reassign"
          ? `event moved to ${wb.therapistId ?? "?"}'s calendar`
          : wb?.result === "moved_back" || wb?.result === "rewritten"
            ? "event moved to another calendar of the account"
            : undefined;
      return {
        ...base,
        kind: "writeback",
        reason: moved ?? action.reason,
        therapistId: action.therapistId,
        ...(wb?.therapistId ? { toTherapistId: wb.therapistId } : {}),
        ...(wb?.calendarId ? { calendarId: wb.calendarId } : {}),
        writeback: wb?.kind ?? (action.kind === "writeback_cancel" ? "cancel" : "reschedule"),
        ...(action.kind === "writeback_reschedule" ? times(action.startTime) : {}),
        result: wb?.result ?? "skipped",
        ...(wb?.error !== undefined ? answerOf(wb.error) : {}),
        ...(wb?.status ? { status: wb.status } : withStatus),
      };
    }
  }
}

const ids = (eventId: string | null | undefined) => (eventId ? { eventId } : {});

/** Instants as UTC ISO strings, however the event or the request wrote them. */
function times(start: string | undefined, end?: string): Pick<HistoryEntry, "start" | "end"> {
  const utc = (v: string) => (Number.isNaN(Date.parse(v)) ? v : new Date(Date.parse(v)).toISOString());
  return { ...(start ? { start: utc(start) } : {}), ...(end ? { end: utc(end) } : {}) };
}

/** A write-back not sent now: in its grace period, or held by the guard. */
export function waitEntry(
  base: Pick<HistoryEntry, "at" | "origin" | "trigger">,
  action: Action,
  why: "grace" | "held",
  inMs: number,
): HistoryEntry {
  return {
    ...base,
    kind: why === "grace" ? "writeback_waiting" : "writeback_held",
    reason: action.reason,
    ...("therapistId" in action ? { therapistId: action.therapistId } : {}),
    writeback: action.kind === "writeback_cancel" ? "cancel" : "reschedule",
    ...(action.kind === "writeback_reschedule" ? times(action.startTime) : {}),
    ...(why === "grace" ? { waitSeconds: Math.ceil(inMs / 1000) } : {}),
  };
}

/** A sync that failed: retried (told once per chain of retries), or given up on as a dead letter. */
export function failureEntry(
  base: Pick<HistoryEntry, "at" | "origin" | "trigger">,
  err: unknown,
  final: boolean,
  attempts: number,
): HistoryEntry {
  // A cancellation waiting for a calendar the event may have been moved to: which calendar lost it, and the first
  // calendar that could not be looked at.
  const waiting =
    err instanceof OtherCalendarUnavailableError
      ? { writeback: "cancel" as const, therapistId: err.from, toTherapistId: err.therapistId }
      : {};
  return { ...base, kind: final ? "dead_letter" : "sync_failed", ...waiting, ...answerOf(err), attempts };
}
