// Owns where a therapist's events belong: the calendar a mapping names (`primary` resolved to the delegated account's
// own calendar), and whether a link's event lies in another calendar than its therapist's mapping names now.
import type { TherapistConfig } from "../config/schema.ts";
import type { Mapping } from "./mapping.ts";
import type { Link } from "./types.ts";

/**
 * The calendar a therapist's events go to. A user's primary calendar is named by the user's address (Google's
 * calendarList reference: "primary" is the signed-in user's primary calendar; derekantrican/GAS-ICS-Sync discussion
 * #374: "Use your gmail address ... This is how Google identifies your primary calendar"), so `primary` under
 * domain-wide delegation is the impersonated account's address: a new `impersonate` with `primary` is another calendar.
 * For OAuth (no impersonate) `primary` stays `primary`: whose it is depends on the account that connected.
 */
export function calendarKey(t: Pick<TherapistConfig, "calendar_id" | "impersonate">): string {
  return t.calendar_id === "primary" && t.impersonate ? t.impersonate : t.calendar_id;
}

/** Whether two calendar ids are one written alike: Google ignores the case of an address (Anna@ and anna@ are one). */
export function sameCalendarId(a: string, b: string): boolean {
  return a.trim().toLowerCase() === b.trim().toLowerCase();
}

/**
 * Whether a calendar id recorded in a link is the therapist's calendar now. An empty id (a link made while the
 * therapist was not mapped) says nothing; an id written another way (the case of an address) is the same calendar, as
 * is one of `names`, what the therapist's calendar is known as now (its real id once Google told it, `primary` when the
 * account's own calendar is this one: see Mapping.calendarNames). `primary` recorded by an earlier build is the same
 * calendar as `primary` or the impersonated account's own address now (earlier builds did not resolve it). Anything
 * else is taken for another calendar: the relocation (relocate.ts) asks Google before it deletes from a calendar that
 * may be this one after all (`primary` and an address).
 */
export function sameCalendar(
  recorded: string,
  t: Pick<TherapistConfig, "calendar_id" | "impersonate">,
  names: readonly string[] = [],
): boolean {
  if (recorded === "" || [calendarKey(t), ...names].some((n) => sameCalendarId(n, recorded))) return true;
  return recorded === "primary" && (t.calendar_id === "primary" || sameCalendarId(t.calendar_id, t.impersonate ?? ""));
}

/** A link whose event is live in a calendar other than the one its (mapped) therapist's mapping names now. */
export function misplaced(
  link: Link | undefined,
  therapist: TherapistConfig | undefined,
  names?: readonly string[],
): boolean {
  return !!link?.present && !!therapist && !sameCalendar(link.calendarId, therapist, names);
}

/** misplaced, with what the mapping knows of the therapist's calendar (its real id, `primary`). */
export function misplacedIn(mapping: Pick<Mapping, "therapist" | "calendarNames">, link: Link | undefined): boolean {
  const t = mapping.therapist(link?.therapistId);
  return misplaced(link, t, t && mapping.calendarNames?.(t.therapist_id));
}

/** Whether a calendar id looks like a user's address (a primary calendar), which delegation can act as. */
export function isUserAddress(calendarId: string): boolean {
  return /^[^@\s]+@[^@\s]+$/.test(calendarId) && !calendarId.endsWith("calendar.google.com");
}

/**
 * Whether two calendar ids may name one Google calendar, as far as the names tell: addresses ignore case (Anna@ and
 * anna@ are one calendar to Google), and `primary` (an account's own calendar) may be any account's: the same as
 * another `primary` or as an address. A caller that must not act in a calendar in doubt takes "may" for "is".
 */
export function mayBeSameCalendar(a: string, b: string): boolean {
  if (sameCalendarId(a, b)) return true;
  const own = (x: string, y: string) => x === "primary" && (y === "primary" || isUserAddress(y));
  return own(a, b) || own(b, a);
}
