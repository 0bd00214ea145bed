// Owns the time limit of one outgoing request, ended as soon as the request is over. AbortSignal.timeout() cannot be
// cancelled: each request left a timer that fired its full limit later, long after the answer, and as long as the
// signal was still reachable (until the next full collection: a busy start promotes them all) aborted it with a
// DOMException and its stack trace. A 1,000-therapist daemon's start made ~6,000 Google requests with a 30 s limit;
// their timers all fired in the 30 s after it settled, a third of a second of CPU on an otherwise idle process.

import { longTimeout } from "./clock.ts";

/** The abort reason of a request that ran out of time; `name` as AbortSignal.timeout's, so libraries recognise it. */
export class RequestTimeoutError extends Error {
  readonly timeoutMs: number;
  constructor(timeoutMs: number) {
    super(`request timed out: no complete answer within ${timeoutMs} ms`);
    this.name = "TimeoutError";
    this.timeoutMs = timeoutMs;
  }
}

export interface Deadline {
  /** Aborted with a RequestTimeoutError once the limit passes, or with the parent's reason when the parent aborts. */
  readonly signal: AbortSignal;
  /** Whether the limit passed (not: the parent aborted). */
  readonly expired: boolean;
  /** The request is over: clears the timer and lets go of the parent. Idempotent. */
  end(): void;
}

/**
 * A signal that aborts `ms` milliseconds of wall time from now (network time, not the project's clock, which tests
 * drive by hand) or when `parent` does; `end()` it in a `finally` once the answer, body included, is read.
 */
export function deadline(ms: number, parent?: AbortSignal): Deadline {
  const controller = new AbortController();
  let expired = false;
  const onParentAbort = () => controller.abort(parent?.reason);
  // Like AbortSignal.timeout: the request's own socket keeps the process alive, its limit need not (unref). A limit
  // over 2^31-1 ms waits in steps: one timer that long would fire after 1 ms.
  const cancel = longTimeout(
    () => {
      expired = true;
      controller.abort(new RequestTimeoutError(ms));
    },
    ms,
    true,
  );
  if (parent?.aborted) onParentAbort();
  else parent?.addEventListener("abort", onParentAbort, { once: true });
  return {
    signal: controller.signal,
    get expired() {
      return expired;
    },
    end() {
      cancel();
      parent?.removeEventListener("abort", onParentAbort);
    },
  };
}
