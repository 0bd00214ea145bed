// Owns the client side of Google's Calendar API quotas: every Google request takes a permit here before it is sent.
// Two sliding windows (the project's, and one per user, i.e. per therapist's quotaUser) are kept below the configured
// budgets by waiting *before* sending, the way the booking gate does; a usageLimits answer pauses the scope it names
// with exponential backoff and jitter and lowers that scope's ceiling until it has gone a while without one.
//
// Google's "Manage quotas" guide (developers.google.com/calendar/api/guides/quota): 10,000 requests per minute per
// project and 600 per minute per user per project, "calculated per minute using a sliding window"; over either one,
// "403 usageLimits or 429 usageLimits"; asks for exponential backoff and randomised traffic. The events.patch
// reference: "each patch request consumes three quota units".
import { Counter, type Registry } from "prom-client";
import { collectedGauge } from "../booking/metrics.ts";
import { type Clock, systemClock } from "../clock.ts";
import { type Logger, silentLogger } from "../log.ts";
import { WakeTimer } from "../wake-timer.ts";

/** Google's documented per-minute quotas of the Calendar API. */
export const GOOGLE_DEFAULT_QUOTA = { projectPerMinute: 10_000, userPerMinute: 600 } as const;

/** Quota units one request of `operation` costs: events.patch counts three, everything else one. */
export function unitsOf(operation: string): number {
  return operation === "events.patch" ? 3 : 1;
}

export type QuotaScope = "project" | "user";

export interface QuotaGateOptions {
  projectPerMinute: number;
  userPerMinute: number;
  /** Length of the windows; 60 000 in production (tests may scale it). */
  windowMs?: number;
  /** First pause after a usageLimits answer; doubles with each one in a row, up to backoffMaxMs (jittered). */
  backoffBaseMs?: number;
  backoffMaxMs?: number;
  clock?: Clock;
  logger?: Logger;
  registry?: Registry;
  random?: () => number;
}

export interface QuotaPermit {
  /** Milliseconds (of the gate's clock) this request waited for its permit. */
  readonly waitedMs: number;
  /** Hands the permit back once the answer (or the lack of one) is known; exactly once. */
  done(answer?: { latencyMs?: number }): void;
}

export interface QuotaSnapshot {
  project: { used: number; ceiling: number; pausedUntil?: number };
  waiting: number;
  inFlight: number;
  /** Smoothed time from send to answer of Google requests, in ms (undefined before the first answer). */
  latencyMs: number | undefined;
}

/**
 * Units spent within the window. A request counts from its send until `windowMs` after its answer: Google counts it
 * when it arrives, which is somewhere in between, so no window of Google's can see more than this one does.
 */
class Window {
  inFlight = 0;
  #times: number[] = [];
  #units: number[] = [];
  #head = 0;
  #sum = 0;
  /** Multiplier of the configured budget: lowered by usageLimits answers, recovered while none come. */
  factor = 1;
  refusals = 0;
  pausedUntil = 0;
  lastRefusalAt = Number.NEGATIVE_INFINITY;

  used(now: number, windowMs: number): number {
    while (this.#head < this.#times.length && this.#times[this.#head]! <= now - windowMs) {
      this.#sum -= this.#units[this.#head]!;
      this.#head++;
    }
    if (this.#head > 256 && this.#head * 2 > this.#times.length) {
      this.#times = this.#times.slice(this.#head);
      this.#units = this.#units.slice(this.#head);
      this.#head = 0;
    }
    return this.#sum + this.inFlight;
  }

  answered(now: number, units: number): void {
    this.inFlight -= units;
    this.#times.push(now);
    this.#units.push(units);
    this.#sum += units;
  }

  /** When enough answered units leave the window for `need` more to fit under `ceiling`; undefined: only in-flight. */
  freeAt(need: number, ceiling: number, windowMs: number): number | undefined {
    let over = this.#sum + this.inFlight + need - ceiling;
    for (let i = this.#head; i < this.#times.length; i++) {
      over -= this.#units[i]!;
      if (over <= 0) return this.#times[i]! + windowMs;
    }
    return undefined;
  }

  idle(now: number): boolean {
    return this.inFlight === 0 && this.#sum === 0 && this.factor === 1 && this.pausedUntil <= now;
  }
}

interface Waiter {
  user: string;
  units: number;
  enqueuedAt: number;
  waited: boolean;
  /** Given up (its signal aborted) before a permit came: skipped, never granted. */
  gone?: boolean;
  resolve(p: QuotaPermit): void;
}

/** Lowest share of a budget that usageLimits answers can push a ceiling down to. */
const MIN_FACTOR = 0.1;
/** A ceiling recovers this share of its budget per quiet window (no usageLimits answer). */
const RECOVERY_PER_WINDOW = 0.1;

export class GoogleQuotaGate {
  readonly #clock: Clock;
  readonly #log: Logger;
  readonly #random: () => number;
  readonly #windowMs: number;
  readonly #backoffBaseMs: number;
  readonly #backoffMaxMs: number;
  readonly #projectBudget: number;
  readonly #userBudget: number;
  readonly #project = new Window();
  readonly #users = new Map<string, Window>();
  #waiters: Waiter[] = [];
  /** Waiters given up and not yet dropped from #waiters (the next pump drops them). */
  #gone = 0;
  #pumpQueued = false;
  readonly #timer: WakeTimer;
  #latencyMs: number | undefined;
  readonly #waits: Counter<"scope">;
  readonly #limited: Counter<"scope">;

  constructor(options: QuotaGateOptions) {
    if (!(options.projectPerMinute > 0) || !(options.userPerMinute > 0)) {
      throw new RangeError("Google quota budgets must be > 0");
    }
    this.#projectBudget = options.projectPerMinute;
    this.#userBudget = options.userPerMinute;
    this.#windowMs = options.windowMs ?? 60_000;
    this.#backoffBaseMs = options.backoffBaseMs ?? 1_000;
    this.#backoffMaxMs = options.backoffMaxMs ?? 32_000;
    this.#clock = options.clock ?? systemClock;
    this.#timer = new WakeTimer(this.#clock, () => this.#pump());
    this.#log = options.logger ?? silentLogger;
    this.#random = options.random ?? Math.random;
    const registers = options.registry ? [options.registry] : [];
    this.#waits = new Counter({
      name: "calbridge_google_quota_waits_total",
      help: "Google requests that waited before sending because a quota window was full or paused, by the scope that held them (project or user).",
      labelNames: ["scope"] as const,
      registers,
    });
    this.#limited = new Counter({
      name: "calbridge_google_usage_limited_total",
      help: "Google answers 403/429 usageLimits (user: a per-user or per-calendar limit; project: one whose message names the project's quota), each pausing that scope.",
      labelNames: ["scope"] as const,
      registers,
    });
    if (options.registry) {
      // Read at scrape time: no timer of its own.
      collectedGauge(
        options.registry,
        "calbridge_google_quota_used_ratio",
        "Share of the project's per-minute Google budget spent in the last window (requests in flight included).",
        [],
        (g) => g.set(this.#project.used(this.#clock.now(), this.#windowMs) / this.#projectBudget),
      );
    }
  }

  /** Smoothed Google round trip in ms, once any request was answered. */
  get latencyMs(): number | undefined {
    return this.#latencyMs;
  }

  /** Requests per second the project budget allows at its current ceiling. */
  get projectPerSecond(): number {
    return (this.#projectBudget * this.#project.factor * 1000) / this.#windowMs;
  }

  /** Requests per second one user's budget allows (at full ceiling). */
  get userPerSecond(): number {
    return (this.#userBudget * 1000) / this.#windowMs;
  }

  /**
   * Waits until `units` more fit into the project's window and `user`'s, then counts them as in flight. When `signal`
   * aborts first, the wait is given up: rejected with the signal's reason, nothing counted. It gives up waiting only: a
   * permit free at once is taken even with the signal already aborted (a stop lets the calls that can go now finish).
   */
  acquire(user: string, units = 1, signal?: AbortSignal): Promise<QuotaPermit> {
    return new Promise<QuotaPermit>((resolve, reject) => {
      let granted = false;
      const giveUp = () => {
        if (granted || waiter.gone) return;
        waiter.gone = true;
        this.#gone++;
        reject(signal?.reason);
        // The others are looked at again (one given up may have held the project's queue), once for a burst.
        if (!this.#pumpQueued) {
          this.#pumpQueued = true;
          queueMicrotask(() => {
            this.#pumpQueued = false;
            this.#pump();
          });
        }
      };
      const waiter: Waiter = {
        user,
        units,
        enqueuedAt: this.#clock.now(),
        waited: false,
        resolve: (permit) => {
          granted = true;
          signal?.removeEventListener("abort", giveUp);
          resolve(permit);
        },
      };
      this.#waiters.push(waiter);
      this.#pump();
      if (granted || !signal) return;
      if (signal.aborted) giveUp();
      else signal.addEventListener("abort", giveUp, { once: true });
    });
  }

  /**
   * Google answered usageLimits: `user` when it names one user's (or calendar's) limit, `project` otherwise (see
   * rateLimitScope in errors.ts). The scope pauses (exponential backoff with jitter, or Google's Retry-After when longer) and
   * its ceiling is lowered: someone else spends from the same budget, or Google counts differently.
   */
  limited(scope: QuotaScope, user: string, retryAfterMs = 0): void {
    const now = this.#clock.now();
    const w = scope === "project" ? this.#project : this.#window(user);
    this.#limited.inc({ scope });
    w.refusals++;
    const cap = Math.min(this.#backoffMaxMs, this.#backoffBaseMs * 2 ** Math.min(20, w.refusals - 1));
    const pause = Math.max(retryAfterMs, cap / 2 + this.#random() * (cap / 2));
    w.pausedUntil = Math.max(w.pausedUntil, now + pause);
    // One lowering per answer burst: the answers of requests already in flight say the same thing again.
    if (now - w.lastRefusalAt > 1_000) w.factor = Math.max(MIN_FACTOR, w.factor * 0.75);
    w.lastRefusalAt = now;
    this.#log.warn(
      { scope, ...(scope === "user" ? { quota_user: user } : {}), pause_ms: Math.round(pause), ceiling: w.factor },
      "Google answered usageLimits: pausing and lowering this budget's ceiling",
    );
    this.#pump();
  }

  snapshot(): QuotaSnapshot {
    const now = this.#clock.now();
    return {
      project: {
        used: this.#project.used(now, this.#windowMs),
        ceiling: this.#ceiling(this.#project, this.#projectBudget, now),
        ...(this.#project.pausedUntil > now ? { pausedUntil: this.#project.pausedUntil } : {}),
      },
      waiting: this.#waiters.length - this.#gone,
      inFlight: this.#project.inFlight,
      latencyMs: this.#latencyMs,
    };
  }

  #window(user: string): Window {
    let w = this.#users.get(user);
    if (!w) {
      w = new Window();
      this.#users.set(user, w);
    }
    return w;
  }

  /** The ceiling of a window now: recovered for the quiet windows since its last refusal. */
  #ceiling(w: Window, budget: number, now: number): number {
    if (w.factor < 1) {
      const quiet = Math.floor((now - w.lastRefusalAt) / this.#windowMs);
      if (quiet > 0) {
        w.factor = Math.min(1, w.factor + quiet * RECOVERY_PER_WINDOW);
        w.lastRefusalAt += quiet * this.#windowMs;
        if (w.factor === 1) w.refusals = 0;
      }
    }
    return Math.max(1, Math.floor(budget * w.factor));
  }

  /** Until when `w` cannot take `units` more (0: it can now; undefined: until an answer comes back). */
  #blockedUntil(w: Window, budget: number, units: number, now: number): number | undefined {
    if (now < w.pausedUntil) return w.pausedUntil;
    const ceiling = this.#ceiling(w, budget, now);
    // A request bigger than the whole ceiling still goes alone, or it would never go.
    if (w.used(now, this.#windowMs) + units <= ceiling || w.used(now, this.#windowMs) === 0) return 0;
    return w.freeAt(units, ceiling, this.#windowMs);
  }

  #pump(): void {
    const now = this.#clock.now();
    let wake: number | undefined;
    const soonest = (t: number | undefined) => {
      if (t !== undefined && (wake === undefined || t < wake)) wake = t;
    };
    const still: Waiter[] = [];
    let projectBlocked = false;
    for (const w of this.#waiters) {
      if (w.gone) continue;
      if (projectBlocked) {
        still.push(w);
        continue;
      }
      const user = this.#window(w.user);
      const userUntil = this.#blockedUntil(user, this.#userBudget, w.units, now);
      if (userUntil !== 0) {
        // This user's budget is spent: its request waits, the others' go past it.
        this.#held(w, "user");
        soonest(userUntil);
        still.push(w);
        continue;
      }
      const projectUntil = this.#blockedUntil(this.#project, this.#projectBudget, w.units, now);
      if (projectUntil !== 0) {
        // The project's budget is spent: everyone waits, in order, so a bigger request is not overtaken for ever.
        this.#held(w, "project");
        soonest(projectUntil);
        projectBlocked = true;
        still.push(w);
        continue;
      }
      this.#grant(w, user, now);
    }
    this.#waiters = still;
    this.#gone = 0;
    this.#timer.set(still.length > 0 ? wake : undefined);
    if (this.#users.size > 1024) this.#forgetIdleUsers();
  }

  #held(w: Waiter, scope: QuotaScope): void {
    if (w.waited) return;
    w.waited = true;
    this.#waits.inc({ scope });
  }

  #grant(w: Waiter, user: Window, now: number): void {
    user.inFlight += w.units;
    this.#project.inFlight += w.units;
    let returned = false;
    w.resolve({
      waitedMs: now - w.enqueuedAt,
      done: (answer) => {
        if (returned) return;
        returned = true;
        const at = this.#clock.now();
        user.answered(at, w.units);
        this.#project.answered(at, w.units);
        const ms = answer?.latencyMs;
        if (ms !== undefined && Number.isFinite(ms) && ms >= 0) {
          this.#latencyMs = this.#latencyMs === undefined ? ms : this.#latencyMs * 0.9 + ms * 0.1;
        }
        this.#pump();
      },
    });
  }

  /** Users with nothing in their window and no pause are forgotten (a window per therapist, not per request). */
  #forgetIdleUsers(): void {
    const now = this.#clock.now();
    const waiting = new Set(this.#waiters.map((w) => w.user));
    for (const [user, w] of this.#users) {
      if (waiting.has(user)) continue;
      w.used(now, this.#windowMs); // prunes what left the window
      if (w.idle(now)) this.#users.delete(user);
    }
  }
}
