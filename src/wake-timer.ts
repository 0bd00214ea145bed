// Owns one pending wake-up on the project's clock: a gate waiting for budget sets it to the next moment something
// may go; a different moment replaces it, the same one keeps it.
import type { Clock } from "./clock.ts";

/** Why a pending wake-up was cancelled: it was set to another moment, or unset. */
const RESCHEDULED = Symbol("rescheduled");

export class WakeTimer {
  readonly #clock: Clock;
  readonly #wake: () => void;
  #timer: { until: number; ac: AbortController } | undefined;

  constructor(clock: Clock, wake: () => void) {
    this.#clock = clock;
    this.#wake = wake;
  }

  /** Calls the wake-up at `until` (epoch ms) instead of any earlier setting; undefined cancels it. */
  set(until: number | undefined): void {
    if (this.#timer && this.#timer.until === until) return;
    // With a reason of our own: abort() without one builds a DOMException (a stack trace) at every reschedule, and a
    // busy gate reschedules thousands of times in a cold reconciliation. The sleep's rejection is ignored anyway.
    this.#timer?.ac.abort(RESCHEDULED);
    this.#timer = undefined;
    if (until === undefined) return;
    const ac = new AbortController();
    this.#timer = { until, ac };
    this.#clock.sleep(Math.max(1, until - this.#clock.now()), ac.signal).then(
      () => {
        if (this.#timer?.ac !== ac) return;
        this.#timer = undefined;
        this.#wake();
      },
      () => {},
    );
  }
}
