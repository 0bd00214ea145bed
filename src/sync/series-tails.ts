// Owns the series Google splits off an appointment's event: "This and following events" on an occurrence of a series a
// therapist made of the event ends that series and starts a new one under an id Google makes of the event's
// (`<event id>_R<yyyymmddThhmmss>`, a `Z` in the emulator), keeping the fields, calbridge's marks included. An
// appointment is one event: when calbridge makes its event single again, or removes it, such a tail goes too. The id
// is calbridge's own: a tail counts when it names this appointment or none (marks another client's full update
// stripped, from it or from the event before the split, kewisch/gdata-provider #747), never when it names another.
// Nothing else qualifies (a copy under any other id stays), and nothing about a tail is ever sent to the booking service.
// The same goes for an occurrence of such a series moved on its own ("This event"): Google keeps it, under
// `<event id>_<original start>` with `recurringEventId` the event's id, when the series' rule goes (BuilderIO/agent-native
// #3488 met it and deletes them itself), and calbridge's listings, which read occurrences as no event of their own,
// would never see it again.
import { instantOf } from "../calendar/fingerprint.ts";
import { namesNoOther } from "../calendar/ids.ts";
import type { CalEvent, CalendarPort } from "./types.ts";

/** Google's id for a series split off `eventId` (split again: one more `_R<time>`). */
const SPLIT = /^(?:_R\d{8}T\d{6}Z?)+$/;

/** Whether `event` is a live series Google split off the appointment's event `eventId`, naming no other appointment. */
export function isTailOf(event: CalEvent, appointmentId: string, eventId: string): boolean {
  const id = event.id ?? "";
  return (
    event.status !== "cancelled" &&
    id.startsWith(eventId) &&
    SPLIT.test(id.slice(eventId.length)) &&
    namesNoOther(event, appointmentId)
  );
}

/** Whether `event` is a live occurrence of the appointment's event `eventId` stored on its own (moved, edited). */
export function isExceptionOf(event: CalEvent, appointmentId: string, eventId: string): boolean {
  return event.status !== "cancelled" && event.recurringEventId === eventId && namesNoOther(event, appointmentId);
}

export interface Removed {
  id: string;
  /** A series Google split off the event, or an occurrence of the event's series stored on its own. */
  kind: "tail" | "occurrence";
}

/**
 * Deletes the series split off the appointment's event `eventId` in `cal`, and the occurrences of its series stored on
 * their own; what was deleted. Those carrying the marks are listed by them (any time); with `since` (the event's start,
 * epoch ms: a tail starts at a later occurrence), the calendar's events from then on are listed too, for those whose
 * marks were stripped (the listing by the mark misses).
 */
export async function removeTails(
  cal: Pick<CalendarPort, "listMarked" | "listFrom" | "delete">,
  appointmentId: string,
  eventId: string,
  since?: number,
): Promise<Removed[]> {
  const found = new Map<string, Removed["kind"]>();
  const take = (ev: CalEvent) => {
    if (!ev.id) return;
    if (isTailOf(ev, appointmentId, eventId)) found.set(ev.id, "tail");
    else if (isExceptionOf(ev, appointmentId, eventId)) found.set(ev.id, "occurrence");
  };
  for await (const ev of cal.listMarked(appointmentId)) take(ev);
  if (since !== undefined) for await (const ev of cal.listFrom(new Date(since).toISOString())) take(ev);
  for (const id of found.keys()) await cal.delete(id);
  return [...found].map(([id, kind]) => ({ id, kind }));
}

/**
 * Where to look for unmarked tails from: the earliest start known of the appointment's event (the link's, the
 * event's), when the event in hand is a series (only a series is split; the unfiltered listing costs a paged read of
 * the calendar from there on, not spent on every removal). Undefined otherwise: tails carrying the marks are still
 * found by them.
 */
export function tailsSince(link: { eventStart?: number } | undefined, event?: CalEvent | null): number | undefined {
  if (!event?.recurrence?.length) return undefined;
  const starts = [link?.eventStart, instantOf(event?.start)].filter((t): t is number => t !== undefined);
  return starts.length > 0 ? Math.min(...starts) : undefined;
}
