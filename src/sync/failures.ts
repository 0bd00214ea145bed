// Owns what a failed sync run becomes: retried under the one retry policy (a calendar that cannot be used waits
// without spending tries), or given up on as exactly one dead letter; logged once, counted, shown in /status.
import { BookingApiError } from "../booking/errors.ts";
import { bookingInstant } from "../booking/instant.ts";
import { CalendarError } from "../calendar/errors.ts";
import type { Clock } from "../clock.ts";
import type { Logger } from "../log.ts";
import type { DeadLetters } from "./dead-letters.ts";
import type { Effects } from "./effects.ts";
import { describeError, errorWithoutApiText, isPermanent, isUnavailable } from "./errors.ts";
import type { HistoryRecorder } from "./history.ts";
import { type RetryPolicy, retryDelay } from "./retry.ts";
import type { BookingState } from "./snapshot.ts";
import { type Pending, retryRequest, therapistOf } from "./work.ts";
import type { RunVerdict } from "./work-queue.ts";

export class Failures {
  readonly #dead: DeadLetters;
  readonly #fx: Effects;
  readonly #retry: RetryPolicy;
  readonly #clock: Clock;
  readonly #history: HistoryRecorder;

  constructor(o: { dead: DeadLetters; fx: Effects; retry: RetryPolicy; clock: Clock; history: HistoryRecorder }) {
    this.#dead = o.dead;
    this.#fx = o.fx;
    this.#retry = o.retry;
    this.#clock = o.clock;
    this.#history = o.history;
  }

  /** One failed run: retried under the policy, or given up on as exactly one dead letter. */
  async handle(
    key: string,
    p: Pending,
    err: unknown,
    log: Logger,
    read: BookingState | undefined,
  ): Promise<RunVerdict> {
    const error = describeError(err);
    const now = this.#clock.now();
    const unavailable = isUnavailable(err);
    const permanent = !unavailable && isPermanent(err);
    // A calendar that cannot be used now is not the appointment's failure: it does not spend the attempt budget,
    // and only a calendar gone for longer than the grace period ends in the dead letters.
    if (!unavailable) p.counted += 1;
    p.runs += 1;
    p.failingSince ??= now;
    const final =
      permanent ||
      (unavailable ? now - p.failingSince >= this.#retry.unavailableGraceMs : p.counted >= this.#retry.maxAttempts);
    this.#fx.metrics.operations.inc({
      kind: "error",
      result: permanent ? "permanent" : unavailable ? "unavailable" : "transient",
    });
    const therapistId = therapistOf(p.request, read);
    // /status shows it to whoever may read the page: the APIs' codes, never their free text (which may name the customer).
    if (therapistId) this.#fx.activity.failed(therapistId, errorWithoutApiText(err));
    this.#history.failed(key, p.request, err, { final, runs: p.runs });
    if (final) {
      log.error({ err: error, attempts: p.runs, reason: p.request.reason }, "sync failed for good: dead letter");
      const endsAt = bookingInstant(read?.appt.end_time ?? read?.appt.start_time);
      await this.#dead
        .record({
          key,
          error,
          attempts: p.runs,
          firstAt: p.failingSince,
          reason: p.request.reason,
          ...(Number.isFinite(endsAt) ? { endsAt } : {}),
        })
        .catch((e) => log.error({ err: describeError(e) }, "could not record the dead letter"));
      p.resolveAll({ ok: false, error, final: true });
      return { done: true };
    }
    const retryInMs = retryDelay(this.#retry, unavailable ? p.runs : p.counted);
    if (unavailable) {
      // Logged when it starts waiting; the retries are quiet until it works or is given up on.
      if (p.runs === 1) log.warn({ err: error, reason: p.request.reason }, "calendar not available; the sync waits");
    } else {
      log.error({ err: error, attempt: p.counted, reason: p.request.reason, retry_in_ms: retryInMs }, "sync failed");
    }
    p.resolveAttempts({ ok: false, error, final: false });
    p.request = retryRequest(p.request, unavailable, read);
    return unavailable || sentNothing(err) ? { done: false, retryInMs, parked: true } : { done: false, retryInMs };
  }
}

/**
 * Whether the failed run's error says that its call changed nothing: a booking read, or an answer refusing the call
 * before it was applied (429; from Google, a definite answer below 500). A stop gives its retry up at once (its webhook
 * event stays in the inbox), as one waiting for an unavailable calendar: it waited out the stop's whole grace.
 */
function sentNothing(err: unknown): boolean {
  if (err instanceof BookingApiError) return err.method === "GET" || err.status === 429;
  if (err instanceof CalendarError) return !err.ambiguous && err.status !== undefined && err.status < 500;
  return false;
}
