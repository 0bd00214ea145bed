// Owns the booking API client: the endpoints calbridge uses, the retry policy per kind of call, and its counters.
// One HTTP exchange lives in transport.ts, the rate-limit gate in gate.ts, page walking in pagination.ts.
import { isDeepStrictEqual } from "node:util";
import { Registry } from "prom-client";
import { z } from "zod";
import { type Clock, systemClock } from "../clock.ts";
import { type Logger, secrets, silentLogger } from "../log.ts";
import { writeGuard } from "../write-guard.ts";
import {
  BACKOFF_BASE_MS,
  BACKOFF_CAP_MS,
  DEFAULT_MAX_RATE_LIMIT_RETRIES,
  DEFAULT_MAX_RETRIES,
  DEFAULT_TIMEOUT_MS,
  MAX_WEBHOOK_PAGES,
  PER_PAGE,
  USER_AGENT,
} from "./constants.ts";
import { listDates, RangeLimit, refusesDates } from "./date-range.ts";
import { BookingApiError, changedMeanwhile, isChangedMeanwhile } from "./errors.ts";
import { type Priority, RateLimitGate } from "./gate.ts";
import { type BookingMetrics, bookingMetrics } from "./metrics.ts";
import { type Page, paginate } from "./pagination.ts";
import { BookingReachability } from "./reachability.ts";
import { Appointment, Availability, listEnvelope, singleEnvelope } from "./schemas.ts";
import { asList, asRecords, patchApplied, patchContradicted, totalPages } from "./shapes.ts";
import { type ExchangeInput, Transport } from "./transport.ts";
import type {
  AppointmentQuery,
  AvailabilityQuery,
  BookingClientOptions,
  BookingStats,
  CallOptions,
  CancelBody,
  CreateBody,
  PatchBody,
} from "./types.ts";

export type {
  AppointmentQuery,
  AvailabilityQuery,
  BookingClientOptions,
  BookingStats,
  CallOptions,
  CancelBody,
  CreateBody,
  PatchBody,
} from "./types.ts";

/**
 * read: safe to resend. idempotent: a write whose repetition gives the same state. verify: look before resending.
 * once: never resent after an ambiguous failure (only after a 429, which was not processed).
 */
type RetryMode = "read" | "idempotent" | "verify" | "once";

interface CallSpec<T> {
  input: ExchangeInput;
  schema: z.ZodType<T>;
  priority: Priority;
  mode: RetryMode;
  /**
   * For writes: the appointment as it is now if the write is found applied, else undefined (throws changed_meanwhile
   * when it was changed by someone else: CallOptions.basis).
   */
  confirm?: () => Promise<T | undefined>;
  /** Look (confirm) after a 429 too before sending again: the wait may have let someone else change the appointment. */
  lookAfterLimit?: boolean;
  /** CallOptions.beforeSend. */
  beforeSend?: () => Promise<void>;
}

/**
 * The path of one appointment. An id that would change the path's meaning is refused before anything is sent: "" and
 * "." and ".." (dot segments: WHATWG URL resolution turns /v1/appointments/.. into /v1/, and treats the encoded forms
 * %2e and %2E as dots too, so encoding does not help), and ids holding a slash or backslash (servers and proxies
 * often decode %2F and %5C back into separators). The error is permanent for that one appointment.
 */
export function appointmentPath(id: string, suffix = ""): string {
  if (id === "" || id === "." || id === ".." || /[/\\]/.test(id)) {
    throw new BookingApiError({
      code: "invalid_appointment_id",
      message: `appointment id ${JSON.stringify(id.slice(0, 100))} cannot be used in a request path (empty, "." or "..", or holding a slash); nothing was sent to the booking API`,
    });
  }
  return `/v1/appointments/${encodeURIComponent(id)}${suffix}`;
}

const AppointmentEnvelope = singleEnvelope(Appointment);
const AppointmentList = listEnvelope(Appointment);
const AvailabilityEnvelope = singleEnvelope(Availability);
const DAY_MS = 86_400_000;
const SERVING_TRUST_MS = 60_000;
const round2 = (n: number) => Math.round(n * 100) / 100;

export class BookingClient {
  readonly gate: RateLimitGate;
  /** Whether the booking API answers, as this client's requests found it (what /readyz reports). */
  readonly reachability: BookingReachability;
  readonly #transport: Transport;
  readonly #clock: Clock;
  readonly #log: Logger;
  readonly #random: () => number;
  readonly #maxRetries: number;
  readonly #maxRateLimitRetries: number;
  readonly #pageConcurrency: number;
  readonly #metrics: BookingMetrics;
  /** When the connection test last answered (see getAppointment). */
  #servingAt = Number.NEGATIVE_INFINITY;
  /** How wide a list's window may be, as far as the service has said. */
  readonly #rangeLimit = new RangeLimit();
  readonly #stats: BookingStats = {
    requests: 0,
    byStatusClass: {},
    rateLimited: 0,
    retries: 0,
    waitedMs: 0,
    gateWaitedMs: 0,
    backoffMs: 0,
  };

  constructor(options: BookingClientOptions) {
    secrets.add(options.apiKey);
    this.#clock = options.clock ?? systemClock;
    this.#log = options.logger ?? silentLogger;
    this.#random = options.random ?? Math.random;
    this.#maxRetries = options.maxRetries ?? DEFAULT_MAX_RETRIES;
    this.#maxRateLimitRetries = options.maxRateLimitRetries ?? DEFAULT_MAX_RATE_LIMIT_RETRIES;
    this.#pageConcurrency = Math.max(1, options.pageConcurrency ?? 1);
    const registry = options.registry ?? new Registry();
    this.#metrics = bookingMetrics(registry);
    this.#transport = new Transport({
      baseUrl: options.baseUrl,
      apiKey: options.apiKey,
      userAgent: USER_AGENT,
      timeoutMs: options.timeoutMs ?? DEFAULT_TIMEOUT_MS,
      dispatcher: options.dispatcher,
    });
    this.reachability = new BookingReachability({
      clock: this.#clock,
      probe: () => this.listServices({ priority: "reconcile" }),
    });
    this.gate = new RateLimitGate({
      requestsPerMinute: options.requestsPerMinute,
      ...(options.rateWindowMs !== undefined ? { windowMs: options.rateWindowMs } : {}),
      ...(options.maxInFlight !== undefined ? { maxInFlight: options.maxInFlight } : {}),
      clock: this.#clock,
      logger: this.#log,
      registry,
      random: this.#random,
    });
  }

  /**
   * Every page of a filtered list, `per_page=100`, as the server returned it (duplicates across pages possible). The
   * dates sent are plain dates a little wider than `dateFrom`..`dateTo` (see date-range.ts), so the pages may hold
   * appointments just outside the window: `listAppointments` drops them. `stopAfter` ends it after that many pages.
   */
  listAppointmentPages(
    query: AppointmentQuery,
    opts: CallOptions & { stopAfter?: number } = {},
  ): AsyncGenerator<Page<Appointment>> {
    const priority = opts.priority ?? "reconcile";
    const dates = listDates(query);
    const fetchPage = async (page: number): Promise<Page<Appointment>> => {
      const body = await this.#call({
        input: {
          method: "GET",
          path: "/v1/appointments",
          query: {
            date_from: dates.date_from,
            date_to: dates.date_to,
            therapist_id: query.therapistId,
            status: query.status,
            customer_id: query.customerId,
            page,
            per_page: PER_PAGE,
          },
          signal: opts.signal,
        },
        schema: AppointmentList,
        priority,
        mode: "read",
      });
      return { page, items: body.data, meta: body.meta };
    };
    return paginate(
      fetchPage,
      PER_PAGE,
      this.#pageConcurrency,
      opts.stopAfter !== undefined ? { stopAfter: opts.stopAfter } : {},
    );
  }

  /**
   * Every matching appointment, once unless it changed during the walk. Pages drift while the data changes (page
   * numbers over a list that moves), so an appointment can come on two pages: an identical copy is skipped, but one
   * that differs is yielded again, since the later page was read later and its copy is the fresher (confirmed on page
   * 1, cancelled by the time page 2 was read). Consumers keep the last copy of an id; counting yields over-counts.
   * Only appointments starting within `dateFrom`..`dateTo` (both included) are yielded.
   */
  async *listAppointments(query: AppointmentQuery, opts: CallOptions = {}): AsyncGenerator<Appointment> {
    const yielded = new Map<string, Appointment>();
    for await (const a of this.#listWindow(query, opts)) {
      const earlier = yielded.get(a.id);
      if (earlier !== undefined && isDeepStrictEqual(earlier, a)) continue;
      yielded.set(a.id, a);
      yield a;
    }
  }

  /**
   * The window's appointments: listed whole, or in consecutive pieces no wider than the service has taken. A piece the
   * service refuses for its dates before any of it was yielded is listed again, narrower (an appointment on the
   * border of two pieces comes twice, identical: `listAppointments` yields it once).
   */
  async *#listWindow(query: AppointmentQuery, opts: CallOptions): AsyncGenerator<Appointment> {
    const from = query.dateFrom === undefined ? Number.NaN : Date.parse(query.dateFrom);
    const to = query.dateTo === undefined ? Number.NaN : Date.parse(query.dateTo);
    if (Number.isNaN(from) || Number.isNaN(to) || to <= from) return yield* this.#listPiece(query, opts);
    for (let f = from; ; ) {
      const t = this.#rangeLimit.pieceEnd(f, to);
      const piece = { ...query, dateFrom: new Date(f).toISOString(), dateTo: new Date(t).toISOString() };
      let started = false;
      try {
        for await (const a of this.#listPiece(piece, opts)) {
          started = true;
          yield a;
        }
      } catch (error) {
        if (started || !refusesDates(error) || !this.#rangeLimit.refused(t - f)) throw error;
        this.#log.warn(
          { err: error, refused_days: round2((t - f) / DAY_MS), now_days: round2(this.#rangeLimit.maxMs / DAY_MS) },
          "the booking service refused the date range of an appointment list (its limits are not in the spec); listing in narrower windows from now on",
        );
        continue;
      }
      if (t >= to) return;
      f = t;
    }
  }

  async *#listPiece(query: AppointmentQuery, opts: CallOptions): AsyncGenerator<Appointment> {
    const { within } = listDates(query);
    for await (const page of this.listAppointmentPages(query, opts)) {
      for (const a of page.items) if (within(a)) yield a;
    }
  }

  /**
   * One appointment, full form. "Not found" removes its event, so it is believed only while the service answers its
   * connection test (GET /v1/services): a 404 for everything (a wrong base address, an API version no longer served)
   * is an outage, retried as one (not_found_unverified), never a deletion.
   */
  async getAppointment(id: string, opts: CallOptions = {}): Promise<Appointment> {
    try {
      const body = await this.#call({
        input: { method: "GET", path: appointmentPath(id), signal: opts.signal },
        schema: AppointmentEnvelope,
        priority: opts.priority ?? "webhook",
        mode: "read",
      });
      return body.data;
    } catch (e) {
      if (!(e instanceof BookingApiError) || e.kind !== "not_found" || (await this.#serving(opts))) throw e;
      throw new BookingApiError({
        code: "not_found_unverified",
        message: `${e.code} for the appointment, while the connection test (GET /v1/services) fails too: an outage, not a deleted appointment`,
        status: 404,
        method: e.method,
        path: e.path,
        cause: e,
      });
    }
  }

  /** Whether the connection test answers; a success is trusted for a minute (many appointments may be gone at once). */
  async #serving(opts: CallOptions): Promise<boolean> {
    if (this.#clock.now() - this.#servingAt < SERVING_TRUST_MS) return true;
    try {
      await this.listServices({ ...opts, priority: opts.priority ?? "webhook" });
    } catch {
      return false;
    }
    this.#servingAt = this.#clock.now();
    return true;
  }

  /**
   * Moves, reassigns or annotates an appointment. Setting start_time/therapist_id/notes twice gives the same state,
   * so it is resent after an ambiguous failure; a status change is checked with a GET first. A resend that is refused
   * (the slot taken by this very appointment, because the first attempt was applied after all) is checked with a GET
   * and answered with the appointment when the change is there.
   */
  async patchAppointment(id: string, body: PatchBody, opts: CallOptions = {}): Promise<Appointment> {
    const wanted = Object.fromEntries(Object.entries(body).filter(([, v]) => v !== undefined)) as PatchBody;
    const applied = (now: Appointment) => patchApplied(now, wanted);
    const result = await this.#call({
      input: { method: "PATCH", path: appointmentPath(id), body: wanted, signal: opts.signal },
      schema: AppointmentEnvelope,
      priority: opts.priority ?? "writeback",
      // Resent blindly only when nothing says what it was decided from: a resend over a newer change (the customer's
      // reschedule during the backoff) would move the appointment back.
      mode: wanted.status === undefined && !opts.basis ? "idempotent" : "verify",
      lookAfterLimit: opts.basis !== undefined,
      ...(opts.beforeSend ? { beforeSend: opts.beforeSend } : {}),
      confirm: async () => {
        const now = await this.getAppointment(id, readOpts(opts));
        if (applied(now)) return { data: now };
        if (opts.basis && !opts.basis(now)) throw changedMeanwhile("PATCH", appointmentPath(id));
        return undefined;
      },
    });
    if (!patchContradicted(result.data, wanted)) return result.data;
    return this.#lookAgain(id, appointmentPath(id), "PATCH", applied, opts);
  }

  /**
   * Cancels. After an ambiguous failure it waits, then looks (GET) before sending again, so a cancel is not sent twice
   * when the first one was applied; a resend refused because the first landed meanwhile is checked the same way.
   */
  async cancelAppointment(id: string, body: CancelBody = {}, opts: CallOptions = {}): Promise<Appointment> {
    const result = await this.#call({
      input: {
        method: "POST",
        path: appointmentPath(id, "/cancel"),
        body,
        signal: opts.signal,
      },
      schema: AppointmentEnvelope,
      priority: opts.priority ?? "writeback",
      mode: "verify",
      lookAfterLimit: opts.basis !== undefined,
      ...(opts.beforeSend ? { beforeSend: opts.beforeSend } : {}),
      confirm: async () => {
        const now = await this.getAppointment(id, readOpts(opts));
        // Cancelled, by this call or by someone else meanwhile (the caller tells which by the reason).
        if (now.status === "cancelled") return { data: now };
        if (opts.basis && !opts.basis(now)) throw changedMeanwhile("POST", appointmentPath(id, "/cancel"));
        return undefined;
      },
    });
    // Only an answer still saying "confirmed" contradicts it (other status words than the spec's are not shown).
    if (result.data.status !== "confirmed") return result.data;
    return this.#lookAgain(id, appointmentPath(id, "/cancel"), "POST", (now) => now.status !== "confirmed", opts);
  }

  /**
   * A success whose answer shows the appointment without the change asked for: a GET looks again (the answer may have
   * been written before the change). Not there either, it is a refusal (not_applied): the write-back then puts the
   * calendar back with a note, instead of recording a change the booking service did not make.
   */
  async #lookAgain(
    id: string,
    path: string,
    method: string,
    applied: (now: Appointment) => boolean,
    opts: CallOptions,
  ): Promise<Appointment> {
    this.#log.warn({ method, path }, "booking API answered success without the change: looking again");
    const now = await this.getAppointment(id, { ...opts, priority: opts.priority ?? "writeback" });
    if (applied(now)) return now;
    throw new BookingApiError({
      code: "not_applied",
      message: `the booking service answered success, but the appointment does not show the change (status ${now.status ?? "not given"}, start ${now.start_time ?? "not given"})`,
      method,
      path,
    });
  }

  /**
   * Books an appointment. Not idempotent and not verifiable: after an ambiguous failure (timeout, lost answer, 5xx)
   * it is not sent again; the caller decides (the next reconciliation will see the booking if it was made).
   */
  async createAppointment(body: CreateBody, opts: CallOptions = {}): Promise<Appointment> {
    const result = await this.#call({
      input: { method: "POST", path: "/v1/appointments", body, signal: opts.signal },
      schema: AppointmentEnvelope,
      priority: opts.priority ?? "writeback",
      mode: "once",
    });
    return result.data;
  }

  async getAvailability(q: AvailabilityQuery, opts: CallOptions = {}): Promise<Availability> {
    const body = await this.#call({
      input: {
        method: "GET",
        path: "/v1/availability",
        query: { service_id: q.serviceId, date: q.date, therapist_id: q.therapistId, duration: q.duration },
        signal: opts.signal,
      },
      schema: AvailabilityEnvelope,
      priority: opts.priority ?? "writeback",
      mode: "read",
    });
    return body.data;
  }

  /** The connection test. The response shape is not specified: a data array, a bare array, or anything else. */
  async listServices(opts: CallOptions = {}): Promise<unknown[]> {
    const body = await this.#call({
      input: { method: "GET", path: "/v1/services", query: { per_page: PER_PAGE }, signal: opts.signal },
      schema: z.unknown(),
      priority: opts.priority ?? "reconcile",
      mode: "read",
    });
    return asList(body);
  }

  /**
   * Webhook endpoints as records; tolerates a data array, a keyed object, or one object. Every page: an account with
   * more endpoints than a page holds (20 by default) had ours on page 2 reported "not registered".
   */
  async listWebhooks(opts: CallOptions = {}): Promise<Record<string, unknown>[]> {
    const out: Record<string, unknown>[] = [];
    for (let page = 1; page <= MAX_WEBHOOK_PAGES; page++) {
      const body = await this.#call({
        input: {
          method: "GET",
          path: "/v1/webhooks",
          query: { per_page: PER_PAGE, ...(page > 1 ? { page } : {}) },
          signal: opts.signal,
        },
        schema: z.unknown(),
        priority: opts.priority ?? "reconcile",
        mode: "read",
      });
      const records = asRecords(body);
      out.push(...records);
      if (records.length === 0 || page >= totalPages(body)) break;
    }
    return out;
  }

  stats(): BookingStats {
    return { ...this.#stats, byStatusClass: { ...this.#stats.byStatusClass } };
  }

  async #call<T>(spec: CallSpec<T>): Promise<T> {
    let failures = 0;
    let limited = 0;
    // A write whose fate is unknown (timeout, lost answer, 5xx) may still be applied, even after a resend went out.
    let ambiguous = false;
    for (;;) {
      try {
        return await this.#once(spec);
      } catch (e) {
        if (!(e instanceof BookingApiError)) throw e;
        if (e.kind === "rate_limited") {
          // Not processed; the gate has paused every sender until the window resets (or backs off without headers).
          if (limited++ >= this.#maxRateLimitRetries) throw e;
          this.#countRetry(e, limited - 1, 0);
          if (spec.lookAfterLimit) {
            const applied = await this.#confirm(spec, e);
            if (applied !== undefined) return applied;
          }
          continue;
        }
        if (e.kind === "transient") {
          if (spec.mode === "once") throw e;
          if (spec.mode !== "read") ambiguous = true;
          const last = failures >= this.#maxRetries;
          if (spec.mode === "verify") {
            // Wait before looking: a request that timed out may still be on its way to being applied.
            await this.#backoff(e, failures++, spec.input.signal);
            const applied = await this.#confirm(spec, e);
            if (applied !== undefined) return applied;
            if (last) throw e;
            continue;
          }
          if (last) throw e;
          await this.#backoff(e, failures++, spec.input.signal);
          continue;
        }
        const yes = e.code === "invalid_response" && e.status !== undefined && e.status < 300;
        if (spec.confirm && (ambiguous || yes)) {
          // A resend refused ("already cancelled", "slot taken" by this very appointment) after an earlier attempt
          // whose fate was unknown, or a yes with an unreadable body: report the state the server is in if the change
          // is there, rather than a refusal of something that happened.
          const applied = await this.#confirm(spec, e).catch((error: unknown) => {
            // A yes that cannot be checked may well have been applied: never to be reported as "not applied".
            throw yes ? unconfirmedSuccess(e, error) : error;
          });
          if (applied !== undefined) return applied;
        }
        throw e;
      }
    }
  }

  async #confirm<T>(spec: CallSpec<T>, cause: BookingApiError): Promise<T | undefined> {
    if (!spec.confirm) return undefined;
    this.#log.info(
      { method: spec.input.method, path: spec.input.path, code: cause.code },
      "booking API write failed ambiguously: checking whether it was applied",
    );
    try {
      return await spec.confirm();
    } catch (err) {
      if (isChangedMeanwhile(err)) throw err;
      // Could not look: resending blindly is what the check is there to avoid.
      throw cause;
    }
  }

  async #once<T>(spec: CallSpec<T>): Promise<T> {
    const { input } = spec;
    // A write made within a sync passes its guard before it is sent, also after the rate gate's wait: a replica that
    // lost the leader lease meanwhile (a write-back's calendar look-ups may take minutes) sends nothing, and the next
    // leader, which takes the write-back up, is the only one to send it.
    const guard = input.method === "GET" ? undefined : writeGuard();
    guard?.();
    // What the write is for still stands (CallOptions.beforeSend): looked at before the gate, holding no permit, and
    // again after a wait there (a 429's pause, a spent budget). The lease is checked last, after that look, which may
    // take long (Google's retries): right before the send.
    await spec.beforeSend?.();
    const permit = await this.gate.acquire(spec.priority, input.signal);
    try {
      if (permit.waitedMs > 0) await spec.beforeSend?.();
      guard?.();
    } catch (err) {
      permit.done({ unsent: true });
      throw err;
    }
    this.#stats.gateWaitedMs += permit.waitedMs;
    this.#stats.waitedMs += permit.waitedMs;
    this.#stats.requests++;
    const started = performance.now();
    let res: Awaited<ReturnType<Transport["send"]>>;
    try {
      res = await this.#transport.send(input);
    } catch (e) {
      permit.done();
      // No answer (network error, timeout); an abort by the caller says nothing about the service.
      if (e instanceof BookingApiError) this.reachability.failed(e);
      const cls = e instanceof BookingApiError ? (e.code === "timeout" ? "timeout" : "network") : "aborted";
      this.#count(input.method, cls);
      this.#log.debug({ method: input.method, path: input.path, outcome: cls }, "booking API request failed");
      throw e;
    }
    // The body is read before the permit goes back: a rate limit said by the error code at another status than 429
    // (the spec shows neither) pauses the gate as a 429 does.
    let result: { ok: true; value: T } | { ok: false; error: unknown };
    try {
      result = { ok: true, value: this.#transport.interpret(input, res, spec.schema) };
    } catch (error) {
      result = { ok: false, error };
    }
    this.reachability.record(!result.ok && result.error instanceof BookingApiError ? result.error : undefined);
    const limited = res.status === 429 || (!result.ok && isRateLimited(result.error));
    permit.done({
      status: res.status,
      headers: res.headers,
      ...(limited && res.status !== 429 ? { rateLimited: true } : {}),
    });
    const seconds = (performance.now() - started) / 1000;
    this.#metrics.duration.observe({ method: input.method }, seconds);
    this.#count(input.method, `${Math.floor(res.status / 100)}xx`);
    if (limited) this.#stats.rateLimited++;
    this.#log.debug(
      {
        method: input.method,
        path: input.path,
        status: res.status,
        ms: Math.round(seconds * 1000),
        requestId: res.requestId,
      },
      "booking API request",
    );
    if (!result.ok) throw result.error;
    return result.value;
  }

  #count(method: string, cls: string): void {
    this.#stats.byStatusClass[cls] = (this.#stats.byStatusClass[cls] ?? 0) + 1;
    this.#metrics.requests.inc({ method, status_class: cls });
  }

  #countRetry(e: BookingApiError, attempt: number, delayMs: number): void {
    this.#stats.retries++;
    this.#metrics.retries.inc({ reason: e.code });
    this.#log.info(
      { method: e.method, path: e.path, code: e.code, status: e.status, attempt: attempt + 1, delayMs },
      "booking API request will be retried",
    );
  }

  async #backoff(e: BookingApiError, attempt: number, signal: AbortSignal | undefined): Promise<void> {
    const delay = Math.round(this.#random() * Math.min(BACKOFF_CAP_MS, BACKOFF_BASE_MS * 2 ** attempt));
    this.#countRetry(e, attempt, delay);
    this.#stats.backoffMs += delay;
    this.#stats.waitedMs += delay;
    await this.#clock.sleep(delay, signal);
  }
}

/** A 2xx with a body that cannot be read, and a GET that could not tell whether the change was made. */
function unconfirmedSuccess(answer: BookingApiError, lookFailed: unknown): BookingApiError {
  return new BookingApiError({
    code: "unconfirmed_success",
    message: `answered ${answer.status} with a body that cannot be read, and reading the appointment back failed too (${lookFailed instanceof Error ? lookFailed.message : String(lookFailed)})`,
    status: answer.status,
    method: answer.method,
    path: answer.path,
    cause: answer,
  });
}

/** Whether a failed exchange said the rate limit is exceeded (by its status or its error code). */
function isRateLimited(e: unknown): boolean {
  return e instanceof BookingApiError && e.kind === "rate_limited";
}

/** A write's look at the appointment: at the write's priority (default write-back), with its signal. */
function readOpts(o: CallOptions): CallOptions {
  return { priority: o.priority ?? "writeback", ...(o.signal ? { signal: o.signal } : {}) };
}
