// Owns Google Calendar error classification: one CalendarError with a kind, from API, token-endpoint and network failures.

export type CalendarErrorKind =
  | "rate_limited"
  | "quota"
  | "auth"
  | "calendar_not_found"
  | "not_found"
  | "gone"
  | "duplicate"
  | "precondition"
  | "transient"
  | "invalid"
  | "forbidden"
  | "unknown";

/** Whether a request failed on the calendar itself (a 404 means the calendar), on one event, or at the token endpoint. */
export type ErrorScope = "calendar" | "event" | "token";

const RETRYABLE: ReadonlySet<CalendarErrorKind> = new Set(["rate_limited", "transient"]);

export interface CalendarErrorInit {
  kind: CalendarErrorKind;
  status?: number;
  reason?: string;
  /** Milliseconds from a Retry-After header, when the server sent one. */
  retryAfterMs?: number;
  /** True when the request may have been applied although no response arrived (lost response, timeout). */
  ambiguous?: boolean;
  /** True when the token endpoint failed, so the API request itself was never sent. */
  tokenEndpoint?: boolean;
  /** For a usageLimits answer: whose per-minute budget Google says ran out (see rateLimitScope). */
  limitScope?: LimitScope;
}

/** Whose budget a rate-limit answer speaks of: one user's or calendar's (a therapist's quotaUser), or the project's. */
export type LimitScope = "user" | "project";

/**
 * Whose budget ran out, from Google's reason and message. The "Handle API errors" page names 403
 * userRateLimitExceeded for one user, and 403/429 rateLimitExceeded, "Rate Limit Exceeded", for "the maximum request
 * rate per calendar or per authenticated user" (the "Manage quotas" page: a client "might be rate limited at any time
 * ... if you attempt to write to a single calendar in quick succession"). A spent minute quota names itself in the
 * message: "limit 'Queries per minute per user'" (Atrejoe/Inky-Calendar-Server#104), "'Queries per user per 100
 * seconds'" (alextselegidis/easyappointments#995), against "limit 'Queries per minute'" for the project
 * (calcom/cal.diy#18079). So only a message that names a quota and no user or calendar is the project's, which
 * pauses everyone; the rest pauses that therapist alone (a plain "Rate Limit Exceeded" on one therapist's calendar
 * held every other therapist's sync and cut the project's pace by a quarter each time).
 */
export function rateLimitScope(reason: string | undefined, message: string): LimitScope {
  if (reason === "userRateLimitExceeded") return "user";
  if (/\bper (user|calendar)\b/i.test(message)) return "user";
  return /\bquota\b|\bqueries per\b|\bproject\b/i.test(message) ? "project" : "user";
}

export class CalendarError extends Error {
  readonly kind: CalendarErrorKind;
  readonly status: number | undefined;
  readonly reason: string | undefined;
  readonly retryable: boolean;
  readonly retryAfterMs: number | undefined;
  readonly ambiguous: boolean;
  readonly tokenEndpoint: boolean;
  readonly limitScope: LimitScope | undefined;

  constructor(message: string, init: CalendarErrorInit) {
    super(message);
    this.name = "CalendarError";
    this.kind = init.kind;
    this.status = init.status;
    this.reason = init.reason;
    this.retryable = RETRYABLE.has(init.kind);
    this.retryAfterMs = init.retryAfterMs;
    this.ambiguous = init.ambiguous ?? false;
    this.tokenEndpoint = init.tokenEndpoint ?? false;
    this.limitScope = init.limitScope;
  }
}

/** OAuth token-endpoint error codes that mean the grant itself is no good (re-consent or fix delegation). */
const AUTH_GRANT_ERRORS: ReadonlySet<string> = new Set([
  "invalid_grant",
  "invalid_client",
  "unauthorized_client",
  "access_denied",
]);

/** The token endpoint's error code says the grant itself is no good (see AUTH_GRANT_ERRORS). */
export function isGrantError(error: string | undefined): boolean {
  return error !== undefined && AUTH_GRANT_ERRORS.has(error);
}

/**
 * Kind of an OAuth token-endpoint answer: `{ error: "invalid_grant", error_description }`, or a page that is none (an
 * egress proxy's). No API request was sent, so it is never an answer about an event ("invalid" would make it Google's
 * word on one, and permanent): a grant error, and any other refusal (a Workspace admin blocking the app, 400
 * admin_policy_enforced; a proxy or allow-list answering 403; a mistyped google.token_url answering 404), is "auth":
 * the calendar cannot be used until a person fixes it, and the credentials probe tries again meanwhile. 429 is
 * "rate_limited", 5xx and 408 "transient".
 */
export function tokenErrorKind(status: number, error: string | undefined): CalendarErrorKind {
  if (isGrantError(error)) return "auth";
  if (status === 429) return "rate_limited";
  if (status >= 500 || status === 408) return "transient";
  return "auth";
}

/**
 * 403 reasons that no retry fixes and that concern the credentials, not one event: the token lacks a calendar scope
 * (`insufficientPermissions`), the Calendar API is off in the Cloud project (`accessNotConfigured`), the account may
 * not write to the calendar (`requiredAccessLevel`). They are "auth": the therapist's credentials are broken until a
 * person fixes them (see calendar-health.ts for the hint each one gets).
 */
export const CREDENTIAL_REFUSALS: ReadonlySet<string> = new Set([
  "insufficientPermissions",
  "accessNotConfigured",
  "requiredAccessLevel",
]);

/** Kind of a Google API error from its status and first `errors[].reason`. */
export function apiErrorKind(status: number, reason: string | undefined, scope: ErrorScope): CalendarErrorKind {
  if (reason === "quotaExceeded" || reason === "dailyLimitExceeded") return "quota";
  if (status === 403 && reason && CREDENTIAL_REFUSALS.has(reason)) return "auth";
  if (reason === "rateLimitExceeded" || reason === "userRateLimitExceeded") return "rate_limited";
  // A push channel's address refused (401 push.webhookUrlUnauthorized: the domain is not verified, listed under 401 on
  // cloud.google.com/storage/docs/json_api/v1/status-codes; 400 push.webhookUrlNotHttps...): the credentials are fine.
  if (reason?.startsWith("push.")) return "invalid";
  switch (status) {
    case 400:
      return "invalid";
    case 401:
      return "auth";
    case 403:
      return "forbidden";
    case 404:
      return scope === "calendar" ? "calendar_not_found" : "not_found";
    case 408:
      return "transient";
    case 409:
      return "duplicate";
    case 410:
      return "gone";
    case 412:
      return "precondition";
    case 429:
      return "rate_limited";
  }
  return status >= 500 ? "transient" : "unknown";
}

interface ErrorShape {
  message?: unknown;
  code?: unknown;
  status?: unknown;
  response?: { status?: unknown; data?: unknown; headers?: unknown };
}

function retryAfterOf(headers: unknown): number | undefined {
  let value: string | null | undefined;
  const h = headers as { get?: unknown } | undefined;
  // gaxios hands over fetch-style Headers (from node-fetch, not the global class), older versions a plain object.
  if (typeof h?.get === "function") value = (h as { get(name: string): string | null }).get("retry-after");
  else if (h && typeof h === "object") value = (h as Record<string, string>)["retry-after"];
  if (!value) return undefined;
  const seconds = Number(value);
  if (Number.isFinite(seconds)) return Math.max(0, seconds * 1000);
  const at = Date.parse(value);
  return Number.isNaN(at) ? undefined : Math.max(0, at - Date.now());
}

const NETWORK_CODES = /^(ECONNRESET|ECONNREFUSED|ECONNABORTED|EPIPE|ETIMEDOUT|ENOTFOUND|EAI_AGAIN|UND_ERR|ERR_STREAM)/;

/**
 * Turns anything thrown by googleapis/gaxios/google-auth-library (or our own token exchange) into a CalendarError.
 * The message names the operation, status and Google's reason; it never carries request headers or tokens.
 */
export function classifyError(err: unknown, scope: ErrorScope, operation: string): CalendarError {
  if (err instanceof CalendarError) return err;
  const e = (err ?? {}) as ErrorShape;
  const rawMessage = typeof e.message === "string" ? e.message : String(err);
  const status = typeof e.response?.status === "number" ? e.response.status : undefined;
  if (status === undefined) {
    const code = typeof e.code === "string" ? e.code : "";
    const network =
      NETWORK_CODES.test(code) || /timeout|timed out|socket|network|fetch failed|aborted/i.test(rawMessage);
    const kind = network ? "transient" : "unknown";
    return new CalendarError(`${operation}: ${code ? `${code} ` : ""}${rawMessage}`, { kind, ambiguous: network });
  }
  const data = e.response?.data;
  const retryAfterMs = retryAfterOf(e.response?.headers);
  if (data && typeof data === "object" && typeof (data as { error?: unknown }).error === "string") {
    // OAuth token endpoint: { error: "invalid_grant", error_description: "..." }
    const { error, error_description } = data as { error: string; error_description?: string };
    const kind = tokenErrorKind(status, error);
    const text = `${operation}: token endpoint answered ${status} ${error}${error_description ? `: ${error_description}` : ""}`;
    return new CalendarError(text, { kind, status, reason: error, retryAfterMs, tokenEndpoint: true });
  }
  const body = (data as { error?: { errors?: { reason?: string; message?: string }[]; message?: string } })?.error;
  const reason = body?.errors?.[0]?.reason;
  const message = body?.message ?? body?.errors?.[0]?.message ?? rawMessage;
  const kind = scope === "token" ? tokenErrorKind(status, reason) : apiErrorKind(status, reason, scope);
  return new CalendarError(`${operation}: ${status}${reason ? ` ${reason}` : ""}: ${message}`, {
    kind,
    status,
    reason,
    retryAfterMs,
    tokenEndpoint: scope === "token",
    ...(kind === "rate_limited" && scope !== "token" ? { limitScope: rateLimitScope(reason, String(message)) } : {}),
  });
}

/**
 * The event id is taken in this calendar by a guest's copy of an invitation (ids.ts isInvitation): calbridge cannot
 * make the appointment's event under it there, nor may it take the copy over (deleting the organizer's event cancels
 * it). Another generation of the id is used.
 */
export class IdTakenError extends CalendarError {
  constructor(message: string, init: CalendarErrorInit) {
    super(message, init);
    this.name = "IdTakenError";
  }
}

/** Google refuses to bring back a deleted event under its id (a person deleted it in the Calendar UI). */
export class RestoreRefusedError extends CalendarError {
  constructor(message: string, init: CalendarErrorInit) {
    super(message, init);
    this.name = "RestoreRefusedError";
  }
}
