// Owns what ops see of the push channels beside the log: each therapist's `push` block on /status, and the
// calbridge_push_channels{state} gauge and calbridge_push_renewals_total{result} counter. A renewal Google keeps
// refusing was a warning per calendar per hour in the log and nothing else, while its calendar fell back to the short
// poll interval (Google quota). Channels are the leader's: a standby opens none, and reports none of this.
import { Counter, Gauge, type Registry } from "prom-client";
import type { ChannelHealth, PushHealth, RenewalResult } from "../sync/push-health.ts";
import type { TherapistPushStatus } from "./status-page.ts";

const STATES: readonly ChannelHealth[] = ["confirmed", "unconfirmed", "suspect", "none"];
const RESULTS: readonly RenewalResult[] = ["opened", "refused_address", "failed"];

const iso = (ms: number | undefined) => (ms === undefined ? null : new Date(ms).toISOString());

/** A therapist's push block for /status (no channel id, token or digest: nothing that helps forge a notification). */
export function pushStatus(health: PushHealth, therapistId: string, now: number): TherapistPushStatus {
  const channel = health.channel(therapistId);
  const failure = health.lastRenewalFailure(therapistId);
  return {
    state: health.state(therapistId, now),
    expiresAt: iso(channel?.expiration),
    lastNotificationAt: iso(health.lastNotifiedAt(therapistId)),
    lastRenewalError: failure
      ? { at: new Date(failure.at).toISOString(), message: failure.message, result: failure.result }
      : null,
  };
}

/**
 * Registers the gauge (mapped calendars by their channel's state, read at each scrape; no therapist label, for
 * cardinality: /status names them) and the renewal counter on `registry`.
 */
export function registerPushMetrics(options: {
  registry: Registry;
  health: PushHealth;
  /** Whether google.push is configured: without it the gauge has no series. */
  enabled: () => boolean;
  /** Whether this replica leads: a standby's gauge reads 0 in every state. */
  isLeader: () => boolean;
  /** The mapped therapists now. */
  therapists: () => Iterable<string>;
  now: () => number;
}): void {
  const { health } = options;
  const registers = [options.registry];
  new Gauge({
    name: "calbridge_push_channels",
    help: "Mapped calendars by the state of their push channel (confirmed, unconfirmed, suspect, none), on the leader; 0 on a standby.",
    labelNames: ["state"] as const,
    registers,
    collect() {
      this.reset();
      if (!options.enabled()) return;
      const counts = new Map<ChannelHealth, number>(STATES.map((s) => [s, 0]));
      if (options.isLeader()) {
        const now = options.now();
        for (const t of options.therapists()) {
          const state = health.state(t, now);
          counts.set(state, (counts.get(state) ?? 0) + 1);
        }
      }
      for (const [state, n] of counts) this.set({ state }, n);
    },
  });
  const renewals = new Counter({
    name: "calbridge_push_renewals_total",
    help: "Push channel renewals (events.watch) by result: opened, refused_address (Google refuses the address), failed.",
    labelNames: ["result"] as const,
    registers,
  });
  // Present from the start, so that a rate() or increase() sees the first failure.
  if (options.enabled()) for (const result of RESULTS) renewals.inc({ result }, 0);
  health.onRenewal((_, result) => renewals.inc({ result }));
}
