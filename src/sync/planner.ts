// Owns planning for one appointment from what is known of both sides: the event body the configuration asks for,
// and the one action (decide.ts) that brings the calendar and the booking together. No I/O.
import { eventIdFor } from "../calendar/ids.ts";
import { type RenderedEvent, renderEvent } from "../calendar/render.ts";
import type { TherapistConfig } from "../config/schema.ts";
import { bookingChanged, decide } from "./decide.ts";
import type { Mapping } from "./mapping.ts";
import type { Action, CalEvent, CalendarHint, Link, Snapshot } from "./types.ts";

export class Planner {
  readonly #mapping: Mapping;

  constructor(mapping: Mapping) {
    this.#mapping = mapping;
  }

  /** The event body for an appointment in a therapist's calendar, with a visible notice appended when given. */
  render(appt: Snapshot, therapist: TherapistConfig, notice?: Link["notice"]): RenderedEvent | null {
    const config = this.#mapping.config;
    // The notice goes through rendering: escaped like any text, and inside the description's length limit.
    return renderEvent(
      appt,
      therapist,
      { ...config.event, cancelled_events: config.sync.cancelled_events },
      notice?.text,
    );
  }

  /** The link's notice while it still applies: until the booking changes in anything the calendar shows. */
  noticeFor(link: Link | undefined, appt: Snapshot | null): Link["notice"] {
    return link?.notice && appt && !bookingChanged(link, appt) ? link.notice : undefined;
  }

  /**
   * The event a calendar hint says something about: the one in the link's calendar (or, without a link, the target
   * calendar). Undefined when the hint is about another calendar, or there is none.
   */
  eventOf(link: Link | undefined, appt: Snapshot | null, hint: CalendarHint | undefined): CalEvent | null | undefined {
    if (!hint || "reread" in hint) return undefined;
    const mapped = this.#mapping.therapist(appt?.therapist_id);
    const where = link?.therapistId ?? mapped?.therapist_id;
    // Without a link or a mapped owner, the event where it was seen is the one to decide about (an orphan).
    return hint.therapistId === where || where === undefined ? hint.event : undefined;
  }

  /** Putting the linked event back as the booking has it, with a notice saying why (an administrator's decision). */
  restoreOf(id: string, appt: Snapshot, link: Link, text: string): Action | undefined {
    const therapist = this.#mapping.therapist(link.therapistId);
    const body = therapist ? this.render(appt, therapist, { text, at: 0 }) : null;
    if (!body) return undefined;
    return {
      kind: "restore",
      appointmentId: id,
      therapistId: link.therapistId,
      eventId: link.eventId,
      body,
      reason: "an administrator put the event back",
      notice: text,
    };
  }

  /** The action for one appointment, given both sides. */
  plan(
    id: string,
    appt: Snapshot | null,
    link: Link | undefined,
    event: CalEvent | null | undefined,
    seenIn?: string,
  ): Action {
    const target = this.#mapping.therapist(appt?.therapist_id);
    if (link?.present && !this.#mapping.therapist(link.therapistId)) {
      // Its therapist is no longer mapped: calbridge neither edits that calendar nor writes back from it; the event
      // stays until `calbridge purge` removes it. Reassigned to a mapped therapist, it is new there.
      const left = `therapist ${link.therapistId} is not mapped: the event stays in their calendar (calbridge purge)`;
      if (!target || !appt) return { kind: "none", appointmentId: id, reason: left };
      const action = this.plan(id, appt, undefined, undefined);
      return action.kind === "create" ? { ...action, reason: `reassigned; ${left}` } : action;
    }
    const desired = appt && target ? this.render(appt, target, this.noticeFor(link, appt)) : null;
    const owner = this.#mapping.therapist(link?.therapistId) ?? target;
    const action = decide({
      appointmentId: id,
      appt,
      link,
      event,
      targetTherapistId: target?.therapist_id,
      seenIn: event === undefined ? undefined : seenIn,
      desired,
      eventId: link?.eventId ?? eventIdFor(id),
      writeback: this.#mapping.writeback(owner?.therapist_id),
      conflict: this.#mapping.config.sync.conflict,
    });
    // A change undone in the calendar carries its own notice, replacing any earlier one.
    if ((action.kind === "restore" || action.kind === "update") && action.notice && appt) {
      const therapist = this.#mapping.therapist(action.therapistId);
      const body = therapist ? this.render(appt, therapist, { text: action.notice, at: 0 }) : null;
      if (body) action.body = body;
    }
    return action;
  }
}
