// calbridge_last_reconcile_success_timestamp_seconds after a lease hand-over, as Prometheus reads it (a scrape of
// /metrics only, no /readyz or /status): the new leader exports the pair's last success from the store, not the value
// it read at its own start as a standby (CalbridgeReconcileStale would page 5 minutes after the hand-over while the
// booking API is down).
import { afterEach, describe, expect, it } from "vitest";
import type { Config } from "../../src/config/schema.ts";
import { type App, createApp } from "../../src/daemon/app.ts";
import { silentLogger } from "../../src/log.ts";
import { startWorld } from "../../src/simulator/world.ts";
import { redisTestsEnabled, useRedisServer } from "../support/redis.ts";
import { byInstance, scrape } from "./ha-metrics-support.ts";

const cleanups: (() => Promise<unknown>)[] = [];
afterEach(async () => {
  for (const c of cleanups.splice(0).reverse()) await c().catch(() => {});
});

async function daemon(config: Config): Promise<{ app: App; stop: () => Promise<void> }> {
  const app = await createApp(config, {
    logger: silentLogger,
    listen: "127.0.0.1:0",
    adminListen: "127.0.0.1:0",
    bookingMaxRetries: 0,
  });
  let stopped: Promise<void> | undefined;
  const stop = () => (stopped ??= app.stop(3000));
  cleanups.push(stop);
  await app.start();
  return { app, stop };
}

async function flush(url: string) {
  const { createClient } = await import("redis");
  const client = createClient({ url });
  await client.connect();
  await client.flushAll();
  await client.quit();
}

describe.skipIf(!redisTestsEnabled("ha-metrics-last-success"))(
  "last reconcile success after a lease hand-over (scrape only)",
  () => {
    const redis = useRedisServer();

    it("the new leader exports the pair's last success from the store, not the one from its own start", async () => {
      await flush(redis().url);
      const world = await startWorld({
        therapists: ["th_a"],
        storeUrl: redis().url,
        configure: (c) => {
          c.store = { url: redis().url, lease_seconds: 2 };
          c.sync = { ...c.sync, reconcile_cron: "0 0 1 1 *" };
        },
      });
      cleanups.push(() => world.close());
      const a = await daemon(world.config);
      await expect.poll(() => a.app.lease.isLeader, { timeout: 5000 }).toBe(true);
      expect((await a.app.reconcile()).ok).toBe(true);
      const b = await daemon(world.config);
      expect(b.app.lease.isLeader).toBe(false);

      // Later, the leader reconciles successfully again (the standby only scraped, as Prometheus does).
      await new Promise((r) => setTimeout(r, 2100));
      expect((await a.app.reconcile()).ok).toBe(true);
      const lastSuccess = await a.app.store.table<number>("meta").get("last_reconcile_success");

      // The leader stops (a deploy); the booking API is down when the standby takes over.
      world.booking.faults.errorRate = 1;
      await a.stop();
      await expect.poll(() => b.app.lease.isLeader, { timeout: 10_000 }).toBe(true);
      await b.app.reconcile().catch(() => {});

      const gauge = byInstance(await scrape(b.app, "b"), "calbridge_last_reconcile_success_timestamp_seconds").b;
      expect(gauge).toBe(Math.floor(lastSuccess! / 1000));
    }, 60_000);
  },
);
