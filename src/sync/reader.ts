// Owns reading the two sides of one appointment before deciding: the booking state (the hint when it is fresh, else
// a read) and the event (the one a hint carries, read again when it may be older than calbridge's own last write).
import type { Effects } from "./effects.ts";
import { isNotFound } from "./errors.ts";
import { laterGeneration, relinked } from "./generations.ts";
import { type BookingState, hintState, merge, updatedAt } from "./snapshot.ts";
import type { BookingPort, CalEvent, Link, SyncRequest } from "./types.ts";

/** The booking side as a sync read it: null when the booking service does not know the appointment. */
export type ReadState = { appt: BookingState["appt"] | null; sourceAt: number; full: boolean; readAt?: number };

export class StateReader {
  readonly #booking: BookingPort;
  readonly #fx: Effects;

  constructor(booking: BookingPort, fx: Effects) {
    this.#booking = booking;
    this.#fx = fx;
  }

  /**
   * The booking state to act on: the hint when it is complete and newer than what was applied, else a fresh read. An
   * enrichment the link still asks for reads the full form whatever the hint.
   */
  async booking(id: string, link: Link | undefined, request: SyncRequest, signal?: AbortSignal): Promise<ReadState> {
    const fromHint = request.enrich && link?.enrich ? undefined : hintState(link, request.booking);
    if (fromHint) return fromHint;
    return this.full(id, link, request, signal);
  }

  /** The full form (GET /v1/appointments/:id) at the request's priority; null when the service does not know it. */
  async full(id: string, link: Link | undefined, request: SyncRequest, signal?: AbortSignal): Promise<ReadState> {
    const applied = link?.sourceAt ?? 0;
    const readAt = this.#fx.clock.now(); // before the request: what it answers is at least this recent
    try {
      const appt = await this.#booking.getAppointment(id, {
        priority: request.priority,
        ...(signal ? { signal } : {}),
      });
      return {
        appt: merge(link?.booking, appt),
        sourceAt: Math.max(applied, request.booking?.at ?? 0, updatedAt(appt)),
        full: true,
        readAt,
      };
    } catch (err) {
      if (isNotFound(err)) return { appt: null, sourceAt: applied, full: true };
      throw err;
    }
  }

  /** The event to decide about: the one the hint carries, read again when it may be older than our own last write. */
  async event(
    link: Link | undefined,
    appt: BookingState["appt"] | null,
    request: SyncRequest,
  ): Promise<CalEvent | null | undefined> {
    const cal = request.calendar;
    const event = this.#fx.planner.eventOf(link, appt, cal);
    if (cal && !("reread" in cal) && event !== undefined && link && cal.seenAt !== undefined) {
      // Taking an old version for the therapist's change would push it back to the booking service (a cancellation
      // or a move nobody made) or undo calbridge's own write.
      if (link.syncedAt >= cal.seenAt) return this.#fx.calendar(cal.therapistId).get(event?.id ?? link.eventId);
    }
    // A deleted event from an incremental listing carries its id alone; whether it was deleted before the therapist's
    // current watch began (not to be written back) is told by its `updated`, which events.get gives.
    if (
      event &&
      event.updated === undefined &&
      link?.present &&
      link.syncedAt < this.#fx.mapping.watchedSince(link.therapistId) &&
      this.#fx.mapping.therapist(link.therapistId)
    ) {
      return this.#fx.calendar(link.therapistId).get(event.id ?? link.eventId);
    }
    // A therapist no longer mapped has no calendar to read: their events are left alone (the planner says so).
    if (
      cal &&
      "reread" in cal &&
      link?.present &&
      event === undefined &&
      this.#fx.mapping.therapist(link.therapistId)
    ) {
      return this.#fx.calendar(link.therapistId).get(link.eventId);
    }
    return event;
  }

  /**
   * The link and the event to decide from: the event (see event()), unless the linked event was deleted while a later
   * generation of it is live in the link's calendar (a store put back from a backup older than the restore that made
   * it, src/sync/generations.ts): then that event, and a link naming it (`relinked`; not saved, the caller saves it).
   */
  async decidable(
    link: Link | undefined,
    appt: BookingState["appt"] | null,
    request: SyncRequest,
  ): Promise<{ link: Link | undefined; event: CalEvent | null | undefined; relinked?: true }> {
    const event = await this.event(link, appt, request);
    if (!link?.present || event?.status !== "cancelled" || !this.#fx.mapping.therapist(link.therapistId)) {
      return { link, event };
    }
    const found = await laterGeneration(this.#fx.calendar(link.therapistId), link);
    return found
      ? { link: relinked(this.#fx.links, link, found), event: found.event, relinked: true }
      : { link, event };
  }
}
