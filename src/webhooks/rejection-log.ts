// Owns the logging of refused unauthenticated requests (forged, stale, oversized, ...): in each period the first of
// every reason is logged at warn with its details, the rest only counted and summed up in one warn line when the
// period ends, so a flood of bad requests cannot flood the log. Metrics still count every request; this is the log.
import { type Clock, systemClock } from "../clock.ts";
import type { Logger } from "../log.ts";

export interface RejectionLogOptions {
  logger: Logger;
  clock?: Clock;
  /** Length of a period; default one minute. */
  periodMs?: number;
  /** Names what was refused in the summary line, e.g. "webhook requests". */
  what: string;
}

export class RejectionLog {
  readonly #logger: Logger;
  readonly #clock: Clock;
  readonly #periodMs: number;
  readonly #what: string;
  /** Reasons logged in full in the current period. */
  readonly #seen = new Set<string>();
  /** Requests of the current period that were counted but not logged, by reason. */
  #suppressed = new Map<string, number>();
  /** A hint that went with a suppressed reason (a secret with stray whitespace), repeated in the summary. */
  #hints = new Map<string, string>();
  #periodStart: number | undefined;
  #timer: NodeJS.Timeout | undefined;

  constructor(options: RejectionLogOptions) {
    this.#logger = options.logger;
    this.#clock = options.clock ?? systemClock;
    this.#periodMs = options.periodMs ?? 60_000;
    this.#what = options.what;
  }

  /** One refused request. `fields.hint`, when present, is repeated in the summary. */
  record(reason: string, fields: Record<string, unknown>, message: string): void {
    const now = this.#clock.now();
    if (this.#periodStart !== undefined && now - this.#periodStart >= this.#periodMs) this.flush();
    this.#periodStart ??= now;
    if (!this.#seen.has(reason)) {
      this.#seen.add(reason);
      this.#logger.warn({ reason, ...fields }, message);
      return;
    }
    this.#suppressed.set(reason, (this.#suppressed.get(reason) ?? 0) + 1);
    if (typeof fields.hint === "string") this.#hints.set(reason, fields.hint);
    // Ends the period in real time too, so the summary comes out when the flood stops. Never keeps the process alive.
    this.#timer ??= setTimeout(() => this.flush(), this.#periodMs).unref();
  }

  /** Ends the period: one summary line when anything went unlogged; the next of each reason is logged in full. */
  flush(): void {
    clearTimeout(this.#timer);
    this.#timer = undefined;
    const counts = Object.fromEntries(this.#suppressed);
    const total = [...this.#suppressed.values()].reduce((a, b) => a + b, 0);
    const hints = [...new Set(this.#hints.values())];
    const seconds = this.#periodStart === undefined ? 0 : Math.round((this.#clock.now() - this.#periodStart) / 1000);
    this.#seen.clear();
    this.#suppressed = new Map();
    this.#hints = new Map();
    this.#periodStart = undefined;
    if (total === 0) return;
    this.#logger.warn(
      { refused: counts, period_seconds: seconds, ...(hints.length > 0 ? { hint: hints.join(" ") } : {}) },
      `${total} more ${this.#what} refused in the last ${seconds}s (only the first of each reason is logged in full; the metrics count every one)`,
    );
  }
}
