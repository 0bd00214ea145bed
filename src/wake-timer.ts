// Owns one pending wake-up on the project's clock: a gate waiting for budget sets it to the next moment something
// may go; a different moment replaces it, the same one keeps it.
import type { Clock } from "./clock.ts";

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
    this.#timer?.ac.abort();
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
