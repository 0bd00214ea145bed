// Owns Google's usage quotas in the emulator: the per-minute sliding windows per project and per user, whom a request
// is charged to and what it costs, and the usage counters a benchmark reads.
import type { FaultSpec } from "./faults.ts";

/**
 * Google's "Manage quotas" page (Calendar API usage limits): 10,000 requests per minute per project and 600 per
 * minute per user per project, "calculated per minute using a sliding window"; over either one Google answers
 * "403 usageLimits or 429 usageLimits". The "Handle API errors" page names 403 userRateLimitExceeded for the per-user
 * limit and 403 or 429 rateLimitExceeded for "the maximum request rate per calendar or per authenticated user" or the
 * project's. What clients report from the real service is stricter than that page: the per-user minute quota comes as
 * 403 rateLimitExceeded, told apart from the project's only by its message, "... limit 'Queries per minute per user'
 * of service 'calendar-json.googleapis.com' ..." (Atrejoe/Inky-Calendar-Server#104; "Queries per user per 100 seconds"
 * before the per-minute quotas, alextselegidis/easyappointments#995), and the project's as "... limit 'Queries per
 * minute' ..." (calcom/cal.diy#18079). The emulator answers so: a client must read the message to know whose budget
 * ran out (userRateLimitExceeded stays available as an injected fault).
 */
export const GOOGLE_QUOTAS = { perProjectPerMinute: 10_000, perUserPerMinute: 600 } as const;
/** Google's events.patch reference: "Note that each patch request consumes three quota units". */
export const GOOGLE_PATCH_COST = 3;
const WINDOW_MS = 60_000;

export interface QuotaOptions {
  /** Requests per minute per user (quotaUser, else whom the token stands for); `false` lifts the limit. */
  perUserPerMinute?: number | false;
  /** Requests per minute for the whole project (every client of this emulator); `false` lifts the limit. */
  perProjectPerMinute?: number | false;
  /** Units one PATCH costs in both windows (default Google's 3). */
  patchCost?: number;
  /**
   * Writes per second to one calendar (insert, update, patch, delete, move); above it 403 rateLimitExceeded with
   * Google's plain "Rate Limit Exceeded". Off unless set: Google's "Manage quotas" page warns that a client "might be
   * rate limited at any time ... if you attempt to write to a single calendar in quick succession" and its errors
   * page gives that answer for "the maximum request rate per calendar or per authenticated user", but neither says
   * how many writes are too many.
   */
  perCalendarWritesPerSecond?: number;
}

/** Units spent in the last `spanMs` (a minute): a queue of (time, units) with a running sum; times never go backwards. */
class SlidingWindow {
  readonly #spanMs: number;
  #times: number[] = [];
  #units: number[] = [];
  #head = 0;
  #sum = 0;

  constructor(spanMs = WINDOW_MS) {
    this.#spanMs = spanMs;
  }

  used(now: number): number {
    while (this.#head < this.#times.length && this.#times[this.#head]! <= now - this.#spanMs) {
      this.#sum -= this.#units[this.#head]!;
      this.#head += 1;
    }
    if (this.#head > 1024 && this.#head * 2 > this.#times.length) {
      this.#times = this.#times.slice(this.#head);
      this.#units = this.#units.slice(this.#head);
      this.#head = 0;
    }
    return this.#sum;
  }

  add(now: number, units: number): void {
    this.#times.push(now);
    this.#units.push(units);
    this.#sum += units;
  }
}

/**
 * Google's two per-minute quotas. What counts: every API request that was authenticated, whatever its answer (Google's
 * quotas count "requests", not successful ones). What does not: a request the quota itself refused (otherwise a client
 * that backs off, as Google asks, could never get back under the limit) and one without valid credentials (it is
 * nobody's).
 */
export class UsageLimits {
  perUserPerMinute: number | undefined;
  perProjectPerMinute: number | undefined;
  patchCost: number;
  perCalendarWritesPerSecond: number | undefined;
  #project = new SlidingWindow();
  #users = new Map<string, SlidingWindow>();
  #calendarWrites = new Map<string, SlidingWindow>();

  constructor(options: QuotaOptions = {}) {
    const limit = (v: number | false | undefined, google: number) => (v === false ? undefined : (v ?? google));
    this.perUserPerMinute = limit(options.perUserPerMinute, GOOGLE_QUOTAS.perUserPerMinute);
    this.perProjectPerMinute = limit(options.perProjectPerMinute, GOOGLE_QUOTAS.perProjectPerMinute);
    this.patchCost = options.patchCost ?? GOOGLE_PATCH_COST;
    this.perCalendarWritesPerSecond = options.perCalendarWritesPerSecond;
  }

  /**
   * Charges `units` to `user` and the project (and a write to `writesTo`, a calendar); returns the error to answer
   * instead when a window is full.
   */
  check(user: string, now: number, units = 1, writesTo?: string): FaultSpec | undefined {
    let window = this.#users.get(user);
    if (!window) {
      window = new SlidingWindow();
      this.#users.set(user, window);
    }
    if (this.perProjectPerMinute !== undefined && this.#project.used(now) + units > this.perProjectPerMinute) {
      return { status: 429, reason: "rateLimitExceeded", message: quotaMessage("Queries per minute") };
    }
    if (this.perUserPerMinute !== undefined && window.used(now) + units > this.perUserPerMinute) {
      return { status: 403, reason: "rateLimitExceeded", message: quotaMessage("Queries per minute per user") };
    }
    const limit = this.perCalendarWritesPerSecond;
    if (limit !== undefined && writesTo !== undefined) {
      let writes = this.#calendarWrites.get(writesTo);
      if (!writes) {
        writes = new SlidingWindow(1000);
        this.#calendarWrites.set(writesTo, writes);
      }
      if (writes.used(now) + 1 > limit) return { status: 403, reason: "rateLimitExceeded" };
      writes.add(now, 1);
    }
    this.#project.add(now, units);
    window.add(now, units);
    return undefined;
  }
}

/** Google's text for a spent minute quota, as clients quote it (see GOOGLE_QUOTAS). */
function quotaMessage(limit: string): string {
  return (
    `Quota exceeded for quota metric 'Queries' and limit '${limit}' of service 'calendar-json.googleapis.com' ` +
    "for consumer 'project_number:000000000000'."
  );
}

/** Who a token is charged to, learnt when the token endpoint issued it. */
export interface TokenPrincipal {
  /**
   * The user for the per-user quota when the request names no quotaUser. Under domain-wide delegation Google charges
   * the service account, not the impersonated user (the project's notes, from Google's quota pages).
   */
  quotaUser: string;
  /** A service account acting as itself (no delegation): Google refuses it attendees. */
  serviceAccountItself: boolean;
}

export class TokenPrincipals {
  readonly #byToken = new Map<string, TokenPrincipal>();

  note(accessToken: string, principal: TokenPrincipal): void {
    this.#byToken.set(accessToken, principal);
  }

  of(authorization: string | undefined): TokenPrincipal | undefined {
    const token = authorization?.match(/^Bearer\s+(.+)$/i)?.[1];
    return token ? this.#byToken.get(token) : undefined;
  }
}

export interface UsageSnapshot {
  /** API requests answered (the token endpoint not included). */
  requests: number;
  /** Quota units charged (a PATCH costs more than one). */
  units: number;
  /** Answers 403/429 with domain usageLimits (quota refusals and injected ones). */
  usageLimitAnswers: number;
  byUser: Record<string, number>;
  byCalendar: Record<string, number>;
  /** By Google's method name: events.list, events.insert, events.patch, ... */
  byMethod: Record<string, number>;
}

/** Counts of what clients spent, for benchmarks and tests. */
export class UsageCounters {
  #snapshot: UsageSnapshot = UsageCounters.#empty();

  static #empty(): UsageSnapshot {
    return { requests: 0, units: 0, usageLimitAnswers: 0, byUser: {}, byCalendar: {}, byMethod: {} };
  }

  record(entry: { user?: string; calendarId?: string; method: string; units: number; usageLimit: boolean }): void {
    const s = this.#snapshot;
    s.requests += 1;
    s.units += entry.units;
    if (entry.usageLimit) s.usageLimitAnswers += 1;
    if (entry.user !== undefined) s.byUser[entry.user] = (s.byUser[entry.user] ?? 0) + 1;
    if (entry.calendarId !== undefined) s.byCalendar[entry.calendarId] = (s.byCalendar[entry.calendarId] ?? 0) + 1;
    s.byMethod[entry.method] = (s.byMethod[entry.method] ?? 0) + 1;
  }

  snapshot(): UsageSnapshot {
    return structuredClone(this.#snapshot);
  }

  reset(): void {
    this.#snapshot = UsageCounters.#empty();
  }
}

/** Google's name for the method a request calls (segments after /calendar/v3/). */
export function methodName(method: string, segments: string[]): string {
  const [head, , collection, eventId, action] = segments;
  if (head === "calendars" && collection === "events") {
    if (eventId === undefined) return method === "GET" ? "events.list" : "events.insert";
    if (eventId === "watch") return "events.watch";
    if (action === "move") return "events.move";
    if (action === "instances") return "events.instances";
    const byVerb: Record<string, string> = { GET: "get", PUT: "update", PATCH: "patch", DELETE: "delete" };
    return `events.${byVerb[method] ?? method.toLowerCase()}`;
  }
  if (head === "calendars" && collection === "acl") return "acl.list";
  if (head === "calendars") return "calendars.get";
  if (head === "users") return segments[3] === undefined ? "calendarList.list" : "calendarList.get";
  if (head === "channels") return "channels.stop";
  return "unknown";
}
