// Owns the webhook metrics (prom-client): deliveries by result, processing by type and result, time to 2xx, and
// the inbox backlog; created once per Registry so the route and the processor can share them.
import { Counter, Gauge, Histogram, Registry } from "prom-client";

export interface WebhookMetrics {
  readonly registry: Registry;
  /**
   * result: accepted | duplicate | rejected_signature | rejected_stale | too_large | oversized | over_budget | timeout |
   * aborted | malformed | unprocessable | store_error | method_not_allowed | internal_error
   */
  readonly deliveries: Counter<"result">;
  /** result: ok | retry | dead | ignored | unknown | store_error */
  readonly processing: Counter<"type" | "result">;
  readonly responseSeconds: Histogram;
  readonly inboxPending: Gauge;
  /** Adds a source of the inbox backlog, read at scrape time. */
  watchPending(source: { readonly pendingCount: number }): void;
}

const byRegistry = new WeakMap<Registry, WebhookMetrics>();

export function webhookMetrics(registry: Registry = new Registry()): WebhookMetrics {
  const existing = byRegistry.get(registry);
  if (existing) return existing;
  const sources = new Set<{ readonly pendingCount: number }>();
  const metrics: WebhookMetrics = {
    registry,
    deliveries: new Counter({
      name: "calbridge_webhooks_total",
      help: "Webhook deliveries received, by outcome",
      labelNames: ["result"],
      registers: [registry],
    }),
    processing: new Counter({
      name: "calbridge_webhook_processing_total",
      help: "Webhook events processed from the inbox, by event type and outcome",
      labelNames: ["type", "result"],
      registers: [registry],
    }),
    responseSeconds: new Histogram({
      name: "calbridge_webhook_response_seconds",
      help: "Time from the start of a webhook request to its 2xx answer (verified and durable)",
      buckets: [0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30],
      registers: [registry],
    }),
    inboxPending: new Gauge({
      name: "calbridge_inbox_pending",
      help: "Webhook events accepted into the inbox and not yet processed",
      registers: [registry],
      collect() {
        let n = 0;
        for (const source of sources) n += source.pendingCount;
        this.set(n);
      },
    }),
    watchPending: (source) => {
      sources.add(source);
    },
  };
  byRegistry.set(registry, metrics);
  return metrics;
}
