// Owns the simulated webhook side: endpoints (as configured in the dashboard), signed deliveries, the spec's retry
// schedule (scaled), disabling an endpoint after 7 failed attempts of one event, and the delivery log.
import { Agent, request } from "undici";
import type { Clock } from "../../clock.ts";
import { type Logger, silentLogger } from "../../log.ts";
import { iso } from "./model.ts";
import type { Rng } from "./random.ts";
import { signatureHeader } from "./signature.ts";

/** Delay before attempt 1..7: immediate, 1 min, 5 min, 30 min, 2 h, 8 h, 24 h. */
export const RETRY_DELAYS_MS = [0, 60_000, 300_000, 1_800_000, 7_200_000, 28_800_000, 86_400_000] as const;

export interface WebhookEndpointInput {
  /** http:// is accepted (tests); the real service demands https://. */
  url: string;
  secret: string;
  /** Event types; "*" subscribes to all. */
  events: string[];
  description?: string;
}

export interface WebhookEndpoint {
  id: string;
  url: string;
  events: string[];
  enabled: boolean;
  description: string;
  secret: string;
  disabledAt: string | undefined;
}

export interface DeliveryAttempt {
  attempt: number;
  /** ISO time on the simulator's clock. */
  at: string;
  status: number | undefined;
  error: string | undefined;
  responseBody: string | undefined;
  durationMs: number;
}

export interface Delivery {
  id: string;
  eventId: string | undefined;
  type: string | undefined;
  endpointId: string;
  body: string;
  attempts: DeliveryAttempt[];
  /** pending: more attempts to come; failed: all 7 failed; stopped: endpoint disabled/removed or simulator closed. */
  state: "pending" | "delivered" | "failed" | "stopped";
}

export interface WebhookOptions {
  clock: Clock;
  rng: Rng;
  /** Multiplies the retry delays (e.g. 1/60000: a minute becomes a millisecond). */
  timeScale: number;
  /** Real ms an endpoint has to answer (the spec's 30 s). */
  timeoutMs: number;
  logger?: Logger;
}

export class WebhookDispatcher {
  readonly endpoints = new Map<string, WebhookEndpoint>();
  readonly deliveries: Delivery[] = [];
  /** Every event the service emitted, in order. */
  readonly events: Record<string, unknown>[] = [];
  readonly #o: WebhookOptions;
  readonly #log: Logger;
  readonly #agent = new Agent({ keepAliveTimeout: 1_000 });
  readonly #closing = new AbortController();
  readonly #tasks = new Set<Promise<void>>();
  #inFlight = 0;
  #idleWaiters: (() => void)[] = [];
  /**
   * Share (0..1) of successful deliveries sent once more, at once: the spec says "Deliveries may repeat, so receivers
   * must handle duplicates (event `id` identifies an event)". The repeat is recorded as one more attempt.
   */
  repeatRate = 0;

  constructor(options: WebhookOptions) {
    this.#o = options;
    this.#log = options.logger ?? silentLogger;
  }

  add(input: WebhookEndpointInput): WebhookEndpoint {
    const ep: WebhookEndpoint = {
      id: `we_${this.#o.rng.token(12)}`,
      url: input.url,
      events: [...input.events],
      enabled: true,
      description: input.description ?? "",
      secret: input.secret,
      disabledAt: undefined,
    };
    this.endpoints.set(ep.id, ep);
    return ep;
  }

  /** The dashboard's enable/disable switch. */
  setEnabled(id: string, enabled: boolean): void {
    const ep = this.endpoints.get(id);
    if (!ep) throw new Error(`no webhook endpoint ${id}`);
    ep.enabled = enabled;
    ep.disabledAt = enabled ? undefined : iso(this.#o.clock.now());
  }

  remove(id: string): void {
    this.endpoints.delete(id);
  }

  /** What GET /v1/webhooks shows (the signing secret is never returned). */
  list(): Record<string, unknown>[] {
    return [...this.endpoints.values()].map((e) => ({
      id: e.id,
      url: e.url,
      events: [...e.events],
      enabled: e.enabled,
      description: e.description,
    }));
  }

  /** Emits an event of the service and delivers it to each enabled endpoint subscribed to its type. */
  publish(type: string, object: Record<string, unknown>, previous?: Record<string, unknown>): Record<string, unknown> {
    const event = {
      id: `evt_${this.#o.rng.token(16)}`,
      type,
      created_at: iso(this.#o.clock.now()),
      data: previous ? { object, previous_attributes: previous } : { object },
    };
    this.events.push(event);
    const body = JSON.stringify(event);
    for (const ep of this.endpoints.values()) {
      if (ep.enabled && (ep.events.includes(type) || ep.events.includes("*"))) this.#start(ep, event.id, type, body);
    }
    return event;
  }

  /**
   * The dashboard's "send test event": any object (id and created_at filled in when missing) or a raw body string,
   * to one endpoint, or to every enabled endpoint subscribed to its type.
   */
  send(raw: string | Record<string, unknown>, options: { endpointId?: string } = {}): Delivery[] {
    let body: string;
    let parsed: Record<string, unknown> | undefined;
    if (typeof raw === "string") {
      body = raw;
      try {
        parsed = JSON.parse(raw) as Record<string, unknown>;
      } catch {
        parsed = undefined;
      }
    } else {
      parsed = { id: `evt_test_${this.#o.rng.token(12)}`, created_at: iso(this.#o.clock.now()), ...raw };
      body = JSON.stringify(parsed);
    }
    const type = typeof parsed?.type === "string" ? parsed.type : undefined;
    const eventId = typeof parsed?.id === "string" ? parsed.id : undefined;
    const targets = options.endpointId
      ? [this.endpoints.get(options.endpointId)].filter((e) => e !== undefined)
      : [...this.endpoints.values()].filter(
          (e) => e.enabled && (type === undefined || e.events.includes(type) || e.events.includes("*")),
        );
    return targets.map((ep) => this.#start(ep, eventId, type, body));
  }

  /** Resolves when no delivery attempt is in flight (scheduled retries may still be waiting on the clock). */
  idle(): Promise<void> {
    if (this.#inFlight === 0) return Promise.resolve();
    return new Promise((resolve) => this.#idleWaiters.push(resolve));
  }

  async close(): Promise<void> {
    this.#closing.abort(new Error("simulator closed"));
    await Promise.allSettled([...this.#tasks]);
    await this.#agent.destroy();
  }

  #start(ep: WebhookEndpoint, eventId: string | undefined, type: string | undefined, body: string): Delivery {
    const d: Delivery = {
      id: `del_${this.#o.rng.token(12)}`,
      eventId,
      type,
      endpointId: ep.id,
      body,
      attempts: [],
      state: "pending",
    };
    this.deliveries.push(d);
    const task = this.#run(d, ep).finally(() => this.#tasks.delete(task));
    this.#tasks.add(task);
    return d;
  }

  async #run(d: Delivery, ep: WebhookEndpoint): Promise<void> {
    for (let n = 1; n <= RETRY_DELAYS_MS.length; n++) {
      if (n > 1) {
        try {
          await this.#o.clock.sleep(RETRY_DELAYS_MS[n - 1]! * this.#o.timeScale, this.#closing.signal);
        } catch {
          d.state = "stopped";
          return;
        }
      }
      if (this.#closing.signal.aborted || !ep.enabled || !this.endpoints.has(ep.id)) {
        d.state = "stopped";
        return;
      }
      if (await this.#attempt(d, ep, n)) {
        d.state = "delivered";
        if (this.repeatRate > 0 && this.#o.rng.next() < this.repeatRate && !this.#closing.signal.aborted) {
          await this.#attempt(d, ep, n + 1);
        }
        return;
      }
    }
    d.state = "failed";
    if (ep.enabled) {
      ep.enabled = false;
      ep.disabledAt = iso(this.#o.clock.now());
      this.#log.warn({ endpointId: ep.id, eventId: d.eventId }, "webhook endpoint disabled after 7 failed attempts");
    }
  }

  async #attempt(d: Delivery, ep: WebhookEndpoint, n: number): Promise<boolean> {
    this.#inFlight++;
    const at = iso(this.#o.clock.now());
    const t = Math.floor(this.#o.clock.now() / 1000);
    const started = performance.now();
    const record = (status: number | undefined, error: string | undefined, responseBody: string | undefined) =>
      d.attempts.push({
        attempt: n,
        at,
        status,
        error,
        responseBody,
        durationMs: Math.round(performance.now() - started),
      });
    const timeout = AbortSignal.timeout(this.#o.timeoutMs);
    try {
      const res = await request(ep.url, {
        method: "POST",
        headers: {
          "content-type": "application/json",
          "user-agent": "booking-service-simulator/1",
          "x-service-signature": signatureHeader(ep.secret, t, d.body),
        },
        body: d.body,
        dispatcher: this.#agent,
        signal: AbortSignal.any([timeout, this.#closing.signal]),
      });
      const text = await res.body.text();
      record(res.statusCode, undefined, text.slice(0, 1_000));
      return res.statusCode >= 200 && res.statusCode < 300;
    } catch (e) {
      record(undefined, timeout.aborted ? "timeout" : e instanceof Error ? e.message : String(e), undefined);
      return false;
    } finally {
      this.#inFlight--;
      // After the delivery loop has moved on (to its next sleep or its end), not before.
      setImmediate(() => {
        if (this.#inFlight > 0) return;
        const waiters = this.#idleWaiters;
        this.#idleWaiters = [];
        for (const w of waiters) w();
      });
    }
  }
}
