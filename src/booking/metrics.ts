// Owns the booking client's Prometheus metrics: names, labels, and get-or-create on a given registry.
import { Counter, Gauge, Histogram, type Registry } from "prom-client";

function getOrCreate<T>(registry: Registry, name: string, create: () => T): T {
  return (registry.getSingleMetric(name) as T | undefined) ?? create();
}

export interface BookingMetrics {
  requests: Counter<"method" | "status_class">;
  retries: Counter<"reason">;
  duration: Histogram<"method">;
  waits: Counter<"reason" | "priority">;
  waitSeconds: Histogram<"priority">;
  rateLimited: Counter;
}

const cache = new WeakMap<Registry, BookingMetrics>();

/** Counters and histograms are shared by every client on one registry (they add up). */
export function bookingMetrics(registry: Registry): BookingMetrics {
  const cached = cache.get(registry);
  if (cached) return cached;
  const registers = [registry];
  const m: BookingMetrics = {
    requests: getOrCreate(
      registry,
      "calbridge_booking_requests_total",
      () =>
        new Counter({
          name: "calbridge_booking_requests_total",
          help: "HTTP requests sent to the booking API, by method and status class (2xx..5xx, network, timeout).",
          labelNames: ["method", "status_class"] as const,
          registers,
        }),
    ),
    retries: getOrCreate(
      registry,
      "calbridge_booking_retries_total",
      () =>
        new Counter({
          name: "calbridge_booking_retries_total",
          help: "Booking API requests sent again, by the reason of the previous failure.",
          labelNames: ["reason"] as const,
          registers,
        }),
    ),
    duration: getOrCreate(
      registry,
      "calbridge_booking_request_duration_seconds",
      () =>
        new Histogram({
          name: "calbridge_booking_request_duration_seconds",
          help: "Time from send to parsed response of one booking API request (gate waits excluded).",
          labelNames: ["method"] as const,
          buckets: [0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 15],
          registers,
        }),
    ),
    waits: getOrCreate(
      registry,
      "calbridge_booking_ratelimit_waits_total",
      () =>
        new Counter({
          name: "calbridge_booking_ratelimit_waits_total",
          help: "Requests that waited at the rate-limit gate before being sent, by reason and priority.",
          labelNames: ["reason", "priority"] as const,
          registers,
        }),
    ),
    waitSeconds: getOrCreate(
      registry,
      "calbridge_booking_ratelimit_wait_seconds",
      () =>
        new Histogram({
          name: "calbridge_booking_ratelimit_wait_seconds",
          help: "Time requests spent waiting at the rate-limit gate (its _sum is the total time waited).",
          labelNames: ["priority"] as const,
          buckets: [0.01, 0.1, 0.5, 1, 5, 15, 30, 60, 120],
          registers,
        }),
    ),
    rateLimited: getOrCreate(
      registry,
      "calbridge_booking_ratelimited_total",
      () =>
        new Counter({
          name: "calbridge_booking_ratelimited_total",
          help: "429 responses from the booking API (each pauses every sender).",
          registers,
        }),
    ),
  };
  cache.set(registry, m);
  return m;
}

/**
 * A gauge whose value is read at scrape time. A later gate on the same registry takes the gauge over
 * (one gate per registry is the intended wiring).
 */
export function collectedGauge<L extends string>(
  registry: Registry,
  name: string,
  help: string,
  labelNames: readonly L[],
  read: (g: Gauge<L>) => void,
): Gauge<L> {
  if (registry.getSingleMetric(name)) registry.removeSingleMetric(name);
  return new Gauge<L>({
    name,
    help,
    labelNames,
    registers: [registry],
    collect() {
      read(this);
    },
  });
}
