// Owns the stray events a reconciliation removes itself: managed events that are not the appointment's own event and
// say nothing about the booking (no write-back, no change to the appointment's link); which strays those are, and
// which are left alone or have their appointment read by id.
import type { Appointment } from "../booking/schemas.ts";
import { canonicalJson } from "../calendar/fingerprint.ts";
import { carriesMarks, eventIdFor } from "../calendar/ids.ts";
import type { Logger } from "../log.ts";
import { guardingWrites } from "../write-guard.ts";
import type { SyncEngine } from "./engine.ts";
import { describeError } from "./errors.ts";
import type { HistoryRecorder } from "./history.ts";
import { type LinkReader, recordOfEvents } from "./links.ts";
import type { Mapping } from "./mapping.ts";
import { misplacedIn } from "./placement.ts";
import { LeadershipLostError } from "./stopped.ts";
import type { CalEvent, CalendarPort, Link, PlanEntry, SyncRequest } from "./types.ts";

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

/** A stray whose appointment the listing did not show: it is read by id (gone, out of the window, another's now). */
export const LOOK_UP = "look up";

/** What the stray pass knows of a stray's appointment besides its link. */
export interface StrayFacts {
  mapping: Pick<Mapping, "therapist" | "sharesCalendar" | "calendarNames" | "config">;
  /** The appointment as the booking listing showed it (undefined: not listed this run). */
  listed: Appointment | undefined;
  /** What the run planned for the appointment. */
  planned: PlanEntry | undefined;
}

/** Why a stray is removed (a STRAY_REASONS value), LOOK_UP, or undefined when it is left alone. */
export function strayFate(stray: Stray, link: Link | undefined, facts: StrayFacts): string | undefined {
  const { mapping, listed } = facts;
  // Marked but not its event: a series' occurrence or a copy (left alone), or an earlier generation (removed).
  if (stray.event.id !== (link?.eventId ?? eventIdFor(stray.id))) {
    return earlierGeneration(link, stray) ? STRAY_REASONS.earlier : undefined;
  }
  // Its therapist's mapping names another calendar now: the appointment's own sync moves it (relocate.ts).
  if (misplacedIn(mapping, link)) return undefined;
  if (!listed) return LOOK_UP;
  // Another mapping may reach this calendar: the event may be that therapist's.
  if (mapping.sharesCalendar?.(stray.therapistId)) return undefined;
  if (link?.present && link.therapistId !== stray.therapistId) {
    // A copy left in another calendar after a reassignment: removed, unless its own calendar lost the event (the
    // therapist moved it: the appointment's decision handles it), or it is the event this run's move writes (the
    // process died after writing it, before the link named its calendar): the move takes it over. Deleted beside the
    // move and landing after it, it left the link naming a deleted event: taken for the new therapist's deletion, it
    // cancelled the appointment (a kept "Cancelled" marker: cleared away for good).
    const p = facts.planned;
    const movedHere = p?.kind === "move" && p.to.therapistId === stray.therapistId && p.to.eventId === stray.event.id;
    return movedHere || p?.kind === "writeback_cancel" ? undefined : STRAY_REASONS.copy;
  }
  // A tombstone naming another calendar, of an appointment cancelled that wants no event (cancelled_events: delete):
  // the old event of one reassigned and cancelled at once, whose deletion the process died before (the tombstone is
  // written first and names the new therapist), or that event brought back from the Bin since. Removed, as decide
  // removes a cancelled appointment's event brought back; only calbridge's event under its id, with its mark.
  if (
    link &&
    !link.present &&
    (link.removedBy === "booking" || link.removedBy === "calendar") &&
    link.therapistId !== stray.therapistId &&
    listed.status === "cancelled" &&
    mapping.config.sync.cancelled_events === "delete" &&
    stray.event.status !== "cancelled" &&
    carriesMarks(stray.event, stray.id)
  ) {
    return STRAY_REASONS.copy;
  }
  // No record at all (the store was lost): an appointment reassigned before calbridge applied it, whose old event is
  // still in the previous therapist's calendar. Only a link led to its removal, so that therapist went on seeing a
  // client no longer theirs, for good once the appointment's own event was gone. calbridge's event under the
  // appointment's own id, with its mark, in a calendar not the appointment's therapist's is that copy.
  // A listing that does not show the therapist says nothing of whose it is: the appointment is read by id.
  // A tombstone naming a therapist calbridge does not sync says no more of this calendar than no record does.
  const unrecorded = recordOfEvents(link, mapping) === undefined;
  if (unrecorded && !listed.therapist_id) return LOOK_UP;
  if (unrecorded && mapping.therapist(listed.therapist_id)?.therapist_id !== stray.therapistId) {
    return carriesMarks(stray.event, stray.id) ? STRAY_REASONS.copy : undefined;
  }
  return undefined;
}

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
  const deleted = await cal.delete(action.eventId).catch((err: unknown) => {
    if (err instanceof LeadershipLostError) throw err; // the next leader decides
    log.warn({ err: describeError(err) }, "stray event not removed");
  });
  if (!deleted) return false;
  if (deleted === "deleted") told.removed?.(action.therapistId);
  told.history?.applied(action.appointmentId, STRAY, action, { deleted }, { link: undefined, appt: null });
  return true;
}

/**
 * deleteStray in the appointment's turn (no sync of it runs meanwhile), and only while its link is still `read`, the
 * one the stray's fate was decided from; true when it was left for the next reconciliation for that reason. A sync
 * since (a webhook's reassignment writing its event in this calendar after the listing, linking it after the stray
 * pass read the link) may have made the "stray" the appointment's own event: deleted, it read as the therapist's
 * deletion, and the appointment was cancelled in the booking service (race3 audit).
 */
export async function deleteStrayInTurn(
  sync: Pick<SyncEngine, "exclusive" | "leading">,
  links: Pick<LinkReader, "get">,
  read: Link | undefined,
  cal: Pick<CalendarPort, "delete">,
  action: Extract<PlanEntry, { kind: "delete" }>,
  log: Logger,
  told: Parameters<typeof deleteStray>[3],
): Promise<boolean> {
  return sync.exclusive(action.appointmentId, async () => {
    if (canonicalJson(await links.get(action.appointmentId)) !== canonicalJson(read)) {
      log.info(
        { appointment_id: action.appointmentId, therapist_id: action.therapistId, event_id: action.eventId },
        "stray event left for the next reconciliation: its appointment was synced since this one read it",
      );
      return true;
    }
    // The turn may have come long after the run's own check (a sync of the appointment in Google's retries or a
    // quota pause): a replica that lost the lease meanwhile deletes nothing, at no attempt (review5).
    const mayWrite = () => {
      if (!sync.leading) throw new LeadershipLostError();
    };
    mayWrite();
    return guardingWrites(mayWrite, () => deleteStray(cal, action, log, told));
  });
}
