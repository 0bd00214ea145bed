// Owns echo suppression: telling calbridge's own writes (and deletions), seen again in a calendar, from a person's change.
import { fingerprint, instantOf, type Ownership } from "../calendar/fingerprint.ts";
import { carriesMarks } from "../calendar/ids.ts";
import type { CalEvent, Link } from "./types.ts";

/**
 * calbridge's own write (or deletion) seen again, or an event that still matches what was last synced (in the fields
 * calbridge owns: reminders where they are configured, and its marks). Not a live event whose write-back the guard
 * holds (`held`): the therapist undid the change (restored it from the bin, dragged it back), and its sync releases
 * the hold, which would otherwise wait for the next reconciliation and take the therapist's next change in with it.
 */
export function isEcho(
  link: Link | undefined,
  therapistId: string,
  event: CalEvent,
  owned: Ownership = { reminders: false },
  held = false,
): boolean {
  if (!link) return false;
  if (link.therapistId !== therapistId) return false;
  if (event.status === "cancelled") return !link.present;
  if (held) return false;
  if (!link.present) return false;
  // calbridge's marks gone (another client's full update): not what calbridge wrote; the sync puts them back.
  if (!carriesMarks(event, link.appointmentId)) return false;
  if (event.etag && event.etag === link.etag) return true;
  // Same times and same owned fields as last written: nothing the engine would act on (e.g. reminders changed).
  return (
    instantOf(event.start) === link.eventStart &&
    instantOf(event.end) === link.eventEnd &&
    fingerprint(event, owned) === link.fingerprint
  );
}
