// Owns the simulated rate limit: a fixed window of `limit` requests per `windowMs`, windows aligned to multiples of
// windowMs since the epoch (so a 1 s or 60 s window resets on a whole second, as X-RateLimit-Reset can say).
import type { Clock } from "../../clock.ts";

export interface RateLimitOptions {
  /** Requests allowed per window (default 60: the Standard plan). */
  limit?: number;
  /** Window length (default 60 000: a minute; tests and benches scale it down). */
  windowMs?: number;
  /** Send X-RateLimit-Limit/Remaining/Reset on every response (default true). */
  headers?: boolean;
  /**
   * Unit of X-RateLimit-Reset: Unix seconds as the spec says (default), or epoch milliseconds, as some gateways send
   * it.
   */
  resetUnit?: "seconds" | "milliseconds";
}

export interface Admission {
  allowed: boolean;
  headers: Record<string, string>;
}

export class FixedWindowLimiter {
  limit: number;
  windowMs: number;
  headers: boolean;
  resetUnit: "seconds" | "milliseconds";
  /** Accepted requests per window start (epoch ms); requests refused with 429 are not counted. */
  readonly accepted = new Map<number, number>();
  readonly #clock: Clock;

  constructor(options: RateLimitOptions | false, clock: Clock) {
    this.#clock = clock;
    this.limit = options === false ? Number.POSITIVE_INFINITY : (options.limit ?? 60);
    this.windowMs = options === false ? 60_000 : (options.windowMs ?? 60_000);
    this.headers = options === false ? false : (options.headers ?? true);
    this.resetUnit = options === false ? "seconds" : (options.resetUnit ?? "seconds");
  }

  #window(now: number): number {
    return Math.floor(now / this.windowMs) * this.windowMs;
  }

  /** Counts one request against the current window, unless the window is full. */
  admit(): Admission {
    const window = this.#window(this.#clock.now());
    const used = this.accepted.get(window) ?? 0;
    const allowed = used < this.limit;
    if (allowed) this.accepted.set(window, used + 1);
    return { allowed, headers: this.#headers(window, allowed ? used + 1 : used) };
  }

  /** The headers for a response that did not count (e.g. 401), as of now. */
  peek(): Record<string, string> {
    const window = this.#window(this.#clock.now());
    return this.#headers(window, this.accepted.get(window) ?? 0);
  }

  #headers(window: number, used: number): Record<string, string> {
    if (!this.headers || !Number.isFinite(this.limit)) return {};
    return {
      "X-RateLimit-Limit": String(this.limit),
      "X-RateLimit-Remaining": String(Math.max(0, this.limit - used)),
      "X-RateLimit-Reset":
        this.resetUnit === "milliseconds"
          ? String(window + this.windowMs)
          : String(Math.ceil((window + this.windowMs) / 1000)),
    };
  }

  /** The most requests accepted in any one window. */
  maxPerWindow(): number {
    let max = 0;
    for (const n of this.accepted.values()) max = Math.max(max, n);
    return max;
  }
}
