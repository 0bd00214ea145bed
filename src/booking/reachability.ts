// Owns whether the booking API is usable, as this client's own requests found it: what /readyz's `booking` check
// reports. Every exchange counts (webhook reads, write-backs, reconciliation pages), so the answer follows the service
// as soon as the daemon uses it, not only at the next reconciliation.
//
// What an exchange says:
// - answered: any HTTP answer of the service's own, also a refusal (4xx: it understood the request) and a 429 (it is
//   serving, only asking to slow down; the rate-limit gate handles that);
// - failed: no answer (network error, timeout), a 5xx (the service, or a proxy in front of it, is not serving), a
//   404 without the service's error envelope (something else answered: a proxy between deploys, a wrong base_url),
//   and 401/403 (the API key is refused: nothing will work until it is fixed);
// - nothing: a request the caller aborted, or one refused before it was sent.
// One failed request among answered ones is a blip (a retry usually succeeds): only FAILURES_IN_A_ROW failures with no
// answer in between make it unusable. One answer makes it usable again.
import type { Clock } from "../clock.ts";
import type { BookingApiError } from "./errors.ts";

/** Failed exchanges in a row, with no answer in between, that make the booking API count as unusable. */
export const FAILURES_IN_A_ROW = 3;
/** While unusable, a connection test is sent at most this often when readiness is asked for (see state()). */
export const RECHECK_MS = 30_000;

export interface ReachabilityState {
  ok: boolean;
  detail: string;
}

export interface ReachabilityOptions {
  clock: Clock;
  /** The connection test (GET /v1/services) sent by state({ recheck: true }) while unusable; its outcome counts. */
  probe?: () => Promise<unknown>;
}

const seconds = (ms: number) => `${Math.max(0, Math.round(ms / 1000))}s`;

/** Whether an exchange that came back with `error` (a BookingApiError) shows the booking API not usable. */
export function failedExchange(error: BookingApiError): boolean {
  return error.kind === "transient" || error.kind === "auth";
}

function describe(error: BookingApiError): string {
  return error.kind === "auth" ? `credentials refused (check booking.api_key): ${error.message}` : error.message;
}

export class BookingReachability {
  readonly #clock: Clock;
  readonly #probe: (() => Promise<unknown>) | undefined;
  #answeredAt: number | undefined;
  #failures = 0;
  #lastFailure: string | undefined;
  /** Set by a whole operation's failure (a reconciliation): unusable until the next answer. */
  #failedOutright = false;
  #probing = false;
  #probedAt = Number.NEGATIVE_INFINITY;

  constructor(options: ReachabilityOptions) {
    this.#clock = options.clock;
    this.#probe = options.probe;
  }

  /** The service answered a request (see the file comment for what counts). */
  answered(): void {
    this.#answeredAt = this.#clock.now();
    this.#failures = 0;
    this.#lastFailure = undefined;
    this.#failedOutright = false;
  }

  /** A request got no usable answer. */
  failed(error: BookingApiError): void {
    this.#failures++;
    this.#lastFailure = describe(error);
  }

  /** One exchange's outcome: the error it ended with, or undefined when it succeeded. */
  record(error: BookingApiError | undefined): void {
    if (error === undefined || !failedExchange(error)) this.answered();
    else this.failed(error);
  }

  /**
   * A whole operation (a reconciliation) failed on the booking API after its retries: unusable at once, whatever the
   * count, until the next answer.
   */
  failedOutright(error: BookingApiError): void {
    // Its failed requests are counted already (by the exchanges); the operation's error says what it ran into.
    this.#failures = Math.max(1, this.#failures);
    this.#lastFailure = describe(error);
    this.#failedOutright = true;
  }

  /**
   * Usable or not, and why. With `recheck`, while unusable, a connection test goes out (at most every RECHECK_MS, one
   * at a time): with no other traffic (no webhooks, the next reconciliation hours away) nothing else would notice the
   * service is back.
   */
  state(options: { recheck?: boolean } = {}): ReachabilityState {
    const now = this.#clock.now();
    const down = this.#failedOutright || this.#failures >= FAILURES_IN_A_ROW;
    if (down) {
      if (options.recheck) this.#recheck(now);
      const count = this.#failures > 1 ? `${this.#failures} requests in a row failed, the last: ` : "";
      return { ok: false, detail: `${count}${this.#lastFailure ?? "last request failed"}` };
    }
    if (this.#answeredAt === undefined && this.#failures === 0) {
      return { ok: true, detail: "no booking API request yet" };
    }
    const answered =
      this.#answeredAt === undefined ? "no answer yet" : `booking API answered ${seconds(now - this.#answeredAt)} ago`;
    if (this.#failures === 0) return { ok: true, detail: answered };
    return {
      ok: true,
      detail: `${answered}; ${this.#failures} request(s) failed since (${FAILURES_IN_A_ROW} in a row count as unreachable), the last: ${this.#lastFailure}`,
    };
  }

  #recheck(now: number): void {
    if (!this.#probe || this.#probing || now - this.#probedAt < RECHECK_MS) return;
    this.#probing = true;
    this.#probedAt = now;
    // Its outcome is recorded by the exchanges themselves.
    void this.#probe()
      .catch(() => {})
      .finally(() => {
        this.#probing = false;
      });
  }
}
