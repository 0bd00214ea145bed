// Owns the later generations of an appointment's event: a link that names a generation below one live in its calendar
// is stale. Google refuses calbridge an id a person deleted, so an event put back (an administrator's restore, an
// unwatched change undone) lives on under eventIdFor(id, g + 1). A store put back from a backup taken before that
// still names the deleted id: taken at its word, the deletion would be written back, cancelling an appointment someone
// decided to keep, with the live event left in the calendar. The live later generation is adopted instead.
import { eventIdFor, namesNoOther } from "../calendar/ids.ts";
import type { LinkStore } from "./links.ts";
import type { CalEvent, CalendarPort, Link } from "./types.ts";

/** Generations above the link's looked at, at most. */
export const LATER_GENERATIONS = 5;

/**
 * Whether `event` (under one of the appointment's ids) is live and the appointment's: it names this appointment or none
 * (marks another client's full update stripped: the sync puts them back); one naming another appointment is not.
 */
export function liveAndOurs(event: CalEvent | null | undefined, appointmentId: string): event is CalEvent {
  return !!event && event.status !== "cancelled" && namesNoOther(event, appointmentId);
}

/**
 * The live later generation of the link's event in `cal` (the link's calendar), if any. Generations are taken in turn,
 * each only after a person deleted the one before (Google keeps a deleted event, status "cancelled"): the search goes
 * up while it finds deleted ones, and stops at the first id the calendar does not know. Read errors are thrown.
 */
export async function laterGeneration(
  cal: Pick<CalendarPort, "get">,
  link: Pick<Link, "appointmentId" | "generation">,
): Promise<{ event: CalEvent; generation: number } | undefined> {
  const from = link.generation ?? 0;
  for (let g = from + 1; g <= from + LATER_GENERATIONS; g++) {
    const event = await cal.get(eventIdFor(link.appointmentId, g));
    if (!event) return undefined;
    if (liveAndOurs(event, link.appointmentId)) return { event, generation: g };
  }
  return undefined;
}

/**
 * The link made to name a live later generation: its calendar side is the event as it stands (nothing in it is taken
 * for the therapist's change), its booking side stays what was last applied (a booking changed since is pushed to it).
 */
export function relinked(
  links: Pick<LinkStore, "make">,
  link: Link,
  later: { event: CalEvent; generation: number },
): Link {
  return links.make({
    appointmentId: link.appointmentId,
    therapistId: link.therapistId,
    eventId: later.event.id ?? eventIdFor(link.appointmentId, later.generation),
    generation: later.generation,
    booking: link.booking,
    sourceAt: link.sourceAt,
    event: later.event,
    present: true,
    ...(link.rendered ? { rendered: link.rendered } : {}),
    ...(link.notice ? { notice: link.notice } : {}),
    ...(link.enrich ? { enrich: true } : {}),
  });
}
