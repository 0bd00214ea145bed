// Owns the Prometheus metrics of the Google Calendar gateways (shared by all gateways on one registry).
import { Counter, Gauge, type Registry } from "prom-client";

export interface GatewayMetrics {
  requests: Counter<"method" | "status">;
  retries: Counter<"reason">;
  credentialsOk: Gauge<"therapist">;
  /** 1 while a therapist's credentials are broken, labelled with Google's reason (absent otherwise). */
  credentialsBroken: Gauge<"therapist" | "reason">;
  paused: Gauge<"therapist">;
}

const cache = new WeakMap<Registry, GatewayMetrics>();

/** The gateway metrics on `registry`, created on first use so many gateways can share one registry. */
export function gatewayMetrics(registry: Registry): GatewayMetrics {
  let metrics = cache.get(registry);
  if (metrics) return metrics;
  const registers = [registry];
  metrics = {
    requests: new Counter({
      name: "calbridge_google_requests_total",
      help: "Google Calendar API requests by method and HTTP status (network: no response).",
      labelNames: ["method", "status"],
      registers,
    }),
    retries: new Counter({
      name: "calbridge_google_retries_total",
      help: "Google Calendar API retries by reason (Google's error reason, HTTP status or network).",
      labelNames: ["reason"],
      registers,
    }),
    credentialsOk: new Gauge({
      name: "calbridge_google_credentials_ok",
      help: "1 while a therapist's Google credentials work, 0 once they were rejected (401, invalid_grant).",
      labelNames: ["therapist"],
      registers,
    }),
    credentialsBroken: new Gauge({
      name: "calbridge_google_credentials_broken",
      help:
        "1 while a therapist's Google credentials are broken, by Google's reason (invalid_grant, insufficientPermissions, " +
        "accessNotConfigured, requiredAccessLevel, unauthorized_client, ...); no series while they work.",
      labelNames: ["therapist", "reason"],
      registers,
    }),
    paused: new Gauge({
      name: "calbridge_google_paused",
      help: "1 while a therapist's calendar is paused after Google answered quotaExceeded.",
      labelNames: ["therapist"],
      registers,
    }),
  };
  cache.set(registry, metrics);
  return metrics;
}
