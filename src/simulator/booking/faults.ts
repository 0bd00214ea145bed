// Owns fault injection for the simulated API: random 5xx, latency, the next N requests failed, answered with a
// malformed body, or processed and then left without an answer (socket destroyed: the lost-response case).
import type { Rng } from "./random.ts";

export interface FaultMatch {
  method?: string;
  /** Exact pathname (e.g. "/v1/appointments/apt_1/cancel") or a pattern. */
  path?: string | RegExp;
  /** Only while this holds (e.g. once an appointment is cancelled): a fault that follows another. */
  when?: () => boolean;
}

interface Planned {
  remaining: number;
  match: FaultMatch | undefined;
  status: number;
  body: string | undefined;
  /** The error envelope's code (a refusal such as past_booking); internal_error / simulated_error otherwise. */
  code?: string;
  /** The envelope's message (the spec: "human-readable text"); "refused: <code>" by default. */
  message?: string;
  /** Seconds for a Retry-After header (the spec shows none; a proxy in front of a service may send one). */
  retryAfter?: number;
}

export type Outcome =
  | { kind: "fail"; status: number; code?: string; message?: string; retryAfter?: number }
  | { kind: "ignore"; status: number }
  | { kind: "drop" }
  | { kind: "malformed"; status: number; body: string }
  | undefined;

const DEFAULT_MALFORMED = "<html><body><h1>502 Bad Gateway</h1></body></html>";

export class Faults {
  /** Share (0..1) of API requests answered 503 before being processed. */
  errorRate = 0;
  /** Real milliseconds added before every answer (network latency; not the simulator's clock). */
  latencyMs = 0;
  readonly #fail: Planned[] = [];
  readonly #ignore: Planned[] = [];
  readonly #drop: Planned[] = [];
  readonly #malformed: Planned[] = [];
  readonly #races: { match: FaultMatch; change: () => void }[] = [];
  readonly #rng: Rng;

  constructor(rng: Rng) {
    this.#rng = rng;
  }

  /** The next `n` matching requests are answered `status` (error envelope code "internal_error" for 5xx) unprocessed. */
  failNext(n: number, status = 500, match?: FaultMatch): void {
    this.#fail.push({ remaining: n, match, status, body: undefined });
  }

  /**
   * The next `n` matching requests are refused with the error `code` (e.g. past_booking: the spec names the code, not
   * the status, nor which operations may answer it), unprocessed.
   */
  refuseNext(
    n: number,
    code: string,
    options: { status?: number; match?: FaultMatch; retryAfter?: number; message?: string } = {},
  ): void {
    this.#fail.push({
      remaining: n,
      match: options.match,
      status: options.status ?? 422,
      body: undefined,
      code,
      ...(options.message !== undefined ? { message: options.message } : {}),
      ...(options.retryAfter !== undefined ? { retryAfter: options.retryAfter } : {}),
    });
  }

  /**
   * The next `n` matching requests are answered `status` (default 200) with the appointment as it stands, unprocessed:
   * a success that did not happen. The spec shows neither the success statuses nor whether a 2xx means "done" (a
   * service may queue a change, or lose it); a client must not take a yes for the change.
   */
  ignoreNext(n: number, options: { status?: number; match?: FaultMatch } = {}): void {
    this.#ignore.push({ remaining: n, match: options.match, status: options.status ?? 200, body: undefined });
  }

  /** The next `n` matching requests are processed, then the connection is destroyed without an answer. */
  dropResponseNext(n: number, match?: FaultMatch): void {
    this.#drop.push({ remaining: n, match, status: 0, body: undefined });
  }

  /** The next `n` matching requests are processed, then answered with `body` (default: an HTML page), status 200. */
  malformedNext(n: number, options: { status?: number; body?: string; match?: FaultMatch } = {}): void {
    this.#malformed.push({ remaining: n, match: options.match, status: options.status ?? 200, body: options.body });
  }

  /**
   * Another client's change lands just before the next matching request is processed: the customer cancels while
   * calbridge's cancel or PATCH is on its way, after calbridge read the appointment. The request then meets the changed
   * appointment (a 409 invalid_state, say), as it would at a real service.
   */
  raceNext(match: FaultMatch, change: () => void): void {
    this.#races.push({ match, change });
  }

  /** Planned failures, drops and garbled answers not yet used up. */
  get planned(): number {
    return [...this.#fail, ...this.#ignore, ...this.#drop, ...this.#malformed].reduce((n, p) => n + p.remaining, 0);
  }

  reset(): void {
    this.errorRate = 0;
    this.latencyMs = 0;
    this.#fail.length = 0;
    this.#ignore.length = 0;
    this.#drop.length = 0;
    this.#malformed.length = 0;
    this.#races.length = 0;
  }

  /** Before processing: answer with an error instead? */
  before(method: string, path: string): Outcome {
    const race = this.#races.findIndex((r) => matches(r.match, method, path));
    if (race >= 0) this.#races.splice(race, 1)[0]!.change();
    const planned = take(this.#fail, method, path);
    if (planned) {
      return {
        kind: "fail",
        status: planned.status,
        ...(planned.code ? { code: planned.code } : {}),
        ...(planned.message !== undefined ? { message: planned.message } : {}),
        ...(planned.retryAfter !== undefined ? { retryAfter: planned.retryAfter } : {}),
      };
    }
    const ignored = take(this.#ignore, method, path);
    if (ignored) return { kind: "ignore", status: ignored.status };
    if (this.errorRate > 0 && this.#rng.next() < this.errorRate) return { kind: "fail", status: 503 };
    return undefined;
  }

  /** After processing: lose or garble the answer? */
  after(method: string, path: string): Outcome {
    if (take(this.#drop, method, path)) return { kind: "drop" };
    const m = take(this.#malformed, method, path);
    if (m) return { kind: "malformed", status: m.status, body: m.body ?? DEFAULT_MALFORMED };
    return undefined;
  }
}

function matches(match: FaultMatch | undefined, method: string, path: string): boolean {
  if (!match) return true;
  if (match.method && match.method.toUpperCase() !== method) return false;
  if (match.when && !match.when()) return false;
  if (match.path instanceof RegExp) return match.path.test(path);
  if (match.path !== undefined) return match.path === path;
  return true;
}

function take(list: Planned[], method: string, path: string): Planned | undefined {
  const i = list.findIndex((p) => p.remaining > 0 && matches(p.match, method, path));
  if (i < 0) return undefined;
  const p = list[i]!;
  p.remaining--;
  if (p.remaining === 0) list.splice(i, 1);
  return p;
}
