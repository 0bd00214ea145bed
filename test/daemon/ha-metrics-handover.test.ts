// Two replicas on Redis. The leader's reconciliations fail three times in a row (booking API down): it sets
// calbridge_reconcile_consecutive_failures to 3 and CalbridgeReconcileFailing rightly fires. Then it loses the lease (a
// network blip to Redis), the other replica leads, the booking API is back and the new leader's reconciliation
// succeeds. The former leader used to keep exporting 3 (only the leader's notifier sets it) and the rule took an
// unfiltered max() over both replicas: the alert kept firing on a healthy pair for as long as the standby ran (the
// same for calbridge_booking_webhook_endpoint_disabled). Now a replica that stops leading resets both gauges, and the
// rules and panels read the leader's. Also: the dashboard's rate-limit panel took the min over replicas, and a standby
// that has not asked the booking API reports -1 (unknown), so the panel showed -1.
import { afterEach, describe, expect, it } from "vitest";
import type { Config } from "../../src/config/schema.ts";
import { type App, createApp } from "../../src/daemon/app.ts";
import { silentLogger } from "../../src/log.ts";
import { startWorld } from "../../src/simulator/world.ts";
import { redisTestsEnabled, startProxy, useRedisServer } from "../support/redis.ts";
import {
  byInstance,
  rateLimitRemaining,
  reconcileFailing,
  scrape,
  shipped,
  webhookEndpointDisabled,
} from "./ha-metrics-support.ts";

const cleanups: (() => Promise<unknown>)[] = [];
afterEach(async () => {
  for (const c of cleanups.splice(0).reverse()) await c().catch(() => {});
});

async function daemon(config: Config): Promise<App> {
  const app = await createApp(config, {
    logger: silentLogger,
    listen: "127.0.0.1:0",
    adminListen: "127.0.0.1:0",
    bookingMaxRetries: 0,
  });
  let stopped: Promise<void> | undefined;
  cleanups.push(() => (stopped ??= app.stop(3000)));
  await app.start();
  return app;
}

async function flush(url: string) {
  const { createClient } = await import("redis");
  const client = createClient({ url });
  await client.connect();
  await client.flushAll();
  await client.quit();
}

describe("the evaluators", () => {
  it("are the shipped rules and panel queries", () => {
    expect(shipped("CalbridgeReconcileFailing")).toBe(reconcileFailing.expr);
    expect(reconcileFailing.expr).toContain(shipped("Reconciliations failed in a row/A"));
    expect(shipped("CalbridgeWebhookEndpointDisabled")).toBe(webhookEndpointDisabled.expr);
    expect(webhookEndpointDisabled.expr).toContain(shipped("Webhook endpoint disabled/A"));
    expect(shipped("Rate limit/A")).toBe(rateLimitRemaining.expr);
  });
});

describe.skipIf(!redisTestsEnabled("ha-metrics-handover"))("leader-only gauges after a lease hand-over", () => {
  const redis = useRedisServer();

  it("CalbridgeReconcileFailing clears once the new leader reconciles successfully", async () => {
    await flush(redis().url);
    const proxy = await startProxy(redis().port);
    cleanups.push(() => proxy.close());
    const world = await startWorld({
      therapists: ["th_a"],
      storeUrl: redis().url,
      configure: (c) => {
        c.store = { url: redis().url, lease_seconds: 2 };
        c.sync = { ...c.sync, reconcile_cron: "0 0 1 1 *" };
        // Not registered with the booking service: the leader's notifier finds it missing (endpoint_disabled 1).
        c.webhooks = { ...c.webhooks, public_url: "https://sync.clinic.test/webhooks/booking" };
      },
    });
    cleanups.push(() => world.close());
    const viaProxy: Config = { ...world.config, store: { ...world.config.store, url: proxy.url } };

    const a = await daemon(viaProxy);
    await expect.poll(() => a.lease.isLeader, { timeout: 5000 }).toBe(true);
    await a.reconcile().catch(() => {}); // the start-up run (joined)
    const b = await daemon(world.config);
    expect(b.lease.isLeader).toBe(false);

    // The booking API is down: three reconciliations fail in a row on the leader.
    world.booking.faults.errorRate = 1;
    for (let i = 0; i < 3; i++) await expect(a.reconcile()).rejects.toThrow();
    await expect
      .poll(async () => byInstance(await scrape(a, "a"), "calbridge_booking_webhook_endpoint_disabled").a, {
        timeout: 10_000, // not expect.poll's default second: HTTP scrapes and store reads under load
      })
      .toBe(1);
    const failing = [...(await scrape(a, "a")), ...(await scrape(b, "b"))];
    expect(byInstance(failing, "calbridge_reconcile_consecutive_failures").a).toBe(3);
    expect(reconcileFailing.evaluate(failing)).toBe(true);
    expect(webhookEndpointDisabled.evaluate(failing)).toBe(true);

    // A network blip between the leader and Redis: it loses the lease, the other replica takes over.
    proxy.freeze();
    await expect.poll(() => b.lease.isLeader, { timeout: 10_000 }).toBe(true);
    expect(a.lease.isLeader).toBe(false);
    proxy.thaw();

    // The booking API is back; the new leader's reconciliation succeeds.
    world.booking.faults.errorRate = 0;
    // The new leader's first run may have begun while the API still failed (on a loaded machine it had): joined, it
    // fails; the run after it is the one that succeeds.
    const report = await b.reconcile().catch(() => b.reconcile());
    expect(report.ok).toBe(true);
    // The new leader's notifier reads the endpoint's state from the store (it is still not registered).
    await expect
      .poll(async () => byInstance(await scrape(b, "b"), "calbridge_booking_webhook_endpoint_disabled").b, {
        timeout: 10_000, // not expect.poll's default second: HTTP scrapes and store reads under load
      })
      .toBe(1);
    expect(a.lease.isLeader).toBe(false);

    const samples = [...(await scrape(a, "a")), ...(await scrape(b, "b"))];
    expect({
      leaders: byInstance(samples, "calbridge_leader"),
      failures: byInstance(samples, "calbridge_reconcile_consecutive_failures"),
      reconcileFailing: reconcileFailing.evaluate(samples),
      endpointDisabled: byInstance(samples, "calbridge_booking_webhook_endpoint_disabled"),
      endpointAlert: webhookEndpointDisabled.evaluate(samples),
    }).toEqual({
      leaders: { a: 0, b: 1 },
      // The former leader no longer exports its last values; the new leader's are the pair's.
      failures: { a: 0, b: 0 },
      reconcileFailing: false,
      endpointDisabled: { a: 0, b: 1 },
      endpointAlert: true,
    });
  }, 60_000);

  it("the dashboard's booking rate-limit panel shows the leader's remaining budget, not the standby's -1", async () => {
    await flush(redis().url);
    const world = await startWorld({
      therapists: ["th_a"],
      storeUrl: redis().url,
      rateLimit: { limit: 1000 }, // the spec's X-RateLimit-* headers on every answer
      configure: (c) => {
        c.store = { url: redis().url, lease_seconds: 2 };
        c.sync = { ...c.sync, reconcile_cron: "0 0 1 1 *" };
      },
    });
    cleanups.push(() => world.close());
    const a = await daemon(world.config);
    await expect.poll(() => a.lease.isLeader, { timeout: 5000 }).toBe(true);
    const b = await daemon(world.config);
    await a.reconcile();
    const samples = [...(await scrape(a, "a")), ...(await scrape(b, "b"))];
    const remaining = byInstance(samples, "calbridge_booking_ratelimit_remaining");
    expect(remaining.a).toBeGreaterThan(0); // the leader knows the budget from X-RateLimit-Remaining
    expect(remaining.b).toBe(-1); // the standby asked nothing: unknown
    expect(rateLimitRemaining.evaluate(samples)).toBe(remaining.a);
  }, 60_000);
});
