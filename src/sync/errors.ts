// Owns how the engine reads errors from either API: which are permanent, which mean "gone", and a safe one-line text.
import { BookingApiError } from "../booking/errors.ts";
import { CalendarError, type CalendarErrorKind, isGrantError } from "../calendar/errors.ts";
import { RenderError } from "../calendar/render.ts";
import { StoreRecordUnreadableError } from "../store/store.ts";
import { CalendarUnavailableError } from "./mapping.ts";

/** A 404 from the booking service (appointment unknown) or from a calendar (event unknown). */
export function isNotFound(err: unknown): boolean {
  if (err instanceof BookingApiError) return err.kind === "not_found";
  if (err instanceof CalendarError) return err.kind === "not_found";
  return false;
}

export function isCalendarKind(err: unknown, kind: CalendarErrorKind): boolean {
  return err instanceof CalendarError && err.kind === kind;
}

/**
 * Errors that repeating cannot fix: bad data, a refusal. Everything else is retried with backoff. A failure at the token
 * endpoint never is: no request about the appointment was sent, so nothing was refused about it.
 */
export function isPermanent(err: unknown): boolean {
  if (err instanceof RenderError) return true;
  // A damaged record in the store (an appointment's link) stays so until a person restores or removes it.
  if (err instanceof StoreRecordUnreadableError) return true;
  if (err instanceof BookingApiError) return err.kind === "rejected" || err.kind === "invalid_request";
  if (err instanceof CalendarError) return err.kind === "invalid" && !err.tokenEndpoint;
  return false;
}

/** Kinds of calendar errors that say the calendar cannot be used now, whatever the appointment. */
const UNAVAILABLE: ReadonlySet<CalendarErrorKind> = new Set(["auth", "calendar_not_found", "quota"]);

/**
 * The therapist's calendar cannot be used now (no credentials, credentials rejected, calendar not found, paused for
 * quota): not the appointment's fault, so its syncs wait for the calendar instead of going to the dead letters.
 */
export function isUnavailable(err: unknown): boolean {
  if (err instanceof CalendarUnavailableError) return true;
  return err instanceof CalendarError && UNAVAILABLE.has(err.kind);
}

/** A refusal by the booking service that the therapist should see (slot taken, past booking, ...). */
export function isRefusal(err: unknown): err is BookingApiError {
  return err instanceof BookingApiError && (err.kind === "rejected" || err.kind === "invalid_request");
}

export function describeError(err: unknown): string {
  if (err instanceof Error) return err.message;
  return String(err);
}

/**
 * A one-line account of an error from codes and statuses, without an API's free text, for what people other than
 * the log's readers see (/status, notifications): the booking service's `error.message` is "human-readable text"
 * that may name the customer ("... for customer jane@... (Jane Doe)"). calbridge's own errors and network errors
 * are said as they are.
 */
export function safeErrorSummary(err: unknown): string {
  if (err instanceof BookingApiError) {
    return `the booking API answered ${err.code}${err.status ? ` (HTTP ${err.status})` : ""}`;
  }
  if (err instanceof CalendarError) return calendarErrorSummary(err);
  if (err instanceof Error && /^(Abort|Timeout)Error$/.test(err.name)) return "a request timed out";
  return "an unexpected error";
}

/**
 * Who failed, Google's API or its token endpoint (then no API request was sent: a push renewal's watch among them), and
 * its reason and status; or that it did not answer at all (a network error, a time limit), which has neither and was
 * said "Google answered transient".
 */
function calendarErrorSummary(err: CalendarError): string {
  const who = err.tokenEndpoint ? "Google's token endpoint" : "Google";
  // A refresh answered 200 whose scope has no calendar (consent given with its box unticked): the gateway's verdict.
  if (err.tokenEndpoint && err.reason === "insufficientPermissions") return `${who} granted no calendar scope`;
  if (err.kind === "transient" && err.status === undefined && err.reason === undefined) {
    return `no answer from ${who} (a network error or a timeout)`;
  }
  // Refused with no verdict on the grant (a Workspace admin's policy, an egress proxy's or allow-list's page, a wrong
  // google.token_url): the words "answered auth" would say neither what answered nor that nothing reached the API.
  if (err.tokenEndpoint && err.kind === "auth" && err.status !== undefined && !isGrantError(err.reason)) {
    const answer = err.reason ? `HTTP ${err.status}, ${err.reason}` : `HTTP ${err.status}, no OAuth error`;
    return `${who} refused the token request (${answer}): no access token, no API request sent`;
  }
  return `${who} answered ${err.reason ?? err.kind}${err.status ? ` (HTTP ${err.status})` : ""}`;
}

/** As safeErrorSummary for the APIs' answers; any other error (calbridge's own, the network's) as its message. */
export function errorWithoutApiText(err: unknown): string {
  return err instanceof BookingApiError || err instanceof CalendarError ? safeErrorSummary(err) : describeError(err);
}
