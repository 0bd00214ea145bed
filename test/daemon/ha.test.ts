// Tests high availability over a real redis-server: two Apps (the production wiring) share one store; exactly one
// leads; both accept signed webhooks into the shared inbox and the leader applies them; when the leader is cut off
// (its Redis traffic frozen mid-lease, as a crash or a partition would, without releasing the lease) the standby
// takes over within 5/3 of the lease and applies what arrives afterwards; no event is applied twice.
import { performance } from "node:perf_hooks";
import { afterEach, describe, expect, it } from "vitest";
import { eventIdFor } from "../../src/calendar/ids.ts";
import type { Config } from "../../src/config/schema.ts";
import { type App, createApp } from "../../src/daemon/app.ts";
import { silentLogger } from "../../src/log.ts";
import { startWorld, type World } from "../../src/simulator/world.ts";
import { deliver } from "../support/deliver.ts";
import { type FreezableProxy, redisTestsEnabled, startProxy, useRedisServer } from "../support/redis.ts";

const LEASE_SECONDS = 2;
const HOUR = 3_600_000;

async function waitFor(what: string, predicate: () => boolean | Promise<boolean>, timeoutMs: number): Promise<number> {
  const start = performance.now();
  while (!(await predicate())) {
    if (performance.now() - start > timeoutMs) throw new Error(`timed out after ${timeoutMs} ms waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 10));
  }
  return performance.now() - start;
}

/** Events a replica's inbox processor finished with `result` (calbridge_webhook_processing_total). */
async function processed(app: App, result: string): Promise<number> {
  const metric = await app.registry.getSingleMetric("calbridge_webhook_processing_total")?.get();
  return (metric?.values ?? []).filter((v) => v.labels.result === result).reduce((n, v) => n + v.value, 0);
}

/** Events applied and marked done (result="ok"). */
const processedOk = (app: App) => processed(app, "ok");

describe.skipIf(!redisTestsEnabled("ha"))("two replicas sharing one Redis store", () => {
  const redis = useRedisServer();
  const cleanups: (() => Promise<void>)[] = [];
  afterEach(async () => {
    for (const cleanup of cleanups.splice(0).reverse()) await cleanup().catch(() => {});
  });

  async function replica(world: World): Promise<{ app: App; proxy: FreezableProxy; stop(): Promise<void> }> {
    // Each replica reaches Redis through its own proxy, so one can be cut off while the other stays connected.
    const proxy = await startProxy(redis().port);
    const config: Config = { ...world.config, store: { ...world.config.store, url: proxy.url } };
    const app = await createApp(config, { logger: silentLogger, listen: "127.0.0.1:0" });
    let stopped: Promise<void> | undefined;
    const stop = () => {
      proxy.thaw();
      stopped ??= app.stop(3000);
      return stopped;
    };
    cleanups.push(async () => {
      await stop();
      await proxy.close();
    });
    await app.start();
    return { app, proxy, stop };
  }

  /** A new booking (no webhook endpoint is registered, so nothing is delivered by itself) and its created event. */
  function book(world: World, therapistId: string, hoursAhead: number): { id: string; event: Record<string, unknown> } {
    const start = new Date(Date.now() + hoursAhead * HOUR);
    start.setUTCMinutes(0, 0, 0);
    const a = world.booking.create({ therapist_id: therapistId, start_time: start.toISOString() }, { force: true });
    const id = String(a.id);
    const event = [...world.booking.events]
      .reverse()
      .find((e) => e.type === "appointment.created" && (e.data as { object: { id?: unknown } }).object.id === id);
    if (!event) throw new Error(`the simulator emitted no appointment.created for ${id}`);
    return { id, event };
  }

  /** Every event (cancelled ones too) in the therapist's calendar that mirrors the appointment. */
  function mirrors(world: World, therapistId: string, appointmentId: string): Record<string, unknown>[] {
    return world.google.events(world.calendarOf(therapistId)).filter((e) => {
      const props = (e.extendedProperties as { private?: Record<string, string> } | undefined)?.private;
      return props?.calbridge_appointment_id === appointmentId;
    });
  }

  const lastReconcile = (app: App) => app.store.table<number>("meta").get("last_reconcile_success");

  it("elects one leader, shares the inbox, fails over within the lease, and applies each event once", async () => {
    const world = await startWorld({
      therapists: ["th_a", "th_b"],
      storeUrl: redis().url,
      configure: (c) => {
        c.store = { url: redis().url, lease_seconds: LEASE_SECONDS };
        // No cron run during the test: after the start-up reconciliation, only webhooks bring new bookings in.
        c.sync = { ...c.sync, reconcile_cron: "0 0 1 1 *" };
      },
    });
    cleanups.push(() => world.close());

    // --- exactly one leader
    const a = await replica(world);
    const b = await replica(world);
    // The first replica holds the fresh lease key 2/3 of the lease before it leads (Redis may have lost a leader's key).
    await waitFor("the first replica to lead", () => a.app.lease.isLeader, 10_000); // a positive wait: 1333 ms of hold, then Redis round trips (seconds under load)
    expect(b.app.lease.isLeader).toBe(false);
    await new Promise((r) => setTimeout(r, LEASE_SECONDS * 1000)); // a whole lease: still one leader
    expect([a.app.lease.isLeader, b.app.lease.isLeader]).toEqual([true, false]);
    expect((await a.app.status()).leader).toBe(true);
    expect((await b.app.status()).leader).toBe(false);
    await waitFor(
      "the leader's start-up reconciliation",
      async () => (await lastReconcile(a.app)) !== undefined,
      10_000,
    );

    // The standby is ready on the leader's reconciliations: each probe reads the time from the shared store.
    expect((await a.app.reconcile()).ok).toBe(true);
    const reconciledAt = await lastReconcile(a.app);
    const ready = await fetch(`${b.app.admin!.url}/readyz`);
    const readyBody = (await ready.json()) as { checks: { reconcile: { ok: boolean; detail: string } } };
    expect(ready.status).toBe(200);
    expect(readyBody.checks.reconcile.detail).toMatch(/^last successful reconciliation \d+s ago/);
    expect((await b.app.status()).lastReconcileAt).toBe(new Date(reconciledAt!).toISOString());

    // --- both accept webhooks into the shared inbox; the leader applies them
    const x = book(world, "th_a", 30);
    const y = book(world, "th_b", 54);
    expect(await deliver(b.app, x.event)).toEqual({ status: 200, body: { received: true } });
    expect(await deliver(a.app, y.event)).toEqual({ status: 200, body: { received: true } });
    // The same delivery reaching the other replica (a retry routed elsewhere) is a duplicate of the shared inbox.
    expect(await deliver(a.app, x.event)).toEqual({ status: 200, body: { received: true, duplicate: true } });
    await waitFor(
      "both webhooks applied by the leader",
      () => mirrors(world, "th_a", x.id).length === 1 && mirrors(world, "th_b", y.id).length === 1,
      5000,
    );
    await waitFor("the leader to mark both done", async () => (await processedOk(a.app)) === 2, 5000);
    expect(await processedOk(b.app)).toBe(0);

    // A burst: done marks are then written several to a round trip (group commit), which must work on Redis too.
    const burst = Array.from({ length: 24 }, (_, i) => book(world, i % 2 ? "th_a" : "th_b", 200 + i));
    const answers = await Promise.all(burst.map((appt) => deliver(b.app, appt.event)));
    expect(answers.every((r) => r.status === 200)).toBe(true);
    await waitFor("the leader to apply and mark done the burst", async () => (await processedOk(a.app)) === 26, 10_000);
    expect(await processed(a.app, "store_error")).toBe(0);
    for (const [i, appt] of burst.entries()) expect(mirrors(world, i % 2 ? "th_a" : "th_b", appt.id)).toHaveLength(1);
    const before = await lastReconcile(a.app);

    // --- the leader is cut off without releasing the lease: the standby takes over within 5/3 of the lease
    a.proxy.freeze();
    const frozenAt = performance.now();
    let overlap = false;
    await waitFor(
      "the standby to take over",
      () => {
        if (a.app.lease.isLeader && b.app.lease.isLeader) overlap = true;
        return b.app.lease.isLeader;
      },
      LEASE_SECONDS * 1000 + 3000,
    );
    const takeoverMs = performance.now() - frozenAt;
    expect(overlap).toBe(false);
    expect(a.app.lease.isLeader).toBe(false);
    // The key lapses within the lease; the standby then holds the fresh key 2/3 of the lease before it leads.
    expect(takeoverMs).toBeLessThan((LEASE_SECONDS * 1000 * 5) / 3 + 750);

    // The new leader reconciles once at its start; then a booking reaches the calendar only by its webhook.
    await waitFor("the new leader's reconciliation", async () => (await lastReconcile(b.app)) !== before, 10_000);
    const z = book(world, "th_a", 78);
    expect(await deliver(b.app, z.event)).toEqual({ status: 200, body: { received: true } });
    await waitFor("the new leader to apply the webhook", () => mirrors(world, "th_a", z.id).length === 1, 5000);
    await waitFor("the new leader to mark it done", async () => (await processedOk(b.app)) === 1, 5000);

    // --- the old leader comes back as a standby, and leads again (with a fresh inbox processor) when it is its turn
    a.proxy.thaw();
    await new Promise((r) => setTimeout(r, LEASE_SECONDS * 500));
    expect([a.app.lease.isLeader, b.app.lease.isLeader]).toEqual([false, true]);
    await b.stop(); // a graceful stop releases the lease: no wait for it to lapse
    const beforeReelection = await lastReconcile(a.app);
    // A released lease is taken at the standby's next attempt (every third of the lease: 667 ms). A lapsed one would
    // take at least 2.6 s: the key outlives b's last renewal (at most 667 ms before the stop) by 2 s, then the standby
    // holds 2/3 of the lease before leading. 1.5 s tells the two apart and leaves a loaded machine room (1 s was
    // missed once).
    await waitFor("the old leader to lead again", () => a.app.lease.isLeader, 1500);
    await waitFor(
      "the re-elected leader's reconciliation",
      async () => (await lastReconcile(a.app)) !== beforeReelection,
      10_000,
    );
    const w = book(world, "th_b", 102);
    expect(await deliver(a.app, w.event)).toEqual({ status: 200, body: { received: true } });
    await waitFor("the re-elected leader to apply the webhook", () => mirrors(world, "th_b", w.id).length === 1, 5000);
    await waitFor("the re-elected leader to mark it done", async () => (await processedOk(a.app)) === 27, 5000);

    // --- once each: one event per appointment, at the booked time, and four events processed in all
    for (const [t, appt] of [
      ["th_a", x],
      ["th_b", y],
      ["th_a", z],
      ["th_b", w],
    ] as const) {
      const events = mirrors(world, t, appt.id);
      expect(events.map((e) => [e.id, e.status])).toEqual([[eventIdFor(appt.id), "confirmed"]]);
    }
    expect((await processedOk(a.app)) + (await processedOk(b.app))).toBe(28);
    const left: string[] = [];
    for await (const entry of a.app.inbox.pending()) left.push(entry.id);
    expect(left).toEqual([]);
  }, 40_000);
});
