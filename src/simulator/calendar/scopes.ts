// Owns what the emulator knows of OAuth scopes: which Calendar scopes allow which API call, which scopes are sign-in
// scopes, and the words the consent page shows for each.

export const CALENDAR_SCOPE = "https://www.googleapis.com/auth/calendar";
const PREFIX = "https://www.googleapis.com/auth/";

/**
 * Scopes the Calendar API reference lists as enough for each kind of call (the "Authorization" section of each
 * method, e.g. https://developers.google.com/calendar/api/v3/reference/events/insert#auth): writing events needs
 * calendar or calendar.events; reading them also takes the read-only variants; calendars.get and calendarList
 * need the calendar-level scopes.
 */
const EVENT_WRITE = new Set([CALENDAR_SCOPE, `${PREFIX}calendar.events`]);
const EVENT_READ = new Set([...EVENT_WRITE, `${PREFIX}calendar.readonly`, `${PREFIX}calendar.events.readonly`]);
const CALENDAR_READ = new Set([CALENDAR_SCOPE, `${PREFIX}calendar.readonly`]);
/** acl.list's "Authorization" section: calendar, calendar.acls or calendar.acls.readonly (not calendar.readonly). */
const ACL_READ = new Set([CALENDAR_SCOPE, `${PREFIX}calendar.acls`, `${PREFIX}calendar.acls.readonly`]);
const ANY = new Set([...EVENT_READ, ...CALENDAR_READ]);

const WRITE_METHODS = new Set(["POST", "PUT", "PATCH", "DELETE"]);

/** Whether a token holding `scopes` may make the Calendar API call `method path` (path under /calendar/v3/). */
export function scopesAllow(scopes: readonly string[], method: string, path: string): boolean {
  const rest = path.replace(/^\/calendar\/v3\//, "");
  let needed: Set<string>;
  if (/^calendars\/[^/]+\/events(\/|$)/.test(rest)) {
    const watch = /\/events\/watch$/.test(rest);
    needed = WRITE_METHODS.has(method) && !watch ? EVENT_WRITE : EVENT_READ;
  } else if (/^calendars\/[^/]+\/acl(\/|$)/.test(rest)) {
    needed = ACL_READ;
  } else if (/^(calendars\/[^/]+|users\/me\/calendarList(\/.*)?)$/.test(rest)) {
    needed = CALENDAR_READ;
  } else needed = ANY;
  return scopes.some((s) => needed.has(s));
}

/** Sign-in scopes: granted with the account, never shown as a checkbox (Google's granular-permissions guide). */
export const SIGN_IN_SCOPES: ReadonlySet<string> = new Set([
  "openid",
  "email",
  "profile",
  `${PREFIX}userinfo.email`,
  `${PREFIX}userinfo.profile`,
]);

/** The consent page's line for a scope, in Google's words. */
export const SCOPE_DESCRIPTIONS: Readonly<Record<string, string>> = {
  [CALENDAR_SCOPE]: "See, edit, share and permanently delete all the calendars you can access using Google Calendar",
  [`${PREFIX}calendar.readonly`]: "See and download any calendar you can access using your Google Calendar",
  [`${PREFIX}calendar.events`]: "View and edit events on all your calendars",
  [`${PREFIX}calendar.events.readonly`]: "View events on all your calendars",
};
