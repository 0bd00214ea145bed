// Owns one logical Google call: fail-fast gate, error classification, retries with backoff, metrics and health updates.
import { AsyncLocalStorage } from "node:async_hooks";
import type { OAuth2Client } from "google-auth-library";
import type { Clock } from "../clock.ts";
import { type Deadline, deadline } from "../deadline.ts";
import type { Logger } from "../log.ts";
import { writeGuard } from "../write-guard.ts";
import { dropAccessToken } from "./auth.ts";
import { type BackoffPolicy, backoffDelay } from "./backoff.ts";
import type { CalendarHealth } from "./calendar-health.ts";
import { CalendarError, type CalendarErrorKind, classifyError, type ErrorScope } from "./errors.ts";
import type { GatewayMetrics } from "./metrics.ts";
import { type GoogleQuotaGate, unitsOf } from "./quota-gate.ts";

/**
 * Errors that are Google's considered answer about an event: credentials and quota evidently work. Never one from the
 * token endpoint: no token was obtained, and no API request was sent.
 */
const ANSWERS: ReadonlySet<CalendarErrorKind> = new Set([
  "not_found",
  "gone",
  "duplicate",
  "precondition",
  "invalid",
  "forbidden",
]);

/** Calls that change the calendar (only their success shows that a refused write works again). */
const WRITES: ReadonlySet<string> = new Set(["events.insert", "events.update", "events.patch", "events.delete"]);
/** Calls that only read (given up in flight as well when their caller gives up). */
const READS = /\.(get|list)$/;
/** Calls that change a calendar's events: each of their attempts passes the guard of `guardingWrites` first. */
const CHANGES: ReadonlySet<string> = new Set([...WRITES, "events.move"]);

export interface CallState {
  /** Some attempt may have been applied without our seeing the answer (lost response, timeout, 5xx). */
  ambiguous: boolean;
}

/**
 * The failed attempt may have been applied: no answer (lost response, timeout), an answer that is no JSON object, or
 * a 5xx from the API (Google does not promise that a backendError left the event alone). A failed token request never
 * sent the API request.
 */
function maybeApplied(err: CalendarError): boolean {
  if (err.tokenEndpoint) return false;
  return err.ambiguous || (err.status !== undefined && err.status >= 500);
}

/** The signal that gives up the waits of the Google calls made within `givingUpWaits` (however deep). */
const waitsScope = new AsyncLocalStorage<AbortSignal>();

/**
 * Runs `fn` so that its Google calls give up waiting (for a quota permit, or between retries) when `signal` aborts:
 * the engine runs each sync this way, so a stop does not wait for calls that have sent nothing. Such a call rejects
 * with the signal's reason; one whose earlier attempt may have been applied is not given up but finished (retried).
 */
export function givingUpWaits<T>(signal: AbortSignal, fn: () => T): T {
  return waitsScope.run(signal, fn);
}

/** The signal that gives up the reads in flight of the Google calls made within `givingUpAfter`. */
const readsScope = new AsyncLocalStorage<AbortSignal>();

/**
 * `givingUpWaits` for `ms`, and reads in flight too: the Google calls `fn` makes are given up once that much time has
 * passed, with `reason` (a write already sent is still finished). For the bounded waits of one-shot commands.
 */
export async function givingUpAfter<T>(ms: number, reason: () => Error, fn: () => Promise<T>): Promise<T> {
  const wait = new AbortController();
  const timer = setTimeout(() => wait.abort(reason()), ms);
  try {
    return await waitsScope.run(wait.signal, () => readsScope.run(wait.signal, fn));
  } finally {
    clearTimeout(timer);
  }
}

/**
 * `guardingWrites` (src/write-guard.ts) runs its guard before each attempt of the Google calls that change a calendar
 * (insert, update, patch, delete, move; reads pass unchecked): one that throws sends nothing, and the call rejects with
 * what it threw. A retry is checked too, also after an attempt that may have been applied: the next leader reads what
 * it finds.
 */
export { guardingWrites } from "../write-guard.ts";

/** What each attempt's request must carry: googleapis takes it as a method's second argument (MethodOptions). */
export interface AttemptOptions {
  /** Aborts the attempt when its time limit passes (the runner ends the limit as soon as the attempt is over). */
  signal: AbortSignal;
}

/**
 * What an attempt failed with: gaxios words an abort its own way ("The operation was aborted due to timeout"), so a
 * limit that passed before any answer came is reported as itself, with its length. An error of our own (the token
 * endpoint's, met while the limit ran out) is the more precise account and stays.
 */
export function attemptFailure(limit: Deadline, thrown: unknown): unknown {
  if (!limit.expired || thrown instanceof CalendarError) return thrown;
  const answered = (thrown as { response?: unknown } | null)?.response !== undefined;
  return answered ? thrown : limit.signal.reason;
}

export interface CallOptions {
  state?: CallState;
  /** Let the call through even while credentials are broken (doctor's access check). */
  probe?: boolean;
  /**
   * The call's failure is about something besides the credentials (events.watch: the push address): it never marks
   * them broken, nor working (a 401 still gets one new token).
   */
  detached?: boolean;
  /**
   * The call is on another calendar of the account (its id), not this one (the therapist's own calendars the moved-out
   * look-up reads): it is detached, and what that calendar answers is named after it and never recorded in this
   * calendar's health (its last error, a missing calendar); a failure is logged. A quota answer still pauses (quotas
   * are the account's and the project's).
   */
  on?: string;
}

export interface CallRunnerOptions {
  calendarId: string;
  auth: OAuth2Client;
  clock: Clock;
  logger: Logger;
  metrics: GatewayMetrics;
  health: CalendarHealth;
  backoff: BackoffPolicy;
  maxAttempts: number;
  /** Google's quotas, shared by every gateway: each request waits there for its permit before it is sent. */
  quota?: GoogleQuotaGate;
  /** Whom the per-user quota is charged to (the quotaUser every request carries). */
  quotaUser: string;
  /** Time limit of one attempt, answer body included (default 30 s). */
  timeoutMs?: number;
  /**
   * Awaited before a request that tests broken credentials again: credentials stored meanwhile (a reconnect by another
   * process) are taken up first, so the test is of them. It logs its own failure; the test goes on as it was.
   */
  beforeProbe?: () => Promise<unknown>;
}

export class CallRunner {
  readonly #o: CallRunnerOptions;

  constructor(options: CallRunnerOptions) {
    this.#o = options;
  }

  /**
   * Sends until success or a final error (a CalendarError). Retries rate limits, 5xx and network errors with backoff;
   * pauses the calendar on quotaExceeded; after a 401 fetches a new token once, then declares the credentials broken;
   * a 403 insufficientPermissions, accessNotConfigured or requiredAccessLevel declares them broken at once.
   */
  async run<T>(
    operation: string,
    scope: ErrorScope,
    send: (attempt: AttemptOptions) => Promise<{ data: T; status: number }>,
    options: CallOptions = {},
  ): Promise<T> {
    const { auth, health, metrics } = this.#o;
    let reauthorized = false;
    const write = WRITES.has(operation);
    const guard = CHANGES.has(operation) ? writeGuard() : undefined;
    // Given up while nothing of the call may have been applied: then the caller hears the stop, nothing else.
    let giveUp = waitsScope.getStore();
    for (let attempt = 1; ; attempt++) {
      guard?.();
      const admission = health.admit(operation, options.probe, write);
      if (admission.probe) {
        await this.#o.beforeProbe?.().catch(() => {});
        dropAccessToken(auth);
      }
      const permit = await this.#o.quota?.acquire(this.#o.quotaUser, unitsOf(operation), giveUp);
      try {
        if (guard) {
          // The access token first (the hourly refresh, or the one after a 401, can take seconds): a write is sent
          // only if the lease is still held after it, not by a replica that lost it meanwhile. A failure to get one
          // is left to the call itself, which meets it again and says what it means (credentials, transient).
          await auth.getAccessToken().catch(() => {});
        }
        guard?.(); // the permit may have been long in coming, and the token
      } catch (err) {
        permit?.done();
        throw err;
      }
      const sentAt = performance.now();
      const limit = deadline(this.#o.timeoutMs ?? 30_000);
      // Within givingUpAfter a read is given up in flight too (nothing of it can have been applied): a one-shot
      // command's bounded wait does not wait out a Google that does not answer. A write in flight is finished.
      const readGiveUp = READS.test(operation) ? readsScope.getStore() : undefined;
      try {
        const signal = readGiveUp ? AbortSignal.any([limit.signal, readGiveUp]) : limit.signal;
        const res = await send({ signal }).finally(() => {
          limit.end();
          permit?.done({ latencyMs: performance.now() - sentAt });
        });
        if (res.status !== 204 && (res.data === null || typeof res.data !== "object" || Array.isArray(res.data))) {
          // A 2xx whose body is no JSON object (a proxy's HTML page, a cut-off answer) is not an answer to act on: an
          // empty listing read from it would look like a calendar without events. A write may have happened.
          throw new CalendarError(
            `${operation} ${this.#o.calendarId}: Google answered ${res.status} with a body that is not a JSON object`,
            { kind: "transient", status: res.status, reason: "invalidResponse", ambiguous: true },
          );
        }
        metrics.requests.inc({ method: operation, status: String(res.status) });
        health.succeeded(admission);
        return res.data;
      } catch (thrown) {
        if (readGiveUp?.aborted) throw readGiveUp.reason;
        const err = classifyError(
          attemptFailure(limit, thrown),
          scope,
          `${operation} ${options.on ?? this.#o.calendarId}`,
        );
        const status = err.tokenEndpoint ? "token_error" : err.status ? String(err.status) : "network";
        metrics.requests.inc({ method: operation, status });
        if (maybeApplied(err)) {
          if (options.state) options.state.ambiguous = true;
          giveUp = undefined;
        }
        if (err.kind === "quota") {
          health.pause(err);
          throw err;
        }
        if (err.kind === "auth") {
          // A 401 from the API may be a token revoked early: fetch a new one once before declaring them broken. A 403
          // refusal (scope, API switch, sharing) would come back the same with any token.
          if (!reauthorized && !err.tokenEndpoint && err.status === 401) {
            reauthorized = true;
            dropAccessToken(auth);
            continue;
          }
          if (!options.detached && options.on === undefined) health.markBroken(err);
          else this.#elsewhere(operation, options.on, err);
          throw err;
        }
        if (options.on !== undefined) {
          // Another calendar's answer says nothing about this one.
          if (!ANSWERS.has(err.kind) && (!err.retryable || attempt >= this.#o.maxAttempts)) {
            this.#elsewhere(operation, options.on, err);
          }
        } else if (err.kind === "calendar_not_found") health.calendarMissing(err);
        else if (ANSWERS.has(err.kind) && !err.tokenEndpoint) {
          // A 404 for an event is also what every event of a deleted calendar gets: the credentials and the quota
          // work, but the calendar is not shown to exist (`get` with confirmMissing asks the calendar itself).
          if (!options.detached) health.succeeded(admission, err.kind !== "not_found");
        } else health.recordError(err);
        // A usageLimits answer pauses its scope at the quota gate, where the retry waits: the gate owns that backoff.
        const paced = this.#usageLimited(err);
        if (!err.retryable || attempt >= this.#o.maxAttempts) throw err;
        const reason = err.reason ?? (err.status ? String(err.status) : "network");
        metrics.retries.inc({ reason });
        if (paced) continue;
        const delay = backoffDelay(attempt, this.#o.backoff, err.retryAfterMs);
        this.#o.logger.debug({ operation, attempt, delay_ms: delay, reason }, "Google call failed, retrying");
        await this.#o.clock.sleep(delay, giveUp);
      }
    }
  }

  /** A call on another calendar of the account (or a detached one) failed: logged, this calendar's health untouched. */
  #elsewhere(operation: string, calendarId: string | undefined, err: CalendarError): void {
    if (calendarId === undefined) return;
    this.#o.logger.warn(
      { operation, calendar_id: calendarId, status: err.status, reason: err.reason, err: err.message },
      "Google call on another calendar of the account failed; the mapped calendar's health is not affected",
    );
  }

  /** Tells the quota gate about a usageLimits answer; true when the gate now holds the retry back. */
  #usageLimited(err: CalendarError): boolean {
    const quota = this.#o.quota;
    if (!quota || err.kind !== "rate_limited" || err.tokenEndpoint) return false;
    const scope = err.limitScope ?? "project";
    quota.limited(scope, this.#o.quotaUser, err.retryAfterMs);
    return true;
  }
}
