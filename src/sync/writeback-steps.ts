// Owns the steps the outcomes of a write-back share: what is told of it, taking the therapist's change into the link
// when the booking took it, putting the event back from the booking (with a visible note) when it did not, and
// removing the event of an appointment that no longer exists.
import { BookingApiError } from "../booking/errors.ts";
import { fingerprint, ownershipOf } from "../calendar/fingerprint.ts";
import type { Logger } from "../log.ts";
import { bookingChanged } from "./changes.ts";
import { addedText, changeTaken, quoting } from "./edit-notice.ts";
import type { Effects, Written } from "./effects.ts";
import { describeError, isCalendarKind } from "./errors.ts";
import { NeedsFullRead } from "./inputs.ts";
import { resaved } from "./links.ts";
import type { Rendering } from "./planner.ts";
import { tailsSince } from "./series-tails.ts";
import { merge } from "./snapshot.ts";
import type { BookingPort, CalEvent, Link, Snapshot } from "./types.ts";
import type { WritebackOutcome } from "./writeback-outcome.ts";

export type { WritebackOutcome };

type Notice = NonNullable<Link["notice"]>;

export interface WritebackInput {
  id: string;
  /** The booking's current state. */
  appt: Snapshot;
  /** `appt` is the full form (else a payload or list item: rendering may need the full form first). */
  full: boolean;
  link: Link;
  /** The event as the therapist left it (undefined when not read). */
  event: CalEvent | null | undefined;
  sourceAt: number;
  /**
   * Our clock when the calendar change written back had been seen (when it was first decided on): a calendar list read
   * since then names every calendar a moved event can have gone to (moved-out.ts). Unknown: now.
   */
  seenAt?: number;
  log: Logger;
  attempt: number;
  maxAttempts: number;
  /** Told the booking service's answer as soon as it is known, before the event is put back after a refusal. */
  tell?: (outcome: WritebackOutcome) => void;
  /**
   * The booking as an earlier write-back of the same attempt left it (taken, then a 412 from writing the event: the
   * therapist moved it again, decided anew): calbridge's own change, not someone else's (writeback-basis.ts).
   */
  taken?: Snapshot;
}

/** The collaborators of a write-back: the effects on calendars and links, and the booking service. */
export type Ctx = { fx: Effects; booking: BookingPort };

/**
 * A failure after which the events must stay as they are (the write-back may have been taken, or was undone only in
 * part): the write-back rethrows `cause` (retried, or a dead letter) and never answers it with a restore.
 */
export class LeaveAsIs extends Error {
  override readonly cause: unknown;
  constructor(cause: unknown) {
    super(describeError(cause));
    this.name = "LeaveAsIs";
    this.cause = cause;
  }
}

/** Whether a GET confirms that the booking service does not know the appointment (any other failure is thrown). */
export async function appointmentGone(ctx: Ctx, id: string): Promise<boolean> {
  try {
    await ctx.booking.getAppointment(id, { priority: "writeback" });
    return false;
  } catch (err) {
    if (err instanceof BookingApiError && err.kind === "not_found") return true;
    throw err;
  }
}

/**
 * The event body for `state` in `therapistId`'s calendar. A payload or list item that lacks fields the event shows is
 * completed by a full read first (at write-back priority), so a write-back never leaves the event showing less.
 */
async function renderFor(
  ctx: Ctx,
  w: WritebackInput,
  state: { appt: Snapshot; full: boolean },
  therapistId: string,
  notice?: Link["notice"],
): Promise<{ rendering: Rendering | null; appt: Snapshot }> {
  try {
    return { rendering: ctx.fx.render(state, w.link, therapistId, notice), appt: state.appt };
  } catch (err) {
    if (!(err instanceof NeedsFullRead) || state.full) throw err;
    const appt = merge(state.appt, await ctx.booking.getAppointment(w.id, { priority: "writeback" }));
    return { rendering: ctx.fx.render({ appt, full: true }, w.link, therapistId, notice), appt };
  }
}

/**
 * The booking took the therapist's change: record the event as it now stands in `therapistId`'s calendar, rewriting
 * only what the templates derive from the new state (the calendar already shows the time and the place). With a
 * `notice` (a part of the change the booking did not take), the event shows it, and the booking's time.
 */
export async function accept(
  ctx: Ctx,
  w: WritebackInput,
  therapistId: string,
  state: { appt: Snapshot; full: boolean },
  current: CalEvent | undefined,
  sourceAt: number,
  given?: Link["notice"],
): Promise<void> {
  const first = await renderFor(ctx, w, state, therapistId, given);
  const { appt } = first;
  // Text the therapist typed into the description in the same save is quoted, never written over unseen.
  const notice = changeTaken(current, w.link, first.rendering, bookingChanged(w.link, appt), given, ctx.fx.clock.now());
  const rendering =
    notice === given
      ? first.rendering
      : ctx.fx.render({ appt, full: state.full || appt !== state.appt }, w.link, therapistId, notice);
  const desired = rendering?.body;
  let event = current;
  let at = { eventId: w.link.eventId, generation: w.link.generation ?? 0 };
  const owned = ownershipOf(desired);
  if (desired && event && fingerprint(event, owned) !== fingerprint(desired, owned)) {
    const written = await ctx.fx.write(therapistId, "update", desired, linkAt(w), event.etag ?? undefined);
    event = written.event;
    at = written;
  }
  await ctx.fx.record({
    appointmentId: w.id,
    therapistId,
    eventId: at.eventId,
    generation: at.generation,
    booking: appt,
    sourceAt,
    event,
    present: true,
    ...(notice ? { notice } : {}),
    ...(rendering ? { rendered: rendering.rendered } : {}),
  });
}

/**
 * Puts the event back as the booking has it, with a visible note. The refusal is recorded first: should the restore
 * fail (Google down, a quota pause), its retries put the event back and never send the refused write-back again. An
 * event changed since it was read is not overwritten: the precondition error (412) is thrown for a new decision.
 */
export async function restore(ctx: Ctx, w: WritebackInput, text: string): Promise<void> {
  await putBack(ctx, w, await noteRefusal(ctx, w, text));
}

/**
 * The first half of `restore`: records that the change is not to be sent (refused, turned off, not sent) with the note
 * the event will show. A step that must come before the event is back (a reassignment's copy removed from the
 * colleague's calendar) goes between the two halves: with the refusal not recorded first, a failed store write or a
 * crash after that step left the event deleted here and nowhere else, which the next sync took for the therapist's
 * deletion, and cancelled the appointment.
 */
export async function noteRefusal(ctx: Ctx, w: WritebackInput, text: string): Promise<Notice> {
  // What the therapist typed into the description meanwhile is quoted (the link's digests tell it from calbridge's).
  const notice = { text: quoting(text, addedText(w.event, w.link, undefined, false, true)), at: ctx.fx.clock.now() };
  // The link keeps what the event shows (it is still there), so a retry renders no less either.
  await ctx.fx.links.save(resaved(w.link, { present: false, removedBy: "refused", notice }, ctx.fx.clock.now()));
  return notice;
}

/** The second half of `restore`: the event put back as the booking has it, showing `notice` (see noteRefusal). */
export async function putBack(ctx: Ctx, w: WritebackInput, notice: Notice): Promise<void> {
  const { rendering, appt } = await renderFor(ctx, w, w, w.link.therapistId, notice);
  if (!rendering) {
    await removeEvent(ctx, w, "nothing to restore");
    return;
  }
  // A series split off the event ("This and following events") before it was deleted or moved away would go on
  // showing the appointment beside the event put back (a live event in hand, a refused move, left none: not looked for).
  if (w.event?.status === "cancelled" && ctx.fx.mapping.calendarIfAny(w.link.therapistId)) {
    await ctx.fx.removeTails(w.link.therapistId, w.id, w.link.eventId, w.log, tailsSince(w.link, w.event));
  }
  let written: Written;
  try {
    // With the etag read before the write-back was sent: a move made meanwhile (while a refused PATCH was on its way)
    // is not overwritten, but answered 412.
    written = await ctx.fx.write(w.link.therapistId, "restore", rendering.body, linkAt(w), w.event?.etag ?? undefined);
  } catch (err) {
    // The event changed since it was read: it is still there, so the link says so again (keeping the refusal's
    // notice), and the sync reads the event and decides again: a newer move is a move of its own, with its own grace
    // period, never "an event without a record".
    if (isCalendarKind(err, "precondition")) {
      await ctx.fx.links.save(resaved(w.link, { notice }, ctx.fx.clock.now()));
    }
    throw err;
  }
  await ctx.fx.record({
    appointmentId: w.id,
    therapistId: w.link.therapistId,
    eventId: written.eventId,
    generation: written.generation,
    booking: appt,
    sourceAt: w.sourceAt,
    event: written.event,
    body: rendering.body,
    present: true,
    notice,
    rendered: rendering.rendered,
  });
}

export async function removeEvent(ctx: Ctx, w: WritebackInput, reason: string): Promise<void> {
  if (ctx.fx.mapping.calendarIfAny(w.link.therapistId)) {
    const since = tailsSince(w.link, w.event);
    await ctx.fx.remove(w.link.therapistId, w.link.eventId, { appointmentId: w.id, log: w.log, since });
  }
  await ctx.fx.links.save(resaved(w.link, { present: false, removedBy: "booking" }, ctx.fx.clock.now()));
  w.log.info({ reason }, "event removed");
}

function linkAt(w: WritebackInput) {
  return { appointmentId: w.id, eventId: w.link.eventId, generation: w.link.generation ?? 0 };
}
