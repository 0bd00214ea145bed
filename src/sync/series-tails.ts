// Owns the series Google splits off an appointment's event: "This and following events" on an occurrence of a series a
// therapist made of the event ends that series and starts a new one under an id Google makes of the event's
// (`<event id>_R<yyyymmddThhmmss>`, a `Z` in the emulator), keeping the fields, calbridge's marks included. An
// appointment is one event: when calbridge makes its event single again, or removes it, such a tail goes too. Nothing
// else qualifies (a copy under any other id stays), and nothing about a tail is ever sent to the booking service.
import { APPOINTMENT_ID_PROPERTY, MANAGED_PROPERTY, MANAGED_VALUE } from "../calendar/ids.ts";
import type { CalEvent, CalendarPort } from "./types.ts";

/** Google's id for a series split off `eventId` (split again: one more `_R<time>`). */
const SPLIT = /^(?:_R\d{8}T\d{6}Z?)+$/;

/** Whether `event` is a series Google split off the appointment's event `eventId`, with both of calbridge's marks. */
export function isTailOf(event: CalEvent, appointmentId: string, eventId: string): boolean {
  const id = event.id ?? "";
  const marks = event.extendedProperties?.private;
  return (
    event.status !== "cancelled" &&
    id.startsWith(eventId) &&
    SPLIT.test(id.slice(eventId.length)) &&
    marks?.[APPOINTMENT_ID_PROPERTY] === appointmentId &&
    marks?.[MANAGED_PROPERTY] === MANAGED_VALUE
  );
}

/** Deletes the series split off the appointment's event `eventId` in `cal` (one listing); the ids deleted. */
export async function removeTails(
  cal: Pick<CalendarPort, "listMarked" | "delete">,
  appointmentId: string,
  eventId: string,
): Promise<string[]> {
  const tails: string[] = [];
  for await (const ev of cal.listMarked(appointmentId)) {
    if (ev.id && isTailOf(ev, appointmentId, eventId)) tails.push(ev.id);
  }
  for (const id of tails) await cal.delete(id);
  return tails;
}
