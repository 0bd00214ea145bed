// Owns planning for one appointment from what is known of both sides: the event body the configuration asks for
// (rendered only from a state that shows no less than the event does, src/sync/inputs.ts), and the one action
// (decide.ts) that brings the calendar and the booking together. No I/O.
import type { Priority } from "../booking/gate.ts";
import { eventIdFor } from "../calendar/ids.ts";
import { templatesOf } from "../calendar/presets.ts";
import { type RenderedEvent, renderEvent } from "../calendar/render.ts";
import { type Clock, systemClock } from "../clock.ts";
import type { TherapistConfig } from "../config/schema.ts";
import { type AsWritten, bookingChanged, type Desired, decide } from "./decide.ts";
import { judge, NeedsFullRead, type RenderSettings, renderSettings } from "./inputs.ts";
import { recordOfEvents } from "./links.ts";
import type { Mapping } from "./mapping.ts";
import type { Action, CalEvent, CalendarHint, Link, Rendered, Snapshot } from "./types.ts";

/** A booking state as planning takes it: the appointment as known, and whether that is the full form. */
export interface Known {
  appt: Snapshot;
  full: boolean;
}

/** An event body, and what its text stands for. */
export interface Rendering {
  body: RenderedEvent;
  rendered: Rendered;
}

export class Planner {
  readonly #mapping: Mapping;
  readonly #clock: Clock;
  readonly #settings = new WeakMap<TherapistConfig, RenderSettings>();

  constructor(mapping: Mapping, clock: Clock = systemClock) {
    this.#mapping = mapping;
    this.#clock = clock;
  }

  /** A therapist's event settings: the preset's templates resolved, the therapist's reminders over event.reminders. */
  settings(therapist: TherapistConfig): RenderSettings {
    let s = this.#settings.get(therapist);
    if (!s) {
      const config = this.#mapping.config;
      const reminders = therapist.reminders ?? config.event.reminders;
      s = renderSettings(
        {
          ...templatesOf(config.event),
          include_customer_contact: config.event.include_customer_contact,
          colors: config.event.colors,
          cancelled_events: config.sync.cancelled_events,
          ...(reminders !== undefined ? { reminders } : {}),
        },
        therapist.timezone,
      );
      this.#settings.set(therapist, s);
    }
    return s;
  }

  /**
   * The event body for an appointment in a therapist's calendar, with a visible notice appended when given; null when
   * no event is wanted. Throws NeedsFullRead when `known` lacks fields the linked event shows (the full form is read
   * then), so an event is never written with less than it showed.
   */
  render(known: Known, link: Link | undefined, therapist: TherapistConfig, notice?: Link["notice"]): Rendering | null {
    const settings = this.settings(therapist);
    const body = this.#body(known.appt, therapist, settings, notice);
    if (!body) return null;
    const verdict = judge(settings, known.appt, known.full, link, this.#coreChanged(link, known.appt));
    if (verdict.kind === "complete" || verdict.kind === "partial") return { body, rendered: verdict.rendered };
    throw new NeedsFullRead(known.appt.id, "the booking state lacks fields the event shows");
  }

  /** The link's notice while it still applies: until the booking changes in anything the calendar shows. */
  noticeFor(link: Link | undefined, appt: Snapshot | null): Link["notice"] {
    return link?.notice && appt && !bookingChanged(link, appt) ? link.notice : undefined;
  }

  /**
   * The event a calendar hint says something about: the one in the link's calendar (or, without a link, the target
   * calendar). Undefined when the hint is about another calendar, or there is none.
   */
  eventOf(
    stored: Link | undefined,
    appt: Snapshot | null,
    hint: CalendarHint | undefined,
  ): CalEvent | null | undefined {
    if (!hint || "reread" in hint) return undefined;
    const link = recordOfEvents(stored, this.#mapping);
    const mapped = this.#mapping.therapist(appt?.therapist_id);
    const where = link?.therapistId ?? mapped?.therapist_id;
    // A deleted event under another id than the link's is an earlier generation of the appointment's event (Google
    // refused to bring it back, so it lives on under a new id): its deletion says nothing of the linked event, and
    // taken for it, it would cancel the appointment.
    const event = hint.event;
    if (link && event && event.status === "cancelled" && event.id !== undefined && event.id !== link.eventId) {
      return undefined;
    }
    // Without a link or a mapped owner, the event where it was seen is the one to decide about (an orphan).
    return hint.therapistId === where || where === undefined ? event : undefined;
  }

  /** Putting the linked event back as the booking has it, with a notice saying why (an administrator's decision). */
  restoreOf(id: string, known: Known, link: Link, text: string): Action | undefined {
    const therapist = this.#mapping.therapist(link.therapistId);
    const r = therapist ? this.render(known, link, therapist, { text, at: 0 }) : null;
    if (!r) return undefined;
    return {
      kind: "restore",
      appointmentId: id,
      therapistId: link.therapistId,
      eventId: link.eventId,
      body: r.body,
      reason: "an administrator put the event back",
      notice: text,
      rendered: r.rendered,
    };
  }

  /**
   * The action for one appointment, given both sides. Throws NeedsFullRead when the state at hand cannot decide it
   * without the full form. `priority` is the request's: a reconciliation leaves a change it cannot render from a list
   * item (a customer's new name next to notes the event shows) to an enrichment; anything else reads at once.
   */
  plan(
    id: string,
    known: Known | null,
    stored: Link | undefined,
    event: CalEvent | null | undefined,
    seenIn: string | undefined,
    priority: Priority,
  ): Action {
    const link = recordOfEvents(stored, this.#mapping);
    const appt = known?.appt ?? null;
    const target = this.#mapping.therapist(appt?.therapist_id);
    if (link?.present && !this.#mapping.therapist(link.therapistId)) {
      // Its therapist is no longer mapped: calbridge neither edits that calendar nor writes back from it; the event
      // stays until `calbridge purge` removes it. Reassigned to a mapped therapist, it is new there.
      const left = `therapist ${link.therapistId} is not mapped: the event stays in their calendar (calbridge purge)`;
      if (!target || !known) return { kind: "none", appointmentId: id, reason: left };
      const action = this.plan(id, known, undefined, undefined, undefined, priority);
      return action.kind === "create" ? { ...action, reason: `reassigned; ${left}` } : action;
    }
    const wanted = known && target ? this.#desired(known, link, target, priority) : { desired: null };
    const owner = this.#mapping.therapist(link?.therapistId) ?? target;
    const action = decide({
      appointmentId: id,
      appt,
      link,
      event,
      targetTherapistId: target?.therapist_id,
      seenIn: event === undefined ? undefined : seenIn,
      desired: wanted.desired,
      eventId: link?.eventId ?? eventIdFor(id),
      writeback: this.#mapping.writeback(owner?.therapist_id),
      watchedSince: this.#mapping.watchedSince(link?.therapistId),
      conflict: this.#mapping.config.sync.conflict,
      now: this.#clock.now(),
      ...(wanted.rendered ? { rendered: wanted.rendered } : {}),
    });
    // A change undone in the calendar carries its own notice, replacing any earlier one.
    if ((action.kind === "restore" || action.kind === "update") && action.notice && known) {
      const therapist = this.#mapping.therapist(action.therapistId);
      const r = therapist ? this.render(known, link, therapist, { text: action.notice, at: 0 }) : null;
      if (r) action.body = r.body;
    }
    if (wanted.rendered && action.kind !== "delete" && !action.kind.startsWith("writeback_")) {
      (action as { rendered?: Rendered }).rendered = wanted.rendered;
    }
    if (wanted.enrich && action.kind === "none") action.enrich = true;
    return action;
  }

  /** What the event should be: a body (and what it stands for), none, or "as written" (see AsWritten). */
  #desired(
    known: Known,
    link: Link | undefined,
    therapist: TherapistConfig,
    priority: Priority,
  ): { desired: Desired; rendered?: Rendered; enrich?: true } {
    const settings = this.settings(therapist);
    const body = this.#body(known.appt, therapist, settings, this.noticeFor(link, known.appt));
    if (!body) return { desired: null };
    const core = this.#coreChanged(link, known.appt);
    const verdict = judge(settings, known.appt, known.full, link, core);
    if (verdict.kind === "complete" || verdict.kind === "partial") return { desired: body, rendered: verdict.rendered };
    const asWritten = (): AsWritten => {
      if (!link?.fingerprint) throw new NeedsFullRead(known.appt.id, "the link does not say what was written");
      return { asWritten: true, fingerprint: link.fingerprint, ownership: { reminders: body.reminders !== undefined } };
    };
    if (verdict.kind === "unchanged") return { desired: asWritten() };
    // Changed in something the list shows, next to full-form fields the event shows: a reconciliation leaves it to an
    // enrichment (a new rendering setting would otherwise read every appointment at once); a time, status or
    // therapist change, and any webhook or write-back, reads the full form now.
    if (verdict.kind !== "stale" || verdict.core || priority !== "reconcile") {
      throw new NeedsFullRead(known.appt.id, "the booking changed, and the state at hand lacks fields the event shows");
    }
    return { desired: asWritten(), enrich: true };
  }

  #body(
    appt: Snapshot,
    therapist: TherapistConfig,
    settings: RenderSettings,
    notice: Link["notice"] | undefined,
  ): RenderedEvent | null {
    // The notice goes through rendering: escaped like any text, and inside the description's length limit.
    return renderEvent(appt, therapist, settings.event, notice?.text);
  }

  #coreChanged(link: Link | undefined, appt: Snapshot): boolean {
    return !link || bookingChanged(link, appt);
  }
}
