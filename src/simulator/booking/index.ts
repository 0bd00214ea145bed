// Owns the booking-service simulator's public face: start/close, the data API (changes made "in the dashboard",
// without HTTP), webhook endpoints, counters. Behaviour the spec leaves open is chosen and documented in the modules.
import { createServer, type Server } from "node:http";
import type { AddressInfo } from "node:net";
import { type Clock, systemClock } from "../../clock.ts";
import { type Logger, silentLogger } from "../../log.ts";
import { Faults } from "./faults.ts";
import { createHandler, type RequestLogEntry } from "./http.ts";
import {
  DEFAULT_SERVICES,
  type SimAppointment,
  type SimCustomer,
  type SimService,
  type SimTherapist,
} from "./model.ts";
import { type DateReading, defaultDateReading } from "./queries.ts";
import { Rng } from "./random.ts";
import { FixedWindowLimiter, type RateLimitOptions } from "./ratelimit.ts";
import { type SeedOptions, seedAppointments } from "./seed.ts";
import { BookingStore, type WorkingHours } from "./store.ts";
import { fullForm } from "./views.ts";
import { type Delivery, WebhookDispatcher, type WebhookEndpoint, type WebhookEndpointInput } from "./webhooks.ts";

export type { FaultMatch } from "./faults.ts";
export type { RequestLogEntry } from "./http.ts";
export { SimError, type SimService } from "./model.ts";
export { type DateReading, PER_PAGE_MAX } from "./queries.ts";
export type { RateLimitOptions } from "./ratelimit.ts";
export type { SeedOptions } from "./seed.ts";
export { signatureHeader, signatureHex } from "./signature.ts";
export type { WorkingHours } from "./store.ts";
export { type Delivery, type DeliveryAttempt, RETRY_DELAYS_MS, type WebhookEndpoint } from "./webhooks.ts";

export interface BookingSimulatorOptions {
  /** The Bearer credential it accepts (default "sim_test_key_0123456789"). */
  apiKey?: string;
  /** Seed of every random choice (ids, seeded data, random faults). Same seed, same data. */
  seed?: number;
  /** Time of the service: rate-limit windows, updated_at, past_booking, webhook timestamps and retry delays. */
  clock?: Clock;
  logger?: Logger;
  /** Default: 60 requests per 60 000 ms with headers; `false`: unlimited, no headers. */
  rateLimit?: RateLimitOptions | false;
  services?: SimService[];
  therapists?: string[];
  /** UTC hours therapists work (default 7 to 21). */
  workingHours?: WorkingHours;
  /** E-mails refused with customer_blocked (default ["blocked@example.com"]). */
  blockedEmails?: string[];
  /** Multiplies webhook retry delays (e.g. 1/60000). Default 1. */
  webhookTimeScale?: number;
  /** Real ms an endpoint has to answer. Default 30 000 x webhookTimeScale, at least 1 000. */
  webhookTimeoutMs?: number;
  /** How the list's date_from/date_to are read (default: UTC days, date_to included). */
  dateReading?: Partial<DateReading>;
  /** Send a `Date` header read from `clock` on every answer (default true); false: no Date at all. */
  dateHeader?: boolean;
  host?: string;
  port?: number;
}

export interface SimStats {
  requests: number;
  byRoute: Record<string, number>;
  byStatus: Record<string, number>;
  rateLimited: number;
  dropped: number;
  malformed: number;
  /** Most requests accepted in one rate-limit window (never above the limit). */
  maxPerWindow: number;
  /** Accepted requests per window, oldest first. */
  windows: { start: number; accepted: number }[];
}

export interface CreateInput {
  start_time: string;
  /** Default: the first service. */
  service_id?: string;
  therapist_id?: string;
  /** Default: a new random customer. */
  customer?: { name: string; email: string; phone?: string };
  notes?: string;
  addons?: string[];
}

type View = Record<string, unknown>;

export class BookingSimulator {
  /** Base address without /v1 (e.g. http://127.0.0.1:43210): the client's baseUrl. */
  readonly url: string;
  readonly apiKey: string;
  readonly faults: Faults;
  /** Mutable: limit, windowMs, headers, resetUnit. */
  readonly rateLimit: FixedWindowLimiter;
  readonly requests: RequestLogEntry[];
  /** Mutable: how the list's plain dates are read (the spec does not say; see queries.ts). */
  readonly dateReading: DateReading;
  readonly #clock: Clock;
  readonly #store: BookingStore;
  readonly #webhooks: WebhookDispatcher;
  readonly #server: Server;

  /** Use startBookingSimulator(). */
  constructor(parts: {
    url: string;
    apiKey: string;
    faults: Faults;
    limiter: FixedWindowLimiter;
    store: BookingStore;
    webhooks: WebhookDispatcher;
    server: Server;
    log: RequestLogEntry[];
    clock: Clock;
    dates: DateReading;
  }) {
    this.dateReading = parts.dates;
    this.#clock = parts.clock;
    this.url = parts.url;
    this.apiKey = parts.apiKey;
    this.faults = parts.faults;
    this.rateLimit = parts.limiter;
    this.#store = parts.store;
    this.#webhooks = parts.webhooks;
    this.#server = parts.server;
    this.requests = parts.log;
  }

  stats(): SimStats {
    const byRoute: Record<string, number> = {};
    const byStatus: Record<string, number> = {};
    for (const r of this.requests) {
      byRoute[r.route] = (byRoute[r.route] ?? 0) + 1;
      const key = r.status === undefined ? r.outcome : String(r.status);
      byStatus[key] = (byStatus[key] ?? 0) + 1;
    }
    return {
      requests: this.requests.length,
      byRoute,
      byStatus,
      rateLimited: this.requests.filter((r) => r.status === 429).length,
      dropped: this.requests.filter((r) => r.outcome === "dropped").length,
      malformed: this.requests.filter((r) => r.outcome === "malformed").length,
      maxPerWindow: this.rateLimit.maxPerWindow(),
      windows: [...this.rateLimit.accepted.entries()]
        .sort((a, b) => a[0] - b[0])
        .map(([start, accepted]) => ({ start, accepted })),
    };
  }

  /** Forgets the request log and the per-window counts (the current window's budget stays spent). */
  resetStats(): void {
    this.requests.length = 0;
    const now = Math.floor(this.#clock.now() / this.rateLimit.windowMs) * this.rateLimit.windowMs;
    for (const k of [...this.rateLimit.accepted.keys()]) if (k < now) this.rateLimit.accepted.delete(k);
  }

  // ---- data API: changes as if made by staff in the dashboard (no availability rules unless force: false) ----

  /** Bulk data without events. Returns the new ids. */
  seed(options: SeedOptions): string[] {
    return seedAppointments(this.#store, options);
  }

  addTherapist(id: string, name?: string): SimTherapist {
    return this.#store.addTherapist(id, name);
  }

  therapists(): SimTherapist[] {
    return [...this.#store.therapists.values()].map((t) => ({ ...t }));
  }

  customers(): SimCustomer[] {
    return [...this.#store.customers.values()].map((c) => ({ ...c }));
  }

  /** Books (appointment.created). With `force: false` the API's rules apply and refusals throw SimError. */
  create(input: CreateInput, options: { force?: boolean } = {}): View {
    const customer = input.customer ?? this.#randomCustomer();
    const body = { ...input, service_id: input.service_id ?? [...this.#store.services.keys()][0], customer };
    return this.#view(this.#store.create(body, { force: options.force ?? true }).id);
  }

  /** Moves the start (end follows, duration kept); appointment.updated. */
  move(id: string, start: string | number | Date, options: { force?: boolean } = {}): View {
    const start_time = new Date(start).toISOString();
    return this.#view(this.#store.update(id, { start_time }, { force: options.force ?? true }).id);
  }

  reassign(id: string, therapistId: string, options: { force?: boolean } = {}): View {
    return this.#view(this.#store.update(id, { therapist_id: therapistId }, { force: options.force ?? true }).id);
  }

  /**
   * From now on the list and Get forms (and webhooks made of them) show these fields as null, as a service may for an
   * unassigned appointment or one without a fixed end; the stored appointment is unchanged. No webhook.
   */
  showNull(id: string, fields: SimAppointment["shownNull"]): void {
    this.#store.get(id).shownNull = fields;
  }

  setNotes(id: string, notes: string): View {
    return this.#view(this.#store.update(id, { notes }).id);
  }

  cancel(id: string, reason?: string, options: { refund?: boolean } = {}): View {
    return this.#view(this.#store.cancel(id, { reason, refund: options.refund }).id);
  }

  /** A cancellation taken back by staff: confirmed again, appointment.updated. */
  restoreCancelled(id: string): View {
    return this.#view(this.#store.restoreCancelled(id).id);
  }

  /** status "completed", event appointment.completed. */
  complete(id: string): View {
    return this.#view(this.#store.finish(id, "completed").id);
  }

  /** status "no_show" (the spec names only the event), event appointment.no_show. */
  noShow(id: string): View {
    return this.#view(this.#store.finish(id, "no_show").id);
  }

  /** customer.updated; the customer's appointments keep their updated_at. */
  updateCustomer(
    customerId: string,
    fields: { name?: string; email?: string; phone?: string; blocked?: boolean },
  ): View {
    const c = this.#store.updateCustomer(customerId, fields);
    return { id: c.id, name: c.name, email: c.email, phone: c.phone ?? "" };
  }

  /** The full form (what GET /v1/appointments/:id shows), or undefined. */
  get(id: string): View | undefined {
    return this.#store.appointments.has(id) ? this.#view(id) : undefined;
  }

  all(): View[] {
    return [...this.#store.appointments.keys()].map((id) => this.#view(id));
  }

  // ---- webhooks ----

  addWebhookEndpoint(input: WebhookEndpointInput): WebhookEndpoint {
    return this.#webhooks.add(input);
  }

  setWebhookEndpointEnabled(id: string, enabled: boolean): void {
    this.#webhooks.setEnabled(id, enabled);
  }

  removeWebhookEndpoint(id: string): void {
    this.#webhooks.remove(id);
  }

  webhookEndpoints(): WebhookEndpoint[] {
    return [...this.#webhooks.endpoints.values()].map((e) => ({ ...e, events: [...e.events] }));
  }

  /** Every delivery with its attempts (the dashboard's delivery log). */
  get deliveries(): readonly Delivery[] {
    return this.#webhooks.deliveries;
  }

  /** Every event emitted, in order (delivered or not). */
  get events(): readonly Record<string, unknown>[] {
    return this.#webhooks.events;
  }

  /** Sends a signed test event (object: id/created_at filled in; string: sent as is). */
  sendEvent(raw: string | Record<string, unknown>, options: { endpointId?: string } = {}): Delivery[] {
    return this.#webhooks.send(raw, options);
  }

  /** Share (0..1) of successful webhook deliveries the service sends again ("Deliveries may repeat"). */
  get webhookRepeatRate(): number {
    return this.#webhooks.repeatRate;
  }
  set webhookRepeatRate(rate: number) {
    this.#webhooks.repeatRate = rate;
  }

  /** Resolves when no webhook delivery attempt is in flight. */
  webhooksIdle(): Promise<void> {
    return this.#webhooks.idle();
  }

  async close(): Promise<void> {
    await this.#webhooks.close();
    await new Promise<void>((resolve) => {
      this.#server.close(() => resolve());
      this.#server.closeAllConnections();
    });
  }

  #view(id: string): View {
    return fullForm(this.#store.get(id), this.#store);
  }

  #randomCustomer(): { name: string; email: string; phone?: string } {
    const c = this.#store.randomCustomer();
    return { name: c.name, email: c.email, ...(c.phone ? { phone: c.phone } : {}) };
  }
}

export async function startBookingSimulator(options: BookingSimulatorOptions = {}): Promise<BookingSimulator> {
  const clock = options.clock ?? systemClock;
  const rng = new Rng(options.seed ?? 1);
  const apiKey = options.apiKey ?? "sim_test_key_0123456789";
  const scale = options.webhookTimeScale ?? 1;
  const webhooks = new WebhookDispatcher({
    clock,
    rng,
    timeScale: scale,
    timeoutMs: options.webhookTimeoutMs ?? Math.max(1_000, 30_000 * scale),
    logger: options.logger ?? silentLogger,
  });
  const store = new BookingStore({
    rng,
    clock,
    services: options.services ?? DEFAULT_SERVICES,
    workingHours: options.workingHours ?? { start: 7, end: 21 },
    blockedEmails: (options.blockedEmails ?? ["blocked@example.com"]).map((e) => e.toLowerCase()),
    emit: (type, object, previous) => {
      webhooks.publish(type, object, previous);
    },
  });
  for (const t of options.therapists ?? []) store.addTherapist(t);
  const faults = new Faults(rng);
  const limiter = new FixedWindowLimiter(options.rateLimit ?? {}, clock);
  const log: RequestLogEntry[] = [];
  const dates: DateReading = { ...defaultDateReading(), ...options.dateReading };
  const server = createServer(
    createHandler({
      apiKey,
      clock,
      rng,
      store,
      limiter,
      faults,
      webhooks,
      log,
      dates,
      dateHeader: options.dateHeader ?? true,
    }),
  );
  server.keepAliveTimeout = 5_000;
  await new Promise<void>((resolve, reject) => {
    server.once("error", reject);
    server.listen(options.port ?? 0, options.host ?? "127.0.0.1", () => resolve());
  });
  const { address, port } = server.address() as AddressInfo;
  return new BookingSimulator({
    url: `http://${address}:${port}`,
    apiKey,
    faults,
    limiter,
    store,
    webhooks,
    server,
    log,
    clock,
    dates,
  });
}
