// Owns what the relocation (relocate.ts) decides from the events it finds: which live event in the new calendar may be
// taken as it is, and which deletion in the old calendar was a person's while calbridge watched it (never undone
// without a word, never sent from a calendar nobody reads any more).
import { instantOf } from "../calendar/fingerprint.ts";
import { carriesMarks } from "../calendar/ids.ts";
import type { RenderedEvent } from "../calendar/render.ts";
import { lastSynced } from "./changes.ts";
import type { CalEvent, Link } from "./types.ts";

/**
 * A live event at the times calbridge last synced: taken as it is, nothing about it reads as a therapist's move. A
 * copy left behind in that calendar long ago (the therapist pointed back at it) shows older times: it is written over.
 */
export function asSynced(link: Link, event: CalEvent | null | undefined): event is CalEvent {
  if (!event || event.status === "cancelled") return false;
  return instantOf(event.start) === link.eventStart && instantOf(event.end) === link.eventEnd;
}

/**
 * A live event of calbridge's (both its marks for the appointment) changed after the link was last saved, not at the
 * times last synced: the event an earlier attempt of this relocation moved or copied there with the therapist's move
 * (keptMove), whose record was lost (the process died, or the link's store write failed, once Google had it). Taken as
 * it is, the move stays the therapist's and is sent; written over from the booking, it was lost without a word. A copy
 * left there long ago is older than the link's last sync, and another's event (a guest's copy of an invitation, one
 * made by hand or by another tool under a new id) lacks the marks: both are written over.
 */
export function movedUnrecorded(link: Link, event: CalEvent | null | undefined): event is CalEvent {
  if (!event || event.status === "cancelled" || !carriesMarks(event, link.appointmentId)) return false;
  return Date.parse(event.updated ?? "") > link.syncedAt && !asSynced(link, event);
}

/**
 * A deletion newer than the link's last sync and older than the watch of the therapist's calendar now (watched.ts):
 * made while calbridge watched the old calendar, so the therapist's. One made after (the old calendar no longer
 * watched) or that cannot be dated is not theirs to send, and not told about.
 */
export function deletedWhileWatched(link: Link, old: CalEvent | null | undefined, watchedSince: number): boolean {
  const at = Date.parse(old?.updated ?? "");
  return watchedSince > 0 && at > link.syncedAt && at < watchedSince;
}

/** The note of an event written anew in the new calendar after the therapist deleted it in the old one. */
export function unsentNotice(cancelling: boolean): string {
  const again = cancelling ? "delete it again to cancel it" : "cancel it in the booking service";
  return `calbridge: your deletion of this event was not sent to the booking service: an administrator gave you another calendar meanwhile, and the appointment is still booked; ${again}.`;
}

/**
 * The body to write in the new calendar when the event is copied there (events.move not allowed): `body` (the
 * booking's) at the times of `was`, the live event in the old calendar, when a person moved or resized it since the
 * last sync, as events.move would have taken them. The link keeps the times last synced, so that change is still the
 * therapist's own (sent after its grace period, or put back saying why); written over with the booking's times, it
 * was lost without a word. An event at calbridge's own write there whose record was lost (lastSynced) was not moved.
 */
export function keptMove(link: Link, body: RenderedEvent, was: CalEvent | undefined): RenderedEvent {
  const start = was?.start?.dateTime;
  const end = was?.end?.dateTime;
  const synced = lastSynced(link, was);
  const moved = instantOf(was?.start) !== synced.start || instantOf(was?.end) !== synced.end;
  if (!start || !end || was?.recurrence?.length || !moved) return body;
  return { ...body, start: { ...body.start, dateTime: start }, end: { ...body.end, dateTime: end } };
}
