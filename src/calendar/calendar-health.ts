// Owns one calendar's standing with Google: quota pause, broken credentials, missing calendar; each logged once.
import type { Clock } from "../clock.ts";
import type { Logger } from "../log.ts";
import { CalendarError } from "./errors.ts";
import type { GatewayMetrics } from "./metrics.ts";

export interface GatewayHealth {
  credentials: "ok" | "broken" | "unknown";
  /** While broken: Google's reason code (invalid_grant, unauthorized_client, ...) or the HTTP status. */
  credentialsReason?: string;
  /** Epoch ms until which calls fail fast after quotaExceeded. */
  pausedUntil?: number;
  /**
   * A quota pause that no call has yet shown to be over: set when Google answered quotaExceeded, kept after the pause
   * ran out until a call sent afterwards succeeds (notifications say "resumed" only then).
   */
  quotaPause?: { reason: string; until: number };
  lastError?: string;
}

export interface CalendarHealthOptions {
  therapistId: string;
  calendarId: string;
  clock: Clock;
  logger: Logger;
  metrics: GatewayMetrics;
  quotaPauseMs: number;
  /** While credentials are broken, one call per this interval is let through to test them again. */
  credentialProbeMs: number;
}

/** Admission decision for one request: whether to test broken credentials, and the pause generation it was sent in. */
export interface Admission {
  probe: boolean;
  /** Pauses begun before the request was sent; hand back to `succeeded()`. */
  generation: number;
}

export class CalendarHealth {
  readonly #o: CalendarHealthOptions;
  #credentials: GatewayHealth["credentials"] = "unknown";
  #brokenError: CalendarError | undefined;
  #nextProbe = 0;
  #pausedUntil: number | undefined;
  /** Counts pauses (begun or extended): a success ends a pause only if its request was sent after the latest one. */
  #pauseGeneration = 0;
  #pauseReason = "";
  #calendarMissing = false;
  #lastError: string | undefined;

  constructor(options: CalendarHealthOptions) {
    this.#o = options;
  }

  /** Log fields; the gateway's child logger already carries therapist_id. */
  get #ids() {
    return { calendar_id: this.#o.calendarId };
  }

  /** Throws a fail-fast CalendarError while paused or broken; `probe` when a broken credential may be tried again. */
  admit(operation: string, forceProbe = false): Admission {
    const generation = this.#pauseGeneration;
    const now = this.#o.clock.now();
    if (this.#pausedUntil !== undefined && now < this.#pausedUntil) {
      throw new CalendarError(
        `${operation}: calendar ${this.#o.calendarId} (therapist ${this.#o.therapistId}) is paused until ` +
          `${new Date(this.#pausedUntil).toISOString()} because Google answered ${this.#pauseReason}; nothing was sent`,
        { kind: "quota", status: 403, reason: this.#pauseReason },
      );
    }
    if (this.#credentials !== "broken") return { probe: false, generation };
    if (forceProbe || now >= this.#nextProbe) {
      this.#nextProbe = now + this.#o.credentialProbeMs;
      return { probe: true, generation };
    }
    throw new CalendarError(
      `${operation}: Google credentials of therapist ${this.#o.therapistId} are broken ` +
        `(${this.#brokenError?.message ?? "rejected"}); nothing was sent. ${this.#fixHint()}`,
      { kind: "auth", status: this.#brokenError?.status, reason: this.#brokenError?.reason },
    );
  }

  #fixHint(): string {
    const reason = this.#brokenError?.reason;
    if (reason === "unauthorized_client") {
      return "Grant domain-wide delegation for the calendar scope to the service account, or fix `impersonate`.";
    }
    return `Run \`calbridge authorize --therapist ${this.#o.therapistId}\` (OAuth) or check the service-account key and delegation.`;
  }

  /**
   * A request admitted with `admission` succeeded (or got Google's answer about an event): credentials work and the
   * calendar exists. It ends a quota pause only if it was sent after the pause began: a request already in flight
   * when another one met quotaExceeded says nothing about the quota now.
   */
  succeeded(admission: Admission): void {
    this.credentialsWork();
    if (this.#pausedUntil !== undefined && admission.generation === this.#pauseGeneration) {
      this.#pausedUntil = undefined;
      this.#o.metrics.paused.set({ therapist: this.#o.therapistId }, 0);
      this.#o.logger.info(this.#ids, "Google Calendar quota pause over: calendar resumed");
    }
    if (this.#calendarMissing) {
      this.#calendarMissing = false;
      this.#o.logger.info(this.#ids, "Google calendar is reachable again");
    }
  }

  /** A token was obtained or a request succeeded. */
  credentialsWork(): void {
    if (this.#credentials === "broken") {
      this.#o.logger.info(this.#ids, "Google credentials work again");
    }
    this.#credentials = "ok";
    this.#brokenError = undefined;
    this.#o.metrics.credentialsOk.set({ therapist: this.#o.therapistId }, 1);
  }

  markBroken(err: CalendarError): void {
    this.#lastError = err.message;
    this.#nextProbe = this.#o.clock.now() + this.#o.credentialProbeMs;
    this.#o.metrics.credentialsOk.set({ therapist: this.#o.therapistId }, 0);
    if (this.#credentials === "broken") return;
    this.#credentials = "broken";
    this.#brokenError = err;
    this.#o.logger.error(
      { ...this.#ids, status: err.status, reason: err.reason },
      `Google credentials rejected for therapist ${this.#o.therapistId}: ${err.message}. ` +
        `Calls to this calendar fail fast until fixed. ${this.#fixHint()}`,
    );
  }

  /** Clears the broken state (after re-authorization); the next call tries the credentials again. */
  reset(): void {
    this.#credentials = "unknown";
    this.#brokenError = undefined;
    this.#nextProbe = 0;
  }

  pause(err: CalendarError): void {
    this.#lastError = err.message;
    const already = this.#pausedUntil !== undefined;
    this.#pauseGeneration += 1;
    this.#pausedUntil = this.#o.clock.now() + this.#o.quotaPauseMs;
    this.#pauseReason = err.reason ?? "quotaExceeded";
    this.#o.metrics.paused.set({ therapist: this.#o.therapistId }, 1);
    if (already) {
      this.#o.logger.info(
        { ...this.#ids, paused_until: new Date(this.#pausedUntil).toISOString() },
        "Google Calendar quota still exhausted: pause extended",
      );
      return;
    }
    this.#o.logger.warn(
      { ...this.#ids, reason: this.#pauseReason, paused_until: new Date(this.#pausedUntil).toISOString() },
      `Google Calendar quota exhausted (${this.#pauseReason}): calendar paused, calls fail fast until the pause ends`,
    );
  }

  calendarMissing(err: CalendarError): void {
    this.#lastError = err.message;
    if (this.#calendarMissing) return;
    this.#calendarMissing = true;
    this.#o.logger.error(
      this.#ids,
      `mapping error: calendar ${this.#o.calendarId} of therapist ${this.#o.therapistId} does not exist or is not ` +
        "shared with these credentials; check therapists[].calendar_id and the calendar's sharing",
    );
  }

  recordError(err: CalendarError): void {
    this.#lastError = err.message;
  }

  snapshot(): GatewayHealth {
    const health: GatewayHealth = { credentials: this.#credentials };
    if (this.#credentials === "broken") {
      const reason = this.#brokenError?.reason ?? this.#brokenError?.status;
      if (reason !== undefined) health.credentialsReason = String(reason);
    }
    if (this.#pausedUntil !== undefined && this.#o.clock.now() < this.#pausedUntil) {
      health.pausedUntil = this.#pausedUntil;
    }
    if (this.#pausedUntil !== undefined) health.quotaPause = { reason: this.#pauseReason, until: this.#pausedUntil };
    if (this.#lastError) health.lastError = this.#lastError;
    return health;
  }
}
