// Tests the daemon-level metrics: names, labels, and one registry per daemon.
import { Registry } from "prom-client";
import { describe, expect, it } from "vitest";
import { reconcileMaxAgeMs } from "../../src/daemon/health.ts";
import { createMetrics, EVENT_LOOP_SAMPLE_MS } from "../../src/daemon/metrics.ts";

describe("createMetrics", () => {
  it("samples the event loop's delay every EVENT_LOOP_SAMPLE_MS, and a stall of a few samples is measured whole", async () => {
    const registry = new Registry();
    createMetrics(registry);
    await new Promise((r) => setTimeout(r, 2 * EVENT_LOOP_SAMPLE_MS));
    const stallMs = 3 * EVENT_LOOP_SAMPLE_MS;
    const until = performance.now() + stallMs;
    while (performance.now() < until) {
      // the event loop is blocked, as by a long synchronous task
    }
    await new Promise((r) => setTimeout(r, 2 * EVENT_LOOP_SAMPLE_MS));
    const text = await registry.metrics();
    const max = Number(/^nodejs_eventloop_lag_max_seconds (\S+)$/m.exec(text)?.[1]);
    // The sample due during the stall fires at its end: late by the stall less at most one sampling period.
    expect(max * 1000).toBeGreaterThanOrEqual(stallMs - EVENT_LOOP_SAMPLE_MS - 5);
  });

  it("registers every daemon metric and the process defaults on the given registry", async () => {
    const registry = new Registry();
    const m = createMetrics(registry);
    expect(m.registry).toBe(registry);
    m.syncOperations.inc({ kind: "update", result: "error" });
    m.queueDepth.set({ queue: "sync" }, 4);
    m.deadLetters.set(2);
    m.lastReconcileSuccess.set(1_790_000_000);
    m.reconcileDuration.observe(3.2);
    m.writebacks.inc({ kind: "cancel", result: "ok" });
    m.therapistCredentialsOk.set({ therapist: "th_anna" }, 1);
    m.massDeleteGuardTripped.inc();
    m.leader.set(1);
    const text = await registry.metrics();
    for (const line of [
      'calbridge_sync_operations_total{kind="update",result="error"} 1',
      'calbridge_queue_depth{queue="sync"} 4',
      "calbridge_dead_letters 2",
      "calbridge_last_reconcile_success_timestamp_seconds 1790000000",
      "calbridge_reconcile_duration_seconds_count 1",
      'calbridge_writebacks_total{kind="cancel",result="ok"} 1',
      'calbridge_therapist_credentials_ok{therapist="th_anna"} 1',
      "calbridge_mass_delete_guard_tripped_total 1",
      "calbridge_leader 1",
      "# TYPE nodejs_eventloop_lag_seconds gauge",
    ]) {
      expect(text).toContain(line);
    }
  });

  it("uses a fresh registry by default, so two daemons in one process do not clash", () => {
    const a = createMetrics();
    const b = createMetrics();
    expect(a.registry).not.toBe(b.registry);
    expect(() => createMetrics(a.registry)).toThrow(/already been registered/);
  });
});

describe("reconcileMaxAgeMs", () => {
  it("is three times the longest gap of the reconcile schedule", async () => {
    expect(await reconcileMaxAgeMs("*/15 * * * *")).toBe(45 * 60_000);
    expect(await reconcileMaxAgeMs("0 * * * *", 2)).toBe(2 * 3_600_000);
  });
});
