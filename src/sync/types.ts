// Owns the sync engine's records and the ports it drives: what the store remembers per appointment (the link, as
// vdirsyncer's status database does for each item) and the narrow interfaces of the booking API and a calendar.
import type { calendar_v3 } from "googleapis";
import type { Priority } from "../booking/gate.ts";
import type { Appointment } from "../booking/schemas.ts";
import type { CallOptions } from "../booking/types.ts";
import type { RenderedEvent } from "../calendar/render.ts";
import type { Logger } from "../log.ts";
import type { WritebackOutcome } from "./writeback-outcome.ts";

export type CalEvent = calendar_v3.Schema$Event;

/** A calendar on an account's calendar list, with the account's access role on it. */
export interface AccountCalendar {
  id: string;
  accessRole: string;
  primary: boolean;
  summary?: string;
}

/** An appointment's booking state as one sync knows it: the fields a payload, list item or full read gave. */
export type Snapshot = Appointment;

/** The booking side a link keeps to tell what changed, never a customer detail; completes payloads without it. */
export type BookingCore = Pick<Appointment, "id" | "start_time" | "end_time" | "status" | "therapist_id">;

/**
 * What an event's text was rendered from, as keyed digests (src/sync/inputs.ts), never the values: the rendering
 * settings, each template input the event shows, and the inputs it was written without because the form at hand
 * lacked them (a payload or list item has no notes): an enrichment reads the full form and fills them in.
 */
export interface Rendered {
  config: string;
  inputs: Record<string, string>;
  pending?: string[];
}

/** What the store remembers of one appointment and its event, on both sides, after the last successful sync. */
export interface Link {
  appointmentId: string;
  /** Therapist whose calendar holds (or held) the event. */
  therapistId: string;
  calendarId: string;
  eventId: string;
  /** Which generation of the appointment's event ids `eventId` is (0, or more after Google refused to restore one). */
  generation?: number;
  /** False when the event was removed on purpose (cancelled, unmapped, or deleted by the therapist). */
  present: boolean;
  /**
   * Who removed it, when not present: a therapist's deletion is not undone by a later cancellation; "refused": the
   * booking service refused the therapist's deletion, so the event is to be put back (never the cancel sent again);
   * "purge": `calbridge purge` deletes the event (or did), and forgets the link once done (purge.ts, purgeable).
   */
  removedBy?: "booking" | "calendar" | "refused" | "purge";
  /** Calendar side, as last written or accepted: etag, owned fields' fingerprint, instants, times mark (changes.ts). */
  etag?: string;
  fingerprint?: string;
  eventStart?: number;
  eventEnd?: number;
  timesMark?: string;
  /** With no times mark, when the link last recorded an event, if a save since moved syncedAt on (see `resaved`). */
  recordedAt?: number;
  /** Booking side, as last applied: times, status and therapist only. */
  booking: BookingCore;
  /** What the event's text was rendered from (digests); absent while no event was written from this link. */
  rendered?: Rendered;
  /** Keyed digests of the description's lines calbridge last wrote, never the text (edit-notice.ts); absent before. */
  lines?: string[];
  /**
   * An enrichment is due: the event lacks full-form fields its templates use, or shows an older value of one. A full
   * read at the lowest priority (leftover rate budget) brings it up to date; cleared by any full render.
   */
  enrich?: true;
  /** Epoch ms of the newest booking fact applied (updated_at, or a webhook's created_at); older hints are ignored. */
  sourceAt: number;
  /** A note the event shows (a change undone, a write-back refused); may quote text the therapist typed, never ours. */
  notice?: { text: string; at: number };
  syncedAt: number;
}

/** What a caller already knows of the booking side of an appointment when it asks for a sync. */
export interface BookingHint {
  /** The booking's state as a payload or a list item gave it; read from the booking service when absent. */
  appt?: Appointment;
  /** Epoch ms of the fact (a webhook's created_at): a hint not newer than what was applied is read again. */
  at?: number;
  /** Our clock when `appt` was read (a listing): a link written after that holds newer facts, so it is read again. */
  readAt?: number;
  /** `appt` is the full form (GET /v1/appointments/:id): a field it lacks is empty, not unknown. */
  full?: boolean;
  /**
   * `appt` is the appointment as first booked (an appointment.created payload): once a link holds another state, that
   * state came later (a retried delivery can arrive a day late), so the booking is read instead.
   */
  first?: true;
}

/** What a caller knows of the calendar side: the event as just seen in a calendar (null: absent), or "read it". */
export type CalendarHint =
  | {
      therapistId: string;
      event: CalEvent | null;
      /**
       * Our clock when `event` was read (a listing or a change feed). A link written since then means calbridge wrote
       * the event after that read, so `event` may be older than calbridge's own write: it is read again.
       */
      seenAt?: number;
    }
  | { reread: true };

/**
 * Which side caused a request, as the appointment's history tells it: a booking webhook, the periodic (or a command's)
 * reconciliation, a change seen in the therapist's calendar, or an administrator's decision.
 */
export type Origin = "booking" | "reconcile" | "calendar" | "admin";

/** One request to bring an appointment's two sides together: why, how urgent, and the hints that save reads. */
export interface SyncRequest {
  reason: string;
  priority: Priority;
  /** Who caused it (absent: an override's is "admin", otherwise the one its priority serves). */
  origin?: Origin;
  booking?: BookingHint;
  calendar?: CalendarHint;
  /** An administrator's decision about a held write-back: send it, or put the event back. */
  override?: "apply" | "restore";
  /**
   * "relocate": only bring the linked event to the calendar the mapping names now (a changed calendar_id), without
   * reading the booking. Merged with any other request it is an ordinary sync.
   */
  only?: "relocate";
  /** Bring the event's full-form fields up to date (the link says an enrichment is due): read the full form. */
  enrich?: true;
  log?: Logger;
}

/**
 * How a sync attempt ended: the action taken (or, `waiting`, a write-back not sent yet: in its grace period, or held by
 * the guard), or the error and whether it is final (no more retries). `writeback`: what came of a write-back carried out.
 */
export type SyncOutcome =
  | { ok: true; action: Action; waiting?: "grace" | "held"; writeback?: WritebackOutcome }
  | { ok: false; error: string; final: boolean };

/** The booking client's: a priority, a signal, and for a write the state it was decided from. */
export type { CallOptions } from "../booking/types.ts";

/** The booking API as the engine uses it (BookingClient satisfies it). */
export interface BookingPort {
  getAppointment(id: string, opts?: CallOptions): Promise<Appointment>;
  /** Yields an appointment again when a later page showed it changed: keep the last copy of an id. */
  listAppointments(
    query: { dateFrom?: string; dateTo?: string; therapistId?: string; status?: string; customerId?: string },
    opts?: CallOptions,
  ): AsyncIterable<Appointment>;
  patchAppointment(
    id: string,
    body: { start_time?: string; therapist_id?: string; notes?: string; status?: string },
    opts?: CallOptions,
  ): Promise<Appointment>;
  cancelAppointment(
    id: string,
    body: { reason?: string; notify_customer?: boolean; refund?: boolean },
    opts?: CallOptions,
  ): Promise<Appointment>;
}

/** One therapist's calendar as the engine uses it (CalendarGateway satisfies it). */
export interface CalendarPort {
  upsert(
    eventId: string,
    body: RenderedEvent,
    opts?: { ifMatch?: string },
  ): Promise<{ event: CalEvent; action: "inserted" | "updated" | "restored" | "unchanged" }>;
  /** Changes only the fields the body names (null clears one); with ifMatch only if nobody changed the event since. */
  patch(eventId: string, partial: CalEvent, opts?: { ifMatch?: string }): Promise<CalEvent>;
  delete(eventId: string, opts?: { ifMatch?: string }): Promise<"deleted" | "already_gone">;
  /** The event, or null when unknown; with confirmMissing, null only once the calendar itself answers. */
  get(eventId: string, opts?: { confirmMissing?: boolean }): Promise<CalEvent | null>;
  listManaged(range: { timeMin: string; timeMax: string }): AsyncIterable<CalEvent>;
  /** Not deleted events marked as calbridge's for the appointment, any time, series not expanded (series-tails.ts). */
  listMarked(appointmentId: string): AsyncIterable<CalEvent>;
  /** Not deleted events, unfiltered, with an occurrence ending after `timeMin`, series not expanded (series-tails.ts). */
  listFrom(timeMin: string): AsyncIterable<CalEvent>;
  incrementalChanges(
    syncToken: string | undefined,
  ): Promise<{ events: CalEvent[]; nextSyncToken: string; fullSync: boolean }>;
  /**
   * Calls on the other calendars of the account the credentials act as (the therapist's personal ones): the calendar
   * list with the account's role on each, and reading, moving (into `destination`) and deleting an event there.
   */
  calendarList(minAccessRole?: "reader" | "writer" | "owner"): Promise<AccountCalendar[]>;
  getIn(calendarId: string, eventId: string): Promise<CalEvent | null>;
  moveFrom(calendarId: string, eventId: string, destination: string): Promise<CalEvent>;
  deleteIn(calendarId: string, eventId: string): Promise<void>;
  /** Changes whenever the credentials change (a reconnect, credentials reset): what was read with others is stale. */
  readonly credentialsVersion?: number;
  /** The calendar's standing with Google: broken credentials, a quota pause (epoch ms), the last error. */
  health?(): { credentials: "ok" | "broken" | "unknown"; pausedUntil?: number; lastError?: string };
}

/** A step that brings one appointment's two sides together. Pure data: the dry run prints it, the engine applies it. */
export type Action =
  | {
      kind: "none";
      appointmentId: string;
      reason: string;
      /** What the event's text now stands for, when this state rendered it in full (the link is brought up to date). */
      rendered?: Rendered;
      /** The event shows an older value of a full-form field: an enrichment is due. */
      enrich?: true;
      /** The event was deleted in the calendar and that is accepted: the link records it gone (removed there). */
      removedBy?: "calendar";
    }
  | {
      kind: "adopt";
      appointmentId: string;
      therapistId: string;
      event: CalEvent;
      reason: string;
      rendered?: Rendered;
    }
  | {
      kind: "create" | "update" | "restore";
      appointmentId: string;
      therapistId: string;
      eventId: string;
      body: RenderedEvent;
      ifMatch?: string;
      reason: string;
      notice?: string; // shown in the event's description: why a therapist's change was undone
      /**
       * Without a link: the note shown instead when Google refuses the event's id, proof that a person deleted that
       * event, a deletion calbridge never saw stand with a link and so never sent (the store was lost, say).
       */
      unsent?: string;
      rendered?: Rendered;
    }
  | { kind: "delete"; appointmentId: string; therapistId: string; eventId: string; reason: string }
  | {
      kind: "move";
      appointmentId: string;
      from: { therapistId: string; eventId: string };
      to: { therapistId: string; eventId: string };
      body: RenderedEvent;
      reason: string;
      rendered?: Rendered;
    }
  | { kind: "writeback_reschedule"; appointmentId: string; therapistId: string; startTime: string; reason: string }
  | { kind: "writeback_cancel"; appointmentId: string; therapistId: string; reason: string };

export type ActionKind = Action["kind"];

/**
 * An action as a reconciliation report keeps it: what happens to which appointment and event, and why, with the
 * event's times instead of its whole body. A cold run plans thousands of creates; keeping every rendered body (and its
 * customer details) in the report only to print a table held tens of MB for the whole run.
 */
export type PlanEntry = Action extends infer A
  ? A extends { body: RenderedEvent }
    ? Omit<A, "body" | "ifMatch" | "rendered" | "unsent"> & { start: string; end: string }
    : A extends { event: CalEvent }
      ? Omit<A, "event" | "rendered"> & { eventId: string }
      : Omit<A, "rendered" | "enrich">
  : never;

export function planEntry(action: Action): PlanEntry {
  if ("body" in action) {
    const {
      body,
      ifMatch: _,
      rendered: __,
      unsent: ___,
      ...rest
    } = action as Extract<Action, { body: RenderedEvent }> & { ifMatch?: string; unsent?: string };
    return { ...rest, start: body.start.dateTime, end: body.end.dateTime } as PlanEntry;
  }
  if (action.kind === "adopt") {
    const { event, rendered: _, ...rest } = action;
    return { ...rest, eventId: event.id ?? "" };
  }
  if (action.kind === "none") {
    const { rendered: _, enrich: __, ...rest } = action;
    return rest;
  }
  return action as PlanEntry;
}

/** Whether the event will lack (or show an older value of) a full-form field after `action`: an enrichment is due. */
export function leavesEnrichment(action: Action, link: Link | undefined): boolean {
  if ("rendered" in action && action.rendered) return (action.rendered.pending?.length ?? 0) > 0;
  if (action.kind === "none") return action.enrich === true || (link?.present === true && link.enrich === true);
  return false;
}

/** Actions that remove something: counted by the mass-deletion guard. */
export function isDestructive(action: Pick<Action, "kind">): boolean {
  return action.kind === "delete" || action.kind === "writeback_cancel";
}
