// Owns the emulator's fault injection: error bursts, random errors, lost responses, empty pages, answer delay.

export interface FaultSpec {
  status: number;
  /** Google's errors[].reason, e.g. backendError, rateLimitExceeded, quotaExceeded; for the token endpoint the OAuth error. */
  reason: string;
  message?: string;
  /** Calendar API (default) or the token endpoint. */
  target?: "api" | "token";
  /** Only requests whose "METHOD /path" matches. */
  match?: RegExp;
  /** Seconds for a Retry-After header. */
  retryAfter?: number;
  /**
   * Asked when a request matches: the fault is taken only if it answers true. It may change the emulator first (a
   * person acting just before the request arrives) and answer false, so the request meets the changed state. The
   * request counts against `n` either way.
   */
  when?: () => boolean;
}

export class Faults {
  /** Share of API requests (0..1) answered with `errorRateFault`. */
  errorRate = 0;
  errorRateFault: FaultSpec = { status: 503, reason: "backendError" };
  /**
   * Answer 403 forbidden when any update would restore a deleted event, also one deleted through the API (restoring
   * what a person deleted in the UI is refused anyway, see the store).
   */
  refuseRestore = false;
  /** Delay before each API answer, plus up to `latencyJitterMs` more (uniformly), on the wall clock. */
  latencyMs: number;
  latencyJitterMs: number;
  random: () => number = Math.random;
  readonly #defaultLatency: { ms: number; jitterMs: number };
  #queue: { remaining: number; spec: FaultSpec }[] = [];
  #drops = 0;
  #emptyPages = 0;
  #holds: { match: RegExp; until: () => Promise<unknown> }[] = [];

  constructor(latency: { ms?: number; jitterMs?: number } = {}) {
    this.#defaultLatency = { ms: latency.ms ?? 0, jitterMs: latency.jitterMs ?? 0 };
    this.latencyMs = this.#defaultLatency.ms;
    this.latencyJitterMs = this.#defaultLatency.jitterMs;
  }

  /** @internal This answer's delay in milliseconds. */
  delay(): number {
    const jitter = this.latencyJitterMs > 0 ? this.random() * this.latencyJitterMs : 0;
    return Math.max(0, this.latencyMs + jitter);
  }

  /** The next `n` matching requests fail with `spec` (queued after earlier bursts). */
  next(n: number, spec: FaultSpec): this {
    if (n > 0) this.#queue.push({ remaining: n, spec });
    return this;
  }

  /** The next `n` API requests are carried out, then their connection is destroyed before any answer: a lost response. */
  dropResponseNext(n: number): this {
    this.#drops += n;
    return this;
  }

  /**
   * The next API request whose "METHOD /path" matches, on arrival, calls `until` and waits until its promise settles,
   * then is carried out as usual: what the test does meanwhile (another client's writes) happens while it is out.
   */
  holdNext(match: RegExp, until: () => Promise<unknown>): this {
    this.#holds.push({ match, until });
    return this;
  }

  /** @internal What this request waits for first, if anything. */
  takeHold(request: string): Promise<unknown> | undefined {
    const index = this.#holds.findIndex((h) => h.match.test(request));
    if (index < 0) return undefined;
    const [hold] = this.#holds.splice(index, 1);
    return hold!.until().catch(() => undefined);
  }

  /** The next `n` list pages come back empty with a nextPageToken although items remain. */
  emptyPagesNext(n: number): this {
    this.#emptyPages += n;
    return this;
  }

  get pending(): number {
    return this.#queue.reduce((sum, q) => sum + q.remaining, 0);
  }

  reset(): void {
    this.#queue = [];
    this.#holds = [];
    this.#drops = 0;
    this.#emptyPages = 0;
    this.errorRate = 0;
    this.refuseRestore = false;
    this.latencyMs = this.#defaultLatency.ms;
    this.latencyJitterMs = this.#defaultLatency.jitterMs;
  }

  /** @internal The fault for this request, if any. */
  take(target: "api" | "token", request: string): FaultSpec | undefined {
    const index = this.#queue.findIndex(
      (q) => (q.spec.target ?? "api") === target && (!q.spec.match || q.spec.match.test(request)),
    );
    const entry = this.#queue[index];
    if (entry?.spec.when && !entry.spec.when()) {
      entry.remaining -= 1;
      if (entry.remaining <= 0) this.#queue.splice(index, 1);
      return undefined;
    }
    if (entry) {
      entry.remaining -= 1;
      if (entry.remaining <= 0) this.#queue.splice(index, 1);
      return entry.spec;
    }
    if (target === "api" && this.errorRate > 0 && this.random() < this.errorRate) return this.errorRateFault;
    return undefined;
  }

  /** @internal */
  takeDrop(): boolean {
    if (this.#drops <= 0) return false;
    this.#drops -= 1;
    return true;
  }

  /** @internal */
  takeEmptyPage(): boolean {
    if (this.#emptyPages <= 0) return false;
    this.#emptyPages -= 1;
    return true;
  }
}
