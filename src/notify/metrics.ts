// Owns the notifications' Prometheus metrics: deliveries per target, and the two facts only the notifier records
// (reconciliations failing in a row, the booking webhook endpoint's state), so alert rules can watch them too.
import { Counter, Gauge, type Registry } from "prom-client";

export interface NotifyMetrics {
  /**
   * result: sent | failed (retried; also an e-mail target's address refused for a moment, retried to it alone) |
   * refused (an address refused for good: a therapist's, dropped; one of an e-mail target's, not sent to it again).
   */
  deliveries: Counter<"target" | "result">;
  reconcileFailures: Gauge;
  endpointDisabled: Gauge;
}

export function notifyMetrics(registry: Registry): NotifyMetrics {
  const registers = [registry];
  return {
    deliveries: new Counter({
      name: "calbridge_notifications_total",
      help: "Notification messages by target (a therapist's own e-mails as <target>/therapists) and result (sent; failed and queued for a retry, also an e-mail target's address the server refused for a moment while it took the message for the others, retried to that address alone; refused: an address refused for good, a therapist's or one of an e-mail target's, not sent to again).",
      labelNames: ["target", "result"] as const,
      registers,
    }),
    reconcileFailures: new Gauge({
      name: "calbridge_reconcile_consecutive_failures",
      help: "Reconciliations that failed in a row (0 after one that succeeded); set by the leader.",
      registers,
    }),
    endpointDisabled: new Gauge({
      name: "calbridge_booking_webhook_endpoint_disabled",
      help: "1 when GET /v1/webhooks shows webhooks.public_url disabled or not registered (see notify.webhook_check_hours).",
      registers,
    }),
  };
}
