// Owns `calbridge writeback held`: the write-backs the guard holds, listed for a person to decide, and that person's
// decision carried out through the engine: --apply sends them to the booking service, --restore puts the events back
// from the booking (and sends nothing). Each decision releases its hold. --apply sends only what is held: a held
// write-back whose calendar change is another one now (a held move since deleted) is held again as that, not sent; one
// the calendar no longer asks for (the event is back) is released and reported as not sent, never as carried out.
import type { App } from "../daemon/app.ts";
import type { Action, SyncOutcome } from "../sync/types.ts";
import type { HeldWriteback } from "../sync/writeback-guard.ts";
import type { WritebackOutcome } from "../sync/writeback-steps.ts";

export interface HeldOptions {
  therapistId?: string;
  appointmentId?: string;
  decision?: "apply" | "restore";
}

export interface HeldResult {
  held: HeldWriteback[];
  /** Per appointment, what the decision did (only with a decision). */
  decided: { appointmentId: string; ok: boolean; did: string }[];
}

export async function writebackHeld(app: App, o: HeldOptions): Promise<HeldResult> {
  const held = (await app.sync.guard.held(o.therapistId)).filter(
    (h) => o.appointmentId === undefined || h.appointmentId === o.appointmentId,
  );
  const decided: HeldResult["decided"] = [];
  if (!o.decision) return { held, decided };
  for (const h of held) {
    let outcome: SyncOutcome;
    try {
      outcome = await app.engine.settle(h.appointmentId, {
        reason: `admin: ${o.decision} a held ${h.kind}`,
        priority: "writeback",
        calendar: { reread: true },
        override: o.decision,
      });
    } catch (err) {
      decided.push({ appointmentId: h.appointmentId, ok: false, did: (err as Error).message });
      continue;
    }
    if (outcome.ok && outcome.waiting) {
      // Not carried out: the hold stays (showing what would be sent now), for a person to decide again.
      decided.push({ appointmentId: h.appointmentId, ok: false, did: notSent(h, outcome.action, outcome.waiting) });
    } else if (outcome.ok && o.decision === "apply" && !isWriteback(outcome.action)) {
      // Nothing left to send (the event is back in the calendar, say after the therapist got another calendar): the
      // hold goes, but what was listed was not carried out, and the answer says so.
      await app.sync.guard.release(h.appointmentId);
      const notice = (await app.sync.links.get(h.appointmentId))?.notice?.text;
      decided.push({ appointmentId: h.appointmentId, ok: false, did: nothingSent(outcome.action, notice) });
    } else if (outcome.ok && o.decision === "restore" && !putBack(outcome.action)) {
      // No event was put back (the therapist is not mapped any more, ...): the hold stays, for --apply or a restore
      // once the therapist is mapped again; releasing it lost the deletion without a trace.
      decided.push({
        appointmentId: h.appointmentId,
        ok: false,
        did: `not restored, the hold stays: ${describe(outcome.action.kind, outcome.action.reason)}`,
      });
    } else if (outcome.ok) {
      await app.sync.guard.release(h.appointmentId);
      decided.push({
        appointmentId: h.appointmentId,
        ok: true,
        did: outcome.writeback ? answered(outcome.writeback) : describe(outcome.action.kind, outcome.action.reason),
      });
    } else {
      decided.push({ appointmentId: h.appointmentId, ok: false, did: outcome.error });
    }
  }
  return { held, decided };
}

function notSent(h: HeldWriteback, action: Action, waiting: "grace" | "held"): string {
  if (waiting === "grace") return "not sent: no longer held; it waits out its grace period";
  const now =
    action.kind === "writeback_cancel"
      ? "a cancellation"
      : action.kind === "writeback_reschedule"
        ? `a reschedule to ${action.startTime}`
        : action.kind;
  const was = h.kind === "cancel" ? "cancellation" : `reschedule${h.startTime ? ` to ${h.startTime}` : ""}`;
  return `not sent: the calendar change is ${now} now, not the held ${was}; held as that for a new decision (list the holds again)`;
}

const isWriteback = (a: Action) => a.kind === "writeback_cancel" || a.kind === "writeback_reschedule";

/** The event shows the booking after the action: written again, or already as it should be. */
const putBack = (a: Action) =>
  a.kind === "restore" ||
  a.kind === "update" ||
  a.kind === "create" ||
  a.kind === "adopt" ||
  (a.kind === "none" && a.reason === "unchanged");

function nothingSent(action: Action, notice: string | undefined): string {
  const why = action.kind === "none" ? action.reason : describe(action.kind, action.reason);
  const note = notice ? `; the event's note: ${notice}` : "";
  // The calendar no longer asks for it (the event is back), or the booking changed since and decided (booking_wins,
  // cancelled or reassigned by someone else): `why` says which; "the calendar no longer asks" was told of both.
  return `not sent: there is nothing to send now (${why}); the hold is released${note}`;
}

function describe(kind: string, reason: string): string {
  switch (kind) {
    case "writeback_cancel":
      return "cancelled in the booking service";
    case "writeback_reschedule":
      return "rescheduled in the booking service";
    case "restore":
    case "update":
    case "create":
      return "event put back from the booking";
    default:
      return `nothing to do (${reason})`;
  }
}

/**
 * What a write-back carried out came to, as the booking service and the calendars saw it: a held "deletion" that was
 * a move to another calendar (the therapist's own, another therapist's) is no cancellation, and is never called one.
 */
function answered(w: WritebackOutcome): string {
  const other = w.calendarId ? `calendar ${w.calendarId}` : "another calendar of the therapist's account";
  const to = w.therapistId ? `therapist ${w.therapistId}` : "another therapist";
  switch (`${w.kind} ${w.result}`) {
    case "cancel ok":
      return "cancelled in the booking service";
    case "reschedule ok":
      return "rescheduled in the booking service";
    case "cancel already":
      return "already cancelled in the booking service (not by this decision: the cancellation sent was not taken); the event stays deleted";
    case "reschedule already":
      return "the booking already had that time (the reschedule sent was not taken); the event stays";
    case "cancel moved_back":
      return `not cancelled, nothing sent: the event had been moved to ${other} and was moved back to the mapped calendar (with a note)`;
    case "cancel rewritten":
      return `not cancelled, nothing sent: the event had been moved to ${other}, could not be moved back, and was written again in the mapped calendar (with a note)`;
    case "reassign ok":
      return `not cancelled: the event had been moved to ${to}'s calendar; the appointment was reassigned to ${to} in the booking service`;
    case "reassign disabled":
      return `not cancelled, nothing sent: the event had been moved to ${to}'s calendar; reassigning from the calendar is off, so it was put back (with a note)`;
    case "reassign refused":
    case "reassign failed":
      return `not cancelled: the event had been moved to ${to}'s calendar; the booking service did not take the reassignment (${w.result}), so the event was put back (with a note)`;
    default:
      return w.result === "gone"
        ? "nothing sent: the booking service no longer knows the appointment; its event was removed"
        : `not applied: ${w.result === "refused" ? "the booking service refused it" : "it could not be sent"}; ${w.status === "cancelled" ? "the appointment is cancelled in the booking service now; the event shows that" : "the event was put back from the booking (with a note)"}`;
  }
}

const iso = (ms: number) => new Date(ms).toISOString().replace(/\.\d{3}Z$/, "Z");

export function formatHeld(r: HeldResult, decision: HeldOptions["decision"]): string {
  if (r.held.length === 0) return "no write-backs are held";
  if (decision) {
    const lines = r.decided.map((d) => `${d.ok ? "ok  " : "FAIL"} ${d.appointmentId}: ${d.did}`);
    return lines.join("\n");
  }
  const rows = r.held.map(
    (h) =>
      `${h.therapistId}  ${h.appointmentId}  ${h.kind}${h.startTime ? ` to ${h.startTime}` : ""}  held since ${iso(h.heldAt)}  (${h.reason})`,
  );
  return [
    `${r.held.length} write-back(s) held:`,
    ...rows,
    "",
    "send them: calbridge writeback held --apply [--therapist ID]; put the events back: calbridge writeback held --restore [--therapist ID]",
  ].join("\n");
}
