// Owns the booking API rate-limit gate: the server's X-RateLimit budget, a client-side ceiling, 429 pauses, and
// priority order among waiting senders. Every request takes a permit here before it is sent.
import { Registry } from "prom-client";
import { type Clock, systemClock } from "../clock.ts";
import { type Logger, silentLogger } from "../log.ts";
import { WakeTimer } from "../wake-timer.ts";
import { bookingMetrics, collectedGauge } from "./metrics.ts";

export type Priority = "webhook" | "writeback" | "reconcile" | "enrich";
/**
 * Served in this order: webhook follow-ups, then write-backs, then reconciliation pages, then enrichments (full reads
 * for event fields that payloads and list items lack), which also leave a reserve of every window to the others.
 */
export const PRIORITIES: readonly Priority[] = ["webhook", "writeback", "reconcile", "enrich"];

/**
 * Share of the budget enrichments leave untouched in every window (at least one request): a webhook's follow-up that
 * arrives while enrichments use what is left never waits for the next window because of them.
 */
export const ENRICH_RESERVE_SHARE = 0.1;

/** Why a sender waited. */
export type WaitReason = "paused" | "budget_spent" | "client_ceiling" | "concurrency" | "in_flight" | "probe";
const WEIGHT: Record<WaitReason, number> = {
  paused: 6,
  budget_spent: 5,
  client_ceiling: 4,
  concurrency: 3,
  in_flight: 2,
  probe: 1,
};

export interface RateLimitGateOptions {
  /**
   * Client-side ceiling: a sliding window. A request counts from its send until `windowMs` after its answer, so
   * however long it travels, no window of the server (counted at arrival) can see more than this many.
   */
  requestsPerMinute: number;
  /** Length of the ceiling's window; 60 000 in production, scaled down by tests and benchmarks. */
  windowMs?: number;
  /**
   * Added to X-RateLimit-Reset (and a Retry-After) before sending again (default: a sixtieth of `windowMs`, 1 s at the
   * spec's one-minute windows). Reset is whole Unix seconds: a window ending mid-second may be stated as the second
   * before, and a server clock slightly behind ours shows only there when its answers carry no `Date`. A server clock
   * further behind is learned from `Date` and waited for on top of this.
   */
  skewMs?: number;
  /** At most this many requests in flight at once (default 16). */
  maxInFlight?: number;
  /** 429 without usable headers: exponential backoff from this base (default 1 s) ... */
  backoffBaseMs?: number;
  /** ... up to this (default 60 s), with jitter. */
  backoffMaxMs?: number;
  /**
   * A wait derived from X-RateLimit-Reset (after a 429, or with the budget spent) lasts at most this long (default:
   * five windows, at least `backoffMaxMs`; 5 minutes in production, where the spec's windows are a minute). A Reset
   * further ahead is nonsense (a unit the client does not know, a gateway's clock): obeyed, it would stop every
   * booking request until a restart.
   */
  maxResetWaitMs?: number;
  clock?: Clock;
  logger?: Logger;
  registry?: Registry;
  random?: () => number;
}

/** What the gate learns from one finished request. Omit `status` when no response arrived. */
export interface ResponseInfo {
  status?: number;
  headers?: Record<string, string | string[] | undefined>;
  /** The answer said the rate limit is exceeded by its error code, at a status other than 429: paused like a 429. */
  rateLimited?: boolean;
}

export interface GatePermit {
  readonly priority: Priority;
  /** Milliseconds (of the gate's clock) this request waited for its permit. */
  readonly waitedMs: number;
  /**
   * Hands the permit back with what the response said; exactly once, also when no response came. `unsent`: nothing
   * went out (a check right before the send stopped it), so it does not count toward the client's window.
   */
  done(response?: ResponseInfo | { unsent: true }): void;
}

export interface GateSnapshot {
  /** X-RateLimit-Limit last reported, or undefined before any. */
  limit: number | undefined;
  /** Requests the server still allows in its current window, as far as known (in-flight not subtracted). */
  remaining: number | undefined;
  /** X-RateLimit-Reset in epoch milliseconds. */
  resetAt: number | undefined;
  /** Epoch ms until which every sender is held after a 429 (undefined when not paused). */
  pausedUntil: number | undefined;
  waiting: Record<Priority, number>;
  inFlight: number;
  /** Requests counted by the client-side ceiling now (in flight + answered within the window), and that ceiling. */
  sentInWindow: number;
  ceiling: number;
  /** "unknown" before the first response, "headers" once the server sent X-RateLimit-*, else "no_headers". */
  mode: "unknown" | "headers" | "no_headers";
}

interface Waiter {
  priority: Priority;
  enqueuedAt: number;
  reason: WaitReason | undefined;
  resolve: (p: GatePermit) => void;
  reject: (e: unknown) => void;
  signal: AbortSignal | undefined;
  onAbort: (() => void) | undefined;
}

/** How often at most the gate warns about an X-RateLimit-Reset it clamped. */
const RESET_WARN_INTERVAL_MS = 3_600_000;

/**
 * An X-RateLimit-Reset above this is epoch milliseconds, not seconds: as seconds it would be past the year 5138, as
 * milliseconds it is after March 1973. The spec says seconds; gateways vary.
 */
const RESET_MS_THRESHOLD = 1e11;

/** The precision of X-RateLimit-Reset in Unix seconds and of an HTTP date. */
const SECOND_MS = 1_000;

/**
 * How fast what the gate knows of the server's clock fades: either clock may drift or be slewed, so bounds learned a
 * while ago widen by this much per millisecond since (1 ms a second, far beyond a working clock's drift), by a second
 * at most (an estimate no answer has renewed for long holds no request longer than that for it).
 */
const OFFSET_DRIFT = 0.001;

/** How far the bounds on the server's clock widen since they were learned: OFFSET_DRIFT, a second at most. */
function widening(since: number, now: number): number {
  return Math.min(SECOND_MS, Math.max(0, now - since) * OFFSET_DRIFT);
}

function header(headers: ResponseInfo["headers"], name: string): number | undefined {
  const raw = headers?.[name] ?? headers?.[name.toLowerCase()];
  const value = Array.isArray(raw) ? raw[0] : raw;
  if (value === undefined || value.trim() === "") return undefined;
  const n = Number(value);
  return Number.isFinite(n) ? n : undefined;
}

function headerText(headers: ResponseInfo["headers"], name: string): string | undefined {
  const raw = headers?.[name] ?? headers?.[name.toLowerCase()];
  const value = (Array.isArray(raw) ? raw[0] : raw)?.trim();
  return value ? value : undefined;
}

/**
 * Retry-After in milliseconds from now: delta seconds, or an HTTP date. A date is read against the same answer's `Date`
 * (RFC 9110 10.2.3: the two come from one clock, whichever machine wrote them), so a clock off from ours does not
 * move it; without a `Date`, against ours.
 */
function retryAfterMs(headers: ResponseInfo["headers"], now: number): number | undefined {
  const value = headerText(headers, "Retry-After");
  if (value === undefined) return undefined;
  if (/^\d+$/.test(value)) return Number(value) * 1000;
  const at = Date.parse(value);
  if (Number.isNaN(at)) return undefined;
  const dateText = headerText(headers, "Date");
  const date = dateText === undefined ? Number.NaN : Date.parse(dateText);
  return Number.isNaN(date) ? at - now : at - date;
}

/**
 * What the answers' `Date` headers tell of the server's clock: its offset from ours (server minus ours) lies in
 * [low, high], as of `at` (our clock).
 */
interface ClockOffset {
  low: number;
  high: number;
  at: number;
}

export class RateLimitGate {
  readonly #clock: Clock;
  readonly #log: Logger;
  readonly #random: () => number;
  readonly #ceiling: number;
  readonly #windowMs: number;
  readonly #skewMs: number;
  readonly #maxInFlight: number;
  readonly #backoffBaseMs: number;
  readonly #backoffMaxMs: number;
  readonly #maxResetWaitMs: number;
  readonly #metrics;

  #mode: GateSnapshot["mode"] = "unknown";
  #limit: number | undefined;
  #remaining: number | undefined;
  #resetAt: number | undefined;
  /** X-RateLimit-Reset was a time of the server's clock (Unix seconds or ms), not seconds from now. */
  #resetOnServerClock = false;
  /**
   * Set when #resetAt was read from a seconds-from-now Reset: how far another answer's reading of the same window may
   * lie from it (a second for the rounding, plus that answer's time on the way; the new answer's is added to it).
   */
  #resetSlack: number | undefined;
  /** When, by our clock, the window ending at #resetAt has surely ended: Reset, the server's lag, the margin. */
  #resumeAt: number | undefined;
  #offset: ClockOffset | undefined;
  /**
   * Whether the lag of the server's clock that `Date` shows is waited for: only once the server refused a request sent
   * after its window's Reset had passed by our clock (a 429 whose Reset looks past), which shows the clock counting
   * its windows is behind ours. A `Date` alone may be another machine's (a proxy's, a CDN's, a cached answer's): taken
   * on its word, a gateway's clock 4 minutes behind held each spent window 4 minutes longer (review21).
   */
  #lagShown = false;
  /** When each request in flight was sent (our clock): the window-start probe is one sent after the window's end. */
  readonly #outSentAt = new Set<{ at: number }>();
  /** Our wall clock minus the monotonic one at the last look: a change of over a second is a step (NTP). */
  #wallMinusMono: number | undefined;
  #pausedUntil = 0;
  #consecutive429 = 0;
  #resetWarnedAt: number | undefined;
  #inFlight = 0;
  #sent: number[] = [];
  #queues: Record<Priority, Waiter[]> = { webhook: [], writeback: [], reconcile: [], enrich: [] };
  readonly #timer: WakeTimer;

  constructor(options: RateLimitGateOptions) {
    if (!(options.requestsPerMinute > 0)) throw new RangeError("requestsPerMinute must be > 0");
    this.#clock = options.clock ?? systemClock;
    this.#timer = new WakeTimer(this.#clock, () => this.#pump());
    this.#log = options.logger ?? silentLogger;
    this.#random = options.random ?? Math.random;
    this.#ceiling = Math.floor(options.requestsPerMinute);
    this.#windowMs = options.windowMs ?? 60_000;
    this.#skewMs = options.skewMs ?? this.#windowMs / 60;
    this.#maxInFlight = options.maxInFlight ?? 16;
    this.#backoffBaseMs = options.backoffBaseMs ?? 1_000;
    this.#backoffMaxMs = options.backoffMaxMs ?? 60_000;
    this.#maxResetWaitMs = options.maxResetWaitMs ?? Math.max(5 * this.#windowMs, this.#backoffMaxMs);
    const registry = options.registry ?? new Registry();
    this.#metrics = bookingMetrics(registry);
    collectedGauge(
      registry,
      "calbridge_booking_ratelimit_remaining",
      "Requests the booking API still allows in its current window (-1 when unknown).",
      [],
      (g) => g.set(this.#budget(this.#clock.now()) ?? -1),
    );
    collectedGauge(
      registry,
      "calbridge_booking_ratelimit_waiting",
      "Requests waiting at the rate-limit gate, by priority.",
      ["priority"],
      (g) => {
        for (const p of PRIORITIES) g.set({ priority: p }, this.#queues[p].length);
      },
    );
    collectedGauge(registry, "calbridge_booking_inflight", "Booking API requests in flight.", [], (g) =>
      g.set(this.#inFlight),
    );
  }

  /** Waits for a permit to send one request. Rejects with the signal's reason when aborted while waiting. */
  acquire(priority: Priority, signal?: AbortSignal): Promise<GatePermit> {
    if (signal?.aborted) return Promise.reject(signal.reason);
    return new Promise<GatePermit>((resolve, reject) => {
      const w: Waiter = {
        priority,
        enqueuedAt: this.#clock.now(),
        reason: undefined,
        resolve,
        reject,
        signal,
        onAbort: undefined,
      };
      if (signal) {
        w.onAbort = () => {
          const q = this.#queues[priority];
          const i = q.indexOf(w);
          if (i >= 0) q.splice(i, 1);
          reject(signal.reason);
          this.#pump();
        };
        signal.addEventListener("abort", w.onAbort, { once: true });
      }
      this.#queues[priority].push(w);
      this.#pump();
    });
  }

  snapshot(): GateSnapshot {
    const now = this.#clock.now();
    this.#prune(now);
    return {
      limit: this.#limit,
      remaining: this.#budget(now),
      resetAt: this.#resetAt,
      pausedUntil: this.#pausedUntil > now ? this.#pausedUntil : undefined,
      waiting: {
        webhook: this.#queues.webhook.length,
        writeback: this.#queues.writeback.length,
        reconcile: this.#queues.reconcile.length,
        enrich: this.#queues.enrich.length,
      },
      inFlight: this.#inFlight,
      sentInWindow: this.#sent.length + this.#inFlight,
      ceiling: this.#ceiling,
      mode: this.#mode,
    };
  }

  /**
   * The server's budget for now: after Reset (+ the server's lag + the margin) the window has rolled and the full
   * limit is assumed.
   */
  #budget(now: number): number | undefined {
    if (this.#mode !== "headers") return undefined;
    if (this.#resumeAt !== undefined && now >= this.#resumeAt) {
      return this.#limit !== undefined && this.#limit > 0 ? this.#limit : this.#ceiling;
    }
    return this.#remaining;
  }

  #prune(now: number): void {
    while (this.#sent.length > 0 && this.#sent[0]! <= now - this.#windowMs) this.#sent.shift();
  }

  /**
   * Requests an enrichment leaves to the others in every window: a share of the server's limit (or of the ceiling
   * before the server said one), at least one.
   */
  reserve(): number {
    const limit = Math.min(this.#ceiling, this.#limit !== undefined && this.#limit > 0 ? this.#limit : this.#ceiling);
    return Math.max(1, Math.floor(limit * ENRICH_RESERVE_SHARE));
  }

  /** Requests a minute enrichments may use at most: the plan's limit less the reserve (for estimates). */
  enrichPerMinute(): number {
    const limit = Math.min(this.#ceiling, this.#limit !== undefined && this.#limit > 0 ? this.#limit : this.#ceiling);
    return Math.max(1, limit - this.reserve());
  }

  /**
   * Why `priority` may not send now, and until when (undefined `until`: until a response comes back). Enrichments
   * also stop where only the reserve is left.
   */
  #blocked(now: number, priority: Priority): { reason: WaitReason; until?: number } | undefined {
    if (now < this.#pausedUntil) return { reason: "paused", until: this.#pausedUntil };
    const keep = priority === "enrich" ? this.reserve() : 0;
    const budget = this.#budget(now);
    if (budget !== undefined && budget - this.#inFlight <= keep) {
      // Spent for this window: wait for its end. Only in-flight requests hold it: wait for their answers.
      if (budget <= keep && this.#resumeAt !== undefined) return { reason: "budget_spent", until: this.#resumeAt };
      return { reason: "in_flight" };
    }
    // Before the first answer the budget is unknown: one request at a time, so a burst cannot overspend. So it is once
    // a window is over by our clock and no answer of the next one came yet: the clock counting the server's windows may
    // be behind ours (until a 429 shows by how much), and a burst then met one 429 per request in flight.
    // Only a request sent since the window's end is that first one: one sent before it (a slow answer of the old
    // window) tells nothing of the new one, and waiting on it stalled every priority up to the request timeout.
    if (this.#inFlight > 0 && (this.#mode === "unknown" || this.#probing(now))) return { reason: "probe" };
    this.#prune(now);
    if (this.#sent.length + this.#inFlight >= this.#slidingCeiling() - keep) {
      // Full: wait for the oldest answer to leave the window (or, all in flight, for an answer).
      const oldest = this.#sent[0];
      return oldest === undefined
        ? { reason: "client_ceiling" }
        : { reason: "client_ceiling", until: oldest + this.#windowMs };
    }
    if (this.#inFlight >= this.#maxInFlight) return { reason: "concurrency" };
    return undefined;
  }

  /**
   * What the sliding window of sent requests may hold: the client's ceiling, and the server's stated limit too while
   * it sends no usable X-RateLimit-Remaining (missing, garbled): its Limit is then the only budget it states, and the
   * server's headers win over the configured plan.
   */
  #slidingCeiling(): number {
    const limit = this.#limit;
    return this.#remaining === undefined && limit !== undefined && limit > 0
      ? Math.min(this.#ceiling, limit)
      : this.#ceiling;
  }

  #next(): Waiter | undefined {
    for (const p of PRIORITIES) {
      const w = this.#queues[p][0];
      if (w) return w;
    }
    return undefined;
  }

  #pump(): void {
    this.#noticeStep(this.#clock.now());
    for (;;) {
      const w = this.#next();
      if (!w) {
        this.#timer.set(undefined);
        return;
      }
      const now = this.#clock.now();
      const block = this.#blocked(now, w.priority);
      if (block) {
        for (const p of PRIORITIES) {
          for (const x of this.#queues[p]) {
            if (x.reason === undefined || WEIGHT[block.reason] > WEIGHT[x.reason]) x.reason = block.reason;
          }
        }
        this.#timer.set(block.until);
        return;
      }
      this.#queues[w.priority].shift();
      this.#grant(w, now);
    }
  }

  /** A window is over by our clock, and a request sent since then is still out: the next one waits for its answer. */
  #probing(now: number): boolean {
    const resume = this.#resumeAt;
    if (resume === undefined || now < resume) return false;
    for (const out of this.#outSentAt) if (out.at >= resume) return true;
    return false;
  }

  #grant(w: Waiter, now: number): void {
    if (w.signal && w.onAbort) w.signal.removeEventListener("abort", w.onAbort);
    this.#inFlight++;
    const out = { at: now };
    this.#outSentAt.add(out);
    const waitedMs = now - w.enqueuedAt;
    if (w.reason !== undefined) {
      this.#metrics.waits.inc({ reason: w.reason, priority: w.priority });
      this.#metrics.waitSeconds.observe({ priority: w.priority }, waitedMs / 1000);
      const significant = WEIGHT[w.reason] >= WEIGHT.client_ceiling;
      this.#log[significant ? "info" : "debug"](
        { waitedMs, reason: w.reason, priority: w.priority, remaining: this.#budget(now), resetAt: this.#resetAt },
        "booking API rate-limit gate: waited before sending",
      );
    }
    let returned = false;
    const sentAt = now;
    w.resolve({
      priority: w.priority,
      waitedMs,
      done: (response) => {
        if (returned) return;
        returned = true;
        this.#inFlight--;
        this.#outSentAt.delete(out);
        if (response && "unsent" in response) {
          this.#pump();
          return;
        }
        this.#sent.push(this.#clock.now());
        if (response) this.#learn(response, sentAt);
        this.#pump();
      },
    });
  }

  #learn(response: ResponseInfo, sentAt: number): void {
    const now = this.#clock.now();
    this.#noticeStep(now);
    this.#learnClock(response.headers, sentAt, now);
    const limit = header(response.headers, "X-RateLimit-Limit");
    const remaining = header(response.headers, "X-RateLimit-Remaining");
    const reset = header(response.headers, "X-RateLimit-Reset");
    if (limit !== undefined || remaining !== undefined || reset !== undefined) {
      this.#mode = "headers";
      if (limit !== undefined) this.#limit = limit;
      const resetAt = this.#resetTime(now, reset);
      // Without a Reset the window is the one known, or one from now by our clock.
      const onServerClock = reset === undefined ? resetAt === this.#resetAt && this.#resetOnServerClock : reset >= 1e9;
      const relative = reset !== undefined && reset < 1e9;
      const { newer, same } = this.#whichWindow(resetAt, relative, now - sentAt);
      if (remaining !== undefined) {
        if (newer) {
          // A newer window: take the value as it is.
          this.#remaining = remaining;
          this.#resetAt = resetAt;
        } else if (same) {
          // Same window, answers may arrive out of order: the smallest value is the latest truth.
          this.#remaining = Math.min(this.#remaining ?? remaining, remaining);
        }
      } else if (reset !== undefined && newer) {
        // A newer window without a Remaining: an older window's count says nothing of it.
        this.#resetAt = resetAt;
        this.#remaining = undefined;
      }
      const adopted = newer && (remaining !== undefined || reset !== undefined);
      if (adopted) {
        this.#resetOnServerClock = onServerClock;
        this.#resetSlack = relative ? SECOND_MS + (now - sentAt) : undefined;
      }
      if (adopted || same) {
        // The window's end by our clock, with what is known of the server's now (refreshed on each of its answers).
        this.#resumeAt = this.#resumeTime(now, this.#resetAt!, this.#resetOnServerClock);
        // Refused in this window: nothing is left of it, whatever the answer's count said.
        if (response.status === 429 || response.rateLimited === true) this.#remaining = 0;
      }
    } else if (this.#mode === "unknown" && response.status !== undefined) {
      this.#mode = "no_headers";
    }
    if (response.status === 429 || response.rateLimited === true) {
      this.#on429(now, reset, response.status, retryAfterMs(response.headers, now), sentAt);
    } else if (response.status !== undefined) this.#consecutive429 = 0;
  }

  /**
   * Whether an answer's window (ending at `resetAt` as #resetTime read it) is newer than the one known, or the same.
   * A Reset of the server's clock names its window exactly. Seconds from now do not: each answer's reading is its own
   * now plus whole seconds, so readings of one window differ by up to a second plus the answers' time on the way; only
   * one clearly later than that is a new window, and a lower Remaining within it is the latest truth.
   */
  #whichWindow(resetAt: number, relative: boolean, latencyMs: number): { newer: boolean; same: boolean } {
    const known = this.#resetAt;
    if (known === undefined) return { newer: true, same: false };
    if (relative && this.#resetSlack !== undefined) {
      const slack = this.#resetSlack + latencyMs;
      return { newer: resetAt > known + slack, same: Math.abs(resetAt - known) <= slack };
    }
    return { newer: resetAt > known, same: resetAt === known };
  }

  /**
   * Narrows what is known of the server's clock by the answer's `Date` (HTTP date, whole seconds, written between our
   * send and the answer): the offset (server minus ours) is at least Date - answered and less than Date + 1 s - sent.
   * Each answer's bounds are intersected with the earlier ones (widened by OFFSET_DRIFT since); bounds that do not
   * meet mean a clock was set meanwhile, and the newest answer's alone hold. A Date more than `maxResetWaitMs` off
   * ours, or none at all (the spec shows none), tells nothing: the margin alone then covers a small skew.
   */
  #learnClock(headers: ResponseInfo["headers"], sentAt: number, now: number): void {
    const text = headerText(headers, "Date");
    const date = text === undefined ? Number.NaN : Date.parse(text);
    if (Number.isNaN(date)) return;
    let low = date - now;
    let high = date + SECOND_MS - sentAt;
    if (Math.abs(low) > this.#maxResetWaitMs || Math.abs(high) > this.#maxResetWaitMs) return;
    const o = this.#offset;
    if (o !== undefined) {
      const widen = widening(o.at, now);
      if (low <= o.high + widen && high >= o.low - widen) {
        low = Math.max(low, o.low - widen);
        high = Math.min(high, o.high + widen);
      }
    }
    this.#offset = { low, high, at: now };
  }

  /**
   * How far behind ours the server's clock may be, as far as its `Date` headers bound it (0 when it is not known to be
   * behind). A server clock ahead is not trusted to shorten a wait: Reset and Date may come from different machines.
   */
  #serverLag(now: number): number {
    const o = this.#offset;
    if (o === undefined || !this.#lagShown) return 0;
    return Math.max(0, widening(o.at, now) - o.low);
  }

  /**
   * When, by our clock, the server's window ending at `resetAt` (its clock's time unless a seconds-from-now Reset)
   * has surely ended: plus how far behind the server's clock may be, at most `maxResetWaitMs` from now, plus the margin.
   */
  #resumeTime(now: number, resetAt: number, onServerClock: boolean): number {
    const lag = onServerClock ? this.#serverLag(now) : 0;
    return Math.min(resetAt + lag, Math.max(resetAt, now + this.#maxResetWaitMs)) + this.#skewMs;
  }

  /**
   * X-RateLimit-Reset in epoch ms. The spec says Unix seconds; a small value is read as seconds from now, a huge one
   * as epoch milliseconds (common variants). Without the header the current window is assumed to last until a known
   * reset, or one window from now. Every use of Reset goes through here: a time further ahead than `maxResetWaitMs`
   * is clamped to it (and warned about, at most hourly), so no header can hold the gate for longer.
   */
  #resetTime(now: number, reset: number | undefined): number {
    if (reset === undefined)
      return this.#resetAt !== undefined && this.#resetAt > now ? this.#resetAt : now + this.#windowMs;
    const at = reset < 1e9 ? now + reset * 1000 : reset > RESET_MS_THRESHOLD ? reset : reset * 1000;
    const latest = now + this.#maxResetWaitMs;
    if (at <= latest) return at;
    if (this.#resetWarnedAt === undefined || now - this.#resetWarnedAt >= RESET_WARN_INTERVAL_MS) {
      this.#resetWarnedAt = now;
      this.#log.warn(
        {
          header: "X-RateLimit-Reset",
          value: reset,
          readAs: at < 8.64e15 ? new Date(at).toISOString() : at,
          maxWaitMs: this.#maxResetWaitMs,
        },
        `booking API sent X-RateLimit-Reset ${reset}, more than ${Math.round(this.#maxResetWaitMs / 1000)} s ahead: waiting at most that long (warned at most hourly)`,
      );
    }
    return latest;
  }

  /**
   * A step of our wall clock since the last look (NTP correcting a clock that ran fast or slow; the monotonic clock
   * does not move with it): what `Date` showed of the server's clock was against the old time and goes, and the waits
   * kept as times of our wall clock move with it. Without this, a lag learned while our clock ran 3 minutes fast held
   * every request 3 minutes past the server's window once the clock was put right (review21).
   */
  #noticeStep(now: number): void {
    const mono = this.#clock.elapsed?.();
    if (mono === undefined) return;
    const base = now - mono;
    const was = this.#wallMinusMono;
    this.#wallMinusMono = base;
    if (was === undefined || Math.abs(base - was) <= SECOND_MS) return;
    const step = base - was;
    this.#offset = undefined;
    this.#lagShown = false;
    if (this.#pausedUntil > 0) this.#pausedUntil += step;
    // A window read from seconds-from-now was a time of our old clock; one of the server's clock is what it was.
    if (this.#resetAt !== undefined) {
      if (!this.#resetOnServerClock) this.#resetAt += step;
      this.#resumeAt = this.#resumeTime(now, this.#resetAt, this.#resetOnServerClock);
    }
    this.#log.warn(
      { stepMs: Math.round(step) },
      "the system clock was stepped: the rate-limit waits follow it, and the booking API's clock offset is learned again",
    );
  }

  #on429(
    now: number,
    reset: number | undefined,
    status: number | undefined,
    retryAfter: number | undefined,
    sentAt = now,
  ): void {
    this.#consecutive429++;
    this.#metrics.rateLimited.inc();
    let until: number;
    let basis: string;
    const resetAt = reset === undefined ? undefined : this.#resetTime(now, reset);
    // Refused although it was sent after its window had ended by our clock (and the margin): the clock counting the
    // server's windows is behind ours, and what `Date` shows of that lag is waited for from now on (#lagShown). When it
    // was sent counts, not when the answer came: a slow 429 for a request sent inside its window shows nothing of it.
    if (resetAt !== undefined && reset! >= 1e9 && resetAt + this.#skewMs <= sentAt && !this.#lagShown) {
      this.#lagShown = true;
      if (this.#resetAt === resetAt) this.#resumeAt = this.#resumeTime(now, resetAt, true);
    }
    // The window's end by our clock: a Reset that looks just past (a server clock behind ours, a Reset rounded down)
    // is still waited for, up to the margin and the server's known lag, rather than backed off from briefly.
    const resume = resetAt === undefined ? undefined : this.#resumeTime(now, resetAt, reset! >= 1e9);
    // The spec shows no Retry-After; a service (or a proxy in front of it) that sends one says when to come back.
    const afterRetry =
      retryAfter !== undefined && retryAfter > 0
        ? now + Math.min(retryAfter, this.#backoffMaxMs * 10) + this.#skewMs
        : undefined;
    if (resume !== undefined && resume > now) {
      // Both said: the later wins (a Retry-After beyond the window's reset is the server's, or a proxy's, own word).
      until = Math.max(resume, afterRetry ?? 0);
      basis = until === resume ? "reset" : "retry-after";
    } else if (afterRetry !== undefined) {
      until = afterRetry;
      basis = "retry-after";
    } else {
      const cap = Math.min(this.#backoffMaxMs, this.#backoffBaseMs * 2 ** (this.#consecutive429 - 1));
      until = now + cap / 2 + this.#random() * (cap / 2);
      basis = "backoff";
    }
    if (until > this.#pausedUntil) this.#pausedUntil = until;
    this.#log.warn(
      { pauseMs: this.#pausedUntil - now, basis, consecutive: this.#consecutive429, status },
      status === 429
        ? "booking API answered 429: pausing every request"
        : `booking API answered ${status} with a rate-limit error code: pausing every request`,
    );
  }
}
