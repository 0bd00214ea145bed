// Owns where a therapist's events belong: the calendar a mapping names (`primary` resolved to the delegated account's
// own calendar), and whether a link's event lies in another calendar than its therapist's mapping names now.
import type { TherapistConfig } from "../config/schema.ts";
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

/**
 * Whether a calendar id recorded in a link is the therapist's calendar now. An empty id (a link made while the
 * therapist was not mapped) says nothing; `primary` recorded by an earlier build is the same calendar as `primary` or
 * the impersonated account's own address now (earlier builds did not resolve it).
 */
export function sameCalendar(recorded: string, t: Pick<TherapistConfig, "calendar_id" | "impersonate">): boolean {
  if (recorded === "" || recorded === calendarKey(t)) return true;
  return recorded === "primary" && (t.calendar_id === "primary" || t.calendar_id === t.impersonate);
}

/** A link whose event is live in a calendar other than the one its (mapped) therapist's mapping names now. */
export function misplaced(link: Link | undefined, therapist: TherapistConfig | undefined): boolean {
  return !!link?.present && !!therapist && !sameCalendar(link.calendarId, therapist);
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
  if (a.toLowerCase() === b.toLowerCase()) return true;
  const own = (x: string, y: string) => x === "primary" && (y === "primary" || isUserAddress(y));
  return own(a, b) || own(b, a);
}
