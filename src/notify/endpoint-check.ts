// Owns the periodic look at the booking service's webhook endpoint (GET /v1/webhooks, as `calbridge doctor` does):
// rarely, at the gate's lowest priority, since it spends rate budget; the answer is kept in the store, so neither a
// restart nor a new leader asks again before it is due.
import { endpointState } from "../booking/endpoints.ts";
import type { Clock } from "../clock.ts";
import type { Logger } from "../log.ts";
import { describeError } from "../sync/errors.ts";
import type { NotifyLedger } from "./ledger.ts";
import type { NotifyMetrics } from "./metrics.ts";

export interface EndpointCheckOptions {
  /** webhooks.public_url; without it there is nothing to look for and nothing is asked. */
  url: string | undefined;
  everyMs: number;
  /** After a failed request, the next try (default 15 minutes). */
  retryMs?: number;
  /** GET /v1/webhooks, given up when `signal` aborts (the notifier stopping). */
  listWebhooks(signal?: AbortSignal): Promise<Record<string, unknown>[]>;
  ledger: NotifyLedger;
  clock: Clock;
  logger: Logger;
  metrics: NotifyMetrics;
}

export class EndpointCheck {
  readonly #o: EndpointCheckOptions;
  #retryAt = 0;

  constructor(options: EndpointCheckOptions) {
    this.#o = options;
  }

  /** Asks GET /v1/webhooks when the last answer is older than the interval; records the answer. */
  async runIfDue(signal?: AbortSignal): Promise<void> {
    const { url, clock, ledger, metrics } = this.#o;
    if (!url) return;
    const now = clock.now();
    const last = await ledger.endpointFacts();
    const known = last?.url === url ? last : undefined;
    if (known) metrics.endpointDisabled.set(known.state === "enabled" ? 0 : 1);
    if ((known && now < known.checkedAt + this.#o.everyMs) || now < this.#retryAt) return;
    let endpoints: Record<string, unknown>[];
    try {
      endpoints = await this.#o.listWebhooks(signal);
    } catch (err) {
      if (signal?.aborted) return; // stopping: asked again by the next leader or start
      this.#retryAt = now + (this.#o.retryMs ?? 15 * 60_000);
      this.#o.logger.warn(
        { err: describeError(err) },
        "GET /v1/webhooks failed; the webhook endpoint's state is checked again later",
      );
      return;
    }
    const { state } = endpointState(endpoints, url);
    await ledger.setEndpointFacts({ state, url, checkedAt: clock.now() });
    metrics.endpointDisabled.set(state === "enabled" ? 0 : 1);
    this.#o.logger.info({ state }, "booking webhook endpoint checked");
  }
}
