// Owns what calbridge asks Google for and how it reads the answer: the calendar scope, the words Google's consent page
// shows for it, and whether the scopes a token response granted are enough.
import { CALENDAR_SCOPE } from "./service-account.ts";

export { CALENDAR_SCOPE };

/** The consent page's checkbox for CALENDAR_SCOPE, in Google's words (what a person must tick). */
export const CALENDAR_SCOPE_LABEL =
  "See, edit, share and permanently delete all the calendars you can access using Google Calendar";

/** Scopes that let a token write events (the Calendar API reference's "Authorization" section of events.insert). */
const EVENT_WRITE_SCOPES = new Set([CALENDAR_SCOPE, "https://www.googleapis.com/auth/calendar.events"]);

/** The scopes of a token response's `scope` (space-delimited, RFC 6749 section 5.1); [] when absent. */
export function grantedScopes(scope: unknown): string[] {
  return typeof scope === "string" ? scope.split(/\s+/).filter(Boolean) : [];
}

/** Whether the consent granted what calbridge asks for: the calendar scope itself. */
export function grantsCalendar(scopes: readonly string[]): boolean {
  return scopes.includes(CALENDAR_SCOPE);
}

/** Whether a token with these scopes can write events at all (a refresh answer tells this before any API call). */
export function canWriteEvents(scopes: readonly string[]): boolean {
  return scopes.some((s) => EVENT_WRITE_SCOPES.has(s));
}

/** One line for a person who did not tick the box: what to tick on Google's page. */
export function missingScopeAdvice(): string {
  return `On Google's page, tick "${CALENDAR_SCOPE_LABEL}" before pressing Allow (Continue).`;
}
