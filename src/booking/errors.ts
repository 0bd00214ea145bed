// Owns the booking API's error type: one class, its code, and the classification of a code/status into a kind.
import { secrets } from "../log.ts";

export type BookingErrorKind =
  | "auth"
  | "not_found"
  | "rate_limited"
  | "transient"
  | "rejected"
  | "invalid_request"
  | "unknown";

/** Codes the client synthesizes when the server gave none (or gave nothing parseable). */
export type SynthesizedCode =
  | "unauthorized"
  | "not_found_unverified"
  | "rate_limited"
  | "server_error"
  | "network_error"
  | "timeout"
  | "invalid_response"
  | "not_applied"
  | "unconfirmed_success"
  | "changed_meanwhile";

/** Business refusals named by the spec: the request was understood and refused; retrying will not help. */
const REJECTED_CODES = new Set([
  "slot_unavailable",
  "therapist_unavailable",
  "past_booking",
  "customer_blocked",
  "service_not_found",
]);

/**
 * Codes that say the rate limit is exceeded. The spec shows neither the status nor the body of that answer, so the code
 * decides whatever the status: a 403 saying rate_limited is a pause, not a credentials failure.
 */
export const RATE_LIMIT_CODES: ReadonlySet<string> = new Set(["rate_limited", "rate_limit_exceeded"]);

/**
 * Classifies by `error.code` first (the spec gives no status per code), then by HTTP status.
 * Synthesized codes (network_error, timeout) have no status and are transient.
 */
export function classify(code: string, status: number | undefined): BookingErrorKind {
  if (RATE_LIMIT_CODES.has(code)) return "rate_limited";
  // not_applied: a success whose appointment, read again, does not show the change; the service did not make it.
  if (REJECTED_CODES.has(code) || code === "not_applied") return "rejected";
  // invalid_appointment_id: refused by the client itself before sending (an id that would change the request path).
  if (code === "invalid_request" || code === "invalid_appointment_id") return "invalid_request";
  if (code === "network_error" || code === "timeout") return "transient";
  if (status === 401 || status === 403) return "auth";
  // "Gone" deletes the appointment's event, so only the service's own answer (its error envelope) may say it. A bare
  // 404 (a proxy or load balancer between deploys, an HTML page) is retried like an outage.
  // The code must say so, too: a 404 naming something else (a route, an API version) is no deleted appointment.
  if (status === 404) {
    if (code === "not_found_unverified") return "transient";
    return code === "not_found" || /appointment/i.test(code) ? "not_found" : "unknown";
  }
  if (status === 429) return "rate_limited";
  if (status !== undefined && status >= 500) return "transient";
  return "unknown";
}

/** The code to use when the response carried no usable error envelope. */
export function synthesizeCode(status: number): SynthesizedCode {
  if (status === 401 || status === 403) return "unauthorized";
  if (status === 404) return "not_found_unverified";
  if (status === 429) return "rate_limited";
  if (status >= 500) return "server_error";
  return "invalid_response";
}

export interface BookingApiErrorInit {
  code: string;
  message: string;
  status?: number | undefined;
  details?: Record<string, unknown> | undefined;
  requestId?: string | undefined;
  method?: string | undefined;
  path?: string | undefined;
  cause?: unknown;
}

export class BookingApiError extends Error {
  override readonly name = "BookingApiError";
  readonly code: string;
  readonly details: Record<string, unknown>;
  readonly status: number | undefined;
  readonly requestId: string | undefined;
  readonly kind: BookingErrorKind;
  /** `GET /v1/appointments/:id`-style description of the call, without query string or host. */
  readonly method: string | undefined;
  readonly path: string | undefined;

  constructor(init: BookingApiErrorInit) {
    const where =
      init.method && init.path ? ` (${init.method} ${init.path}${init.status ? ` -> ${init.status}` : ""})` : "";
    // Registered secrets (the API key among them) never reach a message, whatever the server echoed.
    const message = secrets.scrub(`${init.code}: ${init.message}${where}`);
    super(message, init.cause === undefined ? undefined : { cause: init.cause });
    this.code = init.code;
    this.details = init.details ?? {};
    this.status = init.status;
    this.requestId = init.requestId;
    this.method = init.method;
    this.path = init.path;
    this.kind = classify(init.code, init.status);
  }

  /** Whether sending the same request again may succeed (transient failures and rate limiting). */
  get retryable(): boolean {
    return this.kind === "transient" || this.kind === "rate_limited";
  }

  toJSON(): Record<string, unknown> {
    return {
      name: this.name,
      message: this.message,
      code: this.code,
      kind: this.kind,
      status: this.status,
      requestId: this.requestId,
      details: this.details,
    };
  }
}

export function isBookingApiError(e: unknown): e is BookingApiError {
  return e instanceof BookingApiError;
}

/**
 * A write not sent again because the appointment, read before the resend, was changed by someone else since the write
 * was decided on (the customer rescheduled during the backoff): sending it would write over that change.
 */
export function changedMeanwhile(method: string, path: string): BookingApiError {
  return new BookingApiError({
    code: "changed_meanwhile",
    message: "the appointment was changed by someone else since the write was decided on; not sent again",
    method,
    path,
  });
}

export const isChangedMeanwhile = (e: unknown): e is BookingApiError =>
  e instanceof BookingApiError && e.code === "changed_meanwhile";
