// Owns the daemon-level Prometheus metrics (sync outcomes, queues, reconciliation, write-backs, credentials,
// leadership) plus the process defaults; modules with metrics of their own register them on the same registry.
import { Counter, collectDefaultMetrics, Gauge, Histogram, Registry } from "prom-client";

export interface DaemonMetrics {
  registry: Registry;
  /**
   * What the syncs did, step by step: each calendar write (create, update, delete, restore), a move or adoption, a
   * new event generation, each a step of its own (a reassignment is a create, a delete and a move); and each failed
   * run as kind=error with result permanent|unavailable|transient.
   */
  syncOperations: Counter<"kind" | "result">;
  /** Items waiting per queue (webhooks, sync, writeback, reconcile, …). */
  queueDepth: Gauge<"queue">;
  /** Items parked in the dead-letter table. */
  deadLetters: Gauge;
  lastReconcileSuccess: Gauge;
  reconcileDuration: Histogram;
  /** Pushes to the booking service; kind: reschedule|cancel, result: ok|rejected|error. */
  writebacks: Counter<"kind" | "result">;
  /** 1 while a therapist's Google credentials work, 0 when they fail (read from `credentials` at every scrape). */
  therapistCredentialsOk: Gauge<"therapist">;
  /**
   * Where calbridge_therapist_credentials_ok is read from at every scrape: each mapped therapist whose state is known,
   * and whether their credentials work now (the daemon's calendars set it). So the series follows a connect, a reload
   * or a probe at once on every replica, a standby too, instead of keeping the value of whatever last set it.
   * Unset, the gauge keeps what was set on it.
   */
  credentials: { read?: () => Iterable<readonly [therapist: string, ok: boolean]> };
  massDeleteGuardTripped: Counter;
  writebacksHeld: Gauge<"therapist">;
  writebackGuardTripped: Counter<"therapist">;
  /** 1 on the replica that holds the leader lease. */
  leader: Gauge;
}

/**
 * How often the event loop's delay is sampled for the `nodejs_eventloop_lag_*` gauges (prom-client's default is 10
 * ms). Each sample is a timer firing, a wake-up of the otherwise idle process: at 10 ms they were 100 a second and
 * about half of the idle daemon's CPU time (1,000 therapists, push on: 1.9-2.6% of a core; strace: 6,064 epoll waits
 * in 20 s, each a 10 ms timeout). At 100 ms a stall of 100 ms or more is still measured whole, and a shorter one
 * when a sample falls in it.
 */
export const EVENT_LOOP_SAMPLE_MS = 100;

/**
 * Creates the metrics on `registry` (a fresh one by default, so tests and two daemons in one process never clash).
 * Call once per registry: prom-client refuses a second metric with the same name.
 */
export function createMetrics(registry: Registry = new Registry()): DaemonMetrics {
  collectDefaultMetrics({ register: registry, eventLoopMonitoringPrecision: EVENT_LOOP_SAMPLE_MS });
  const registers = [registry];
  const credentials: DaemonMetrics["credentials"] = {};
  return {
    registry,
    credentials,
    syncOperations: new Counter({
      name: "calbridge_sync_operations_total",
      help: "Steps of appointment syncs by kind (each calendar write, a move, a new generation; a reassignment is a create, a delete and a move) and result (ok; kind=error: permanent, unavailable, transient).",
      labelNames: ["kind", "result"] as const,
      registers,
    }),
    queueDepth: new Gauge({
      name: "calbridge_queue_depth",
      help: "Items waiting in each work queue.",
      labelNames: ["queue"] as const,
      registers,
    }),
    deadLetters: new Gauge({
      name: "calbridge_dead_letters",
      help: "Items in the dead-letter table that need attention.",
      registers,
    }),
    lastReconcileSuccess: new Gauge({
      name: "calbridge_last_reconcile_success_timestamp_seconds",
      help: "Unix time of the last successful full reconciliation.",
      registers,
    }),
    reconcileDuration: new Histogram({
      name: "calbridge_reconcile_duration_seconds",
      help: "Duration of full reconciliation runs.",
      buckets: [0.5, 1, 2, 5, 10, 30, 60, 120, 300, 600, 1800],
      registers,
    }),
    writebacks: new Counter({
      name: "calbridge_writebacks_total",
      help: "Calendar changes pushed back to the booking service, by kind and result.",
      labelNames: ["kind", "result"] as const,
      registers,
    }),
    therapistCredentialsOk: new Gauge({
      name: "calbridge_therapist_credentials_ok",
      help: "1 when the therapist's Google credentials work, 0 when they fail.",
      labelNames: ["therapist"] as const,
      registers,
      collect() {
        const read = credentials.read;
        if (!read) return;
        this.reset();
        for (const [therapist, ok] of read()) this.set({ therapist }, ok ? 1 : 0);
      },
    }),
    massDeleteGuardTripped: new Counter({
      name: "calbridge_mass_delete_guard_tripped_total",
      help: "Reconciliations stopped because they would delete more than sync.max_delete_ratio of managed events.",
      registers,
    }),
    writebacksHeld: new Gauge({
      name: "calbridge_writebacks_held",
      help: "A therapist's calendar changes held by the write-back guard, waiting for `calbridge writeback held --apply | --restore`.",
      labelNames: ["therapist"],
      registers,
    }),
    writebackGuardTripped: new Counter({
      name: "calbridge_writeback_guard_tripped_total",
      help: "Times a therapist's write-back hold opened (a burst of cancellations or moves from one calendar).",
      labelNames: ["therapist"],
      registers,
    }),
    leader: new Gauge({
      name: "calbridge_leader",
      help: "1 on the daemon that holds the leader lease (0 on a standby; always 1 with a memory store).",
      registers,
    }),
  };
}
