// Owns carrying out one planned action: the calendar write or deletion, the write-back, and the link that records it.
import { canonicalJson } from "../calendar/fingerprint.ts";
import { eventIdFor } from "../calendar/ids.ts";
import type { RenderedEvent } from "../calendar/render.ts";
import type { Logger } from "../log.ts";
import type { Effects, EventAt, Written } from "./effects.ts";
import { describeError } from "./errors.ts";
import { removeOwnCopy } from "./moved-out.ts";
import { removeColleagueCopy } from "./reassign.ts";
import { tailsSince } from "./series-tails.ts";
import { coreOf } from "./snapshot.ts";
import { EngineStoppedError } from "./stopped.ts";
import type { Action, BookingPort, CalEvent, Link, Snapshot } from "./types.ts";
import { applyWriteback } from "./writeback.ts";
import type { WritebackOutcome } from "./writeback-steps.ts";

/** What the engine knew when it decided, handed to the action. */
export interface ApplyContext {
  id: string;
  /** The booking's state (null: the booking service does not know the appointment). */
  appt: Snapshot | null;
  link: Link | undefined;
  /** Epoch ms of the newest booking fact in `appt`. */
  sourceAt: number;
  /** `appt` is the full form. */
  full: boolean;
  /** The event as the decision saw it (undefined: not read). */
  event: CalEvent | null | undefined;
  /** Our clock when the calendar change a write-back sends had been seen (WritebackInput.seenAt). */
  seenAt?: number;
  log: Logger;
  /** This attempt's number, and how many the engine makes before giving up (write-backs restore then). */
  attempt: number;
  maxAttempts: number;
  /** Told what came of the action as soon as it took effect (the appointment's history). */
  tell?: (applied: Applied) => void;
  /** WritebackInput.taken. */
  taken?: Snapshot;
}

/** What came of an action, for the appointment's history. */
export interface Applied {
  /** The event id written (another generation of the appointment's ids when Google refused to restore one). */
  eventId?: string;
  /** Google refused the id of an event calbridge had no record of: a person's deletion, not sent, noted in the event. */
  unsent?: true;
  /** Google's answer to a deletion, or that the calendar is no longer mapped (the event was left). */
  deleted?: "deleted" | "already_gone" | "not_mapped";
  /** A write-back's answer from the booking service. */
  writeback?: WritebackOutcome;
}

const VERB = { create: "created", update: "updated", restore: "restored" } as const;

/** Where the action's event id lives: the link's generation when it is the link's id. */
export function eventAt(appointmentId: string, link: Link | undefined, eventId: string): EventAt {
  return { appointmentId, eventId, generation: link?.eventId === eventId ? (link.generation ?? 0) : 0 };
}

export async function applyAction(action: Action, c: ApplyContext, fx: Effects, booking: BookingPort): Promise<void> {
  const { id, appt, link, sourceAt, log } = c;
  const snapshot = appt ?? link?.booking ?? { id };
  const notice = fx.planner.noticeFor(link, appt);
  switch (action.kind) {
    case "none": {
      // Remember what was learnt (new times, a newer source time, what the event's text now stands for, an enrichment
      // due) without touching any calendar; a link that learnt nothing is not written.
      const target = fx.mapping.therapist(appt?.therapist_id);
      if (link && appt) {
        const next: Link = { ...link, booking: coreOf(appt), sourceAt: Math.max(link.sourceAt, sourceAt) };
        if (action.removedBy) Object.assign(next, { present: false, removedBy: action.removedBy });
        if (link.present && action.rendered) {
          next.rendered = action.rendered;
          if (action.rendered.pending?.length) next.enrich = true;
          else delete next.enrich;
        }
        if (link.present && action.enrich) next.enrich = true;
        if (canonicalJson(next) !== canonicalJson(link)) await fx.links.save(next);
      } else if (!link && appt && (target || appt.therapist_id)) {
        // A tombstone: an older webhook arriving later cannot resurrect this state. Also for a therapist not synced:
        // a creation's payload retried late (naming a synced therapist it was given away from, or its state before a
        // cancellation) would otherwise find no record, and be applied.
        await fx.record({
          appointmentId: id,
          therapistId: target?.therapist_id ?? String(appt.therapist_id),
          eventId: eventIdFor(id),
          booking: appt,
          sourceAt,
          present: false,
          removedBy: "booking",
        });
      }
      fx.metrics.operations.inc({ kind: "none", result: "ok" });
      c.tell?.({});
      return;
    }
    case "adopt": {
      const eventId = action.event.id ?? eventIdFor(id);
      await fx.record({
        // The link's event adopted keeps its generation (a later one's earlier generations are told by it, strays.ts).
        ...eventAt(id, link, eventId),
        therapistId: action.therapistId,
        booking: snapshot,
        sourceAt,
        event: action.event,
        present: true,
        notice,
        ...(action.rendered ? { rendered: action.rendered } : {}),
      });
      fx.metrics.operations.inc({ kind: "adopt", result: "ok" });
      c.tell?.({});
      return;
    }
    case "create":
    case "update":
    case "restore": {
      // A series the therapist made of the event becomes a single event again: a series Google split off it goes. So
      // does one left by a deleted event put back (its deletion not sent), which shows no rule any more.
      if (c.event?.recurrence?.length || (action.kind === "restore" && c.event?.status === "cancelled")) {
        await fx.removeTails(action.therapistId, id, action.eventId, log, tailsSince(link, c.event));
      }
      const undone = action.notice ? { text: action.notice, at: fx.clock.now() } : undefined;
      // Google refusing the id of an event calbridge has no record of says a person deleted it: that deletion was
      // never sent, and the event written under the next id says so (the note stays like any other, see noticeFor).
      const unsent = action.unsent ? { text: action.unsent, at: fx.clock.now() } : undefined;
      const noted =
        unsent && appt ? () => fx.render({ appt, full: c.full }, link, action.therapistId, unsent)?.body : undefined;
      const w = await fx.write(
        action.therapistId,
        action.kind,
        action.body,
        eventAt(id, link, action.eventId),
        action.ifMatch,
        noted,
      );
      c.tell?.({ eventId: w.eventId, ...(w.instead ? { unsent: true as const } : {}) });
      const written = w.instead ? { ...action, body: w.instead } : action;
      await recordWritten(fx, written, action.therapistId, w, {
        booking: snapshot,
        sourceAt,
        notice: w.instead ? unsent : (undone ?? notice),
      });
      if (w.instead) {
        log.warn(
          { therapist_id: action.therapistId, event_id: w.eventId },
          "event deleted in the calendar while calbridge had no record of it: the appointment was not cancelled; the event is back under a new id with a note",
        );
      }
      log.info(
        { action: action.kind, therapist_id: action.therapistId, reason: action.reason },
        `event ${VERB[action.kind]}`,
      );
      return;
    }
    case "delete": {
      const gone = {
        appointmentId: id,
        therapistId: fx.mapping.therapist(appt?.therapist_id)?.therapist_id ?? action.therapistId,
        eventId: action.eventId,
        booking: snapshot,
        sourceAt,
        present: false,
        removedBy: "booking" as const,
      };
      // A live link is recorded gone before its event goes: a crash (or a store write that fails) after the deletion
      // left a live link to a deleted event, which the next sync took for the therapist's deletion, and cancelled the
      // appointment (one the clinic had restored meanwhile).
      const first = link?.present === true;
      if (first) await fx.record(gone);
      if (fx.mapping.calendarIfAny(action.therapistId)) {
        const since = tailsSince(link, c.event);
        const result = await fx
          .remove(action.therapistId, action.eventId, { appointmentId: id, log, since })
          .catch(async (err: unknown) => {
            // Not deleted (or not known to be): the link names the event again, so that the retry deletes it (a sync
            // reads no event for a link not present; only the reconciliation would). It knows the booking as it is
            // now: should the event be gone after all and the appointment be restored, that is no deletion to send.
            if (first && !(err instanceof EngineStoppedError)) {
              const booking = coreOf(snapshot);
              await fx.links.save({ ...link, booking, sourceAt: Math.max(link.sourceAt, sourceAt) }).catch(() => {});
            }
            throw err;
          });
        c.tell?.({ deleted: result });
        // Already gone from the mapped calendar: the therapist may have moved it to a calendar of their own or to a
        // colleague's (a move waiting out its grace period, or held), where it would go on showing the appointment.
        if (result === "already_gone" && link?.eventId === action.eventId) {
          await removeOwnCopy(fx, link, log);
          await removeColleagueCopy(fx, link, log);
        }
        log.info(
          { action: "delete", therapist_id: action.therapistId, reason: action.reason, result },
          "event deleted",
        );
      } else {
        log.warn({ therapist_id: action.therapistId }, "event left in a calendar that is no longer mapped");
        c.tell?.({ deleted: "not_mapped" });
      }
      if (!first) await fx.record(gone);
      return;
    }
    case "move": {
      // The old event, left in the previous therapist's calendar until it is deleted, is noted as calbridge's own before
      // the link moves on (leftovers.ts): once the link names the new calendar, a copy not noted (the process dying
      // before its deletion, a deletion and its note both failing) was taken for where the new therapist moved the
      // event when they deleted it, and the appointment reassigned back (or the deletion undone) instead of cancelled.
      // A note that cannot be written fails the sync before anything is written (retried).
      const from = action.from;
      const left =
        fx.leftovers && link?.etag && link.therapistId === from.therapistId && link.eventId === from.eventId
          ? { therapistId: from.therapistId, eventId: from.eventId, etag: link.etag }
          : undefined;
      if (left) await fx.leftovers?.note(id, left);
      const w = await fx.write(action.to.therapistId, "create", action.body, eventAt(id, link, action.to.eventId));
      c.tell?.({ eventId: w.eventId });
      await recordWritten(fx, action, action.to.therapistId, w, { booking: snapshot, sourceAt });
      const removed = await fx
        .remove(from.therapistId, from.eventId, { appointmentId: id, log, since: tailsSince(link, c.event) })
        .then(
          () => true,
          (err: unknown) => {
            if (err instanceof EngineStoppedError) throw err; // leadership was lost: the sync is given up here
            // The link already points at the new calendar; the next reconciliation removes the copy left (noted).
            log.warn(
              { err: describeError(err), from: from.therapistId },
              "old event not removed yet after a reassignment",
            );
            return false;
          },
        );
      // Deleted: its note goes (one left behind names an event that is gone, which findElsewhere never takes for a move).
      if (removed && left) {
        await fx.leftovers
          ?.forget(id)
          .catch((e: unknown) => log.warn({ err: describeError(e) }, "old event's record not removed"));
      }
      fx.metrics.operations.inc({ kind: "move", result: "ok" });
      log.info(
        { action: "move", from: action.from.therapistId, to: action.to.therapistId },
        "event moved to the new therapist's calendar",
      );
      return;
    }
    case "writeback_reschedule":
    case "writeback_cancel": {
      if (!link) return;
      await applyWriteback(fx, booking, action, {
        id,
        appt: snapshot,
        full: c.full && appt !== null,
        link,
        event: c.event,
        sourceAt,
        ...(c.seenAt !== undefined ? { seenAt: c.seenAt } : {}),
        log,
        attempt: c.attempt,
        maxAttempts: c.maxAttempts,
        tell: (writeback) => c.tell?.({ writeback }),
        ...(c.taken ? { taken: c.taken } : {}),
      });
      return;
    }
  }
}

/** The link of an event just written (created, updated, restored, or moved to another calendar). */
function recordWritten(
  fx: Effects,
  action: Extract<Action, { body: RenderedEvent }>,
  therapistId: string,
  w: Written,
  o: { booking: Snapshot; sourceAt: number; notice?: Link["notice"] },
): Promise<void> {
  return fx.record({
    appointmentId: action.appointmentId,
    therapistId,
    eventId: w.eventId,
    generation: w.generation,
    booking: o.booking,
    sourceAt: o.sourceAt,
    event: w.event,
    body: action.body,
    present: true,
    ...(o.notice ? { notice: o.notice } : {}),
    ...(action.rendered ? { rendered: action.rendered } : {}),
  });
}
