// Owns calendar event identity: deterministic event ids derived from appointment ids, and the extended-property names.
import { hash } from "node:crypto";

/** Private extended property holding the appointment id on every managed event. */
export const APPOINTMENT_ID_PROPERTY = "calbridge_appointment_id";
/** Private extended property marking an event as managed by calbridge; listings filter on `calbridge_managed=1`. */
export const MANAGED_PROPERTY = "calbridge_managed";
export const MANAGED_VALUE = "1";
/**
 * Private extended property naming the times calbridge wrote into the event, and when (times-mark.ts): an event at
 * those times shows calbridge's own write even where the record of that write was lost. Instants only.
 */
export const TIMES_PROPERTY = "calbridge_times";
/** The `privateExtendedProperty` filter value that selects managed events. */
export const MANAGED_FILTER = `${MANAGED_PROPERTY}=${MANAGED_VALUE}`;

const BASE32HEX = "0123456789abcdefghijklmnopqrstuv";
const PREFIX = "cb";
const VALID_ID = /^[a-v0-9]{5,1024}$/;

/**
 * RFC 4648 base32hex, lower case, without padding, after `prefix` (ASCII). The characters are written into a byte buffer and decoded once:
 * appending them one by one to a string builds a V8 rope of one node per character (~1.7 KB per 54-character id), and
 * a cold reconciliation keeps tens of thousands of these ids alive.
 */
export function base32hex(bytes: Uint8Array, prefix = ""): string {
  const out = Buffer.allocUnsafe(prefix.length + Math.ceil((bytes.length * 8) / 5));
  let n = out.write(prefix, "latin1");
  let buffer = 0;
  let bits = 0;
  for (let i = 0; i < bytes.length; i++) {
    buffer = (buffer << 8) | bytes[i]!;
    bits += 8;
    while (bits >= 5) {
      out[n++] = BASE32HEX.charCodeAt((buffer >>> (bits - 5)) & 31);
      bits -= 5;
    }
    buffer &= (1 << bits) - 1;
  }
  if (bits > 0) out[n++] = BASE32HEX.charCodeAt((buffer << (5 - bits)) & 31);
  return out.toString("latin1", 0, n);
}

/**
 * The Google event id of an appointment: "cb" + base32hex(SHA-256(appointment id)), 54 characters of `a-v0-9`.
 * The same appointment always maps to the same id, so a retried insert answers 409 instead of duplicating.
 * `generation` > 0 derives an alternative id, for the rare case where Google refuses to restore a deleted event.
 */
export function eventIdFor(appointmentId: string, generation = 0): string {
  const input = generation > 0 ? `${appointmentId}#${generation}` : appointmentId;
  return base32hex(hash("sha256", input, "buffer"), PREFIX);
}

/** Whether Google accepts `id` as a client-supplied event id (base32hex characters, 5 to 1024 long). */
export function isValidEventId(id: string): boolean {
  return VALID_ID.test(id);
}

/** The part of an event that holds calbridge's marks (matches calendar_v3.Schema$Event). */
export interface MarkedLike {
  extendedProperties?: { private?: Record<string, string> | null } | null;
}

/**
 * Whether the event carries both of calbridge's marks for the appointment. Another client's full update (events.update
 * is a PUT: it replaces the event's extended properties wholesale) can strip them from an event calbridge made, as
 * Thunderbird's Provider for Google Calendar did (kewisch/gdata-provider #747): calbridge owns them and puts them back.
 */
export function carriesMarks(event: MarkedLike, appointmentId: string): boolean {
  const marks = event.extendedProperties?.private;
  return marks?.[APPOINTMENT_ID_PROPERTY] === appointmentId && marks?.[MANAGED_PROPERTY] === MANAGED_VALUE;
}

/** The part of an event that tells whose copy it is (matches calendar_v3.Schema$Event). */
export interface OrganizedLike {
  organizer?: { email?: string | null; self?: boolean | null } | null;
}

/**
 * Whether the event is a guest's copy of an invitation: its organizer is another calendar (Event.organizer.self:
 * "Whether the organizer corresponds to the calendar on which this copy of the event appears"). A therapist who adds a
 * colleague as a guest puts such a copy in the colleague's calendar, under the same event id, without calbridge's
 * private marks (those are "private to the copy of the event that appears on this calendar"): calbridge's id, but never
 * an appointment's event in that calendar. Its changes are the organizer's (or the guest's answer), and deleting it
 * declines the invitation. An event that does not say (a deleted event, only its id) is not taken for one, nor one
 * that carries calbridge's mark (private to the copy calbridge wrote: never a guest's), nor, where the caller knows
 * the calendar's id, one whose organizer is that calendar.
 */
export function isInvitation(event: OrganizedLike & MarkedLike, calendarId?: string): boolean {
  const organizer = event.organizer;
  if (organizer === undefined || organizer === null || organizer.self === true) return false;
  if (event.extendedProperties?.private?.[APPOINTMENT_ID_PROPERTY] != null) return false;
  return calendarId === undefined || organizer.email?.toLowerCase() !== calendarId.toLowerCase();
}

/**
 * Whether an event under calbridge's own id (the appointment's, a later generation of it, a series Google split off
 * it) counts as the appointment's: it names this appointment, or none (its marks stripped by another client's full
 * update, carriesMarks). One naming another appointment never does, nor a guest's copy of an invitation (isInvitation).
 */
export function namesNoOther(event: MarkedLike & OrganizedLike, appointmentId: string): boolean {
  if (isInvitation(event)) return false;
  const named = event.extendedProperties?.private?.[APPOINTMENT_ID_PROPERTY];
  return named === undefined || named === null || named === appointmentId;
}
