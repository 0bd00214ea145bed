// calbridge_last_reconcile_success_timestamp_seconds after a restart: the last success is in the store (meta, where
// /status and /readyz read it), and the gauge used to be 0 until this process's first success. With the booking API
// down at the restart, CalbridgeReconcileStale (`time() - max(...) > 2700`, for 5m) fired 5 minutes after it instead of
// 45 minutes after the last real success.
import { afterEach, describe, expect, it } from "vitest";
import { type App, createApp } from "../../src/daemon/app.ts";
import { silentLogger } from "../../src/log.ts";
import { startWorld, type World } from "../../src/simulator/world.ts";
import { byInstance, scrape } from "./ha-metrics-support.ts";

const cleanups: (() => Promise<unknown>)[] = [];
afterEach(async () => {
  for (const c of cleanups.splice(0).reverse()) await c().catch(() => {});
});

async function daemon(world: World): Promise<{ app: App; stop: () => Promise<void> }> {
  const app = await createApp(world.config, {
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

describe("the last successful reconciliation on /metrics after a restart", () => {
  it("is the one in the store, also while the booking API is down", async () => {
    const world = await startWorld({
      therapists: ["th_a"],
      configure: (c) => {
        c.sync = { ...c.sync, reconcile_cron: "0 0 1 1 *" };
      },
    });
    cleanups.push(() => world.close());
    const first = await daemon(world);
    expect((await first.app.reconcile()).ok).toBe(true);
    const succeededAt = await first.app.store.table<number>("meta").get("last_reconcile_success");
    expect(succeededAt).toBeGreaterThan(0);
    await first.stop();

    world.booking.faults.errorRate = 1;
    const second = await daemon(world);
    await expect(second.app.reconcile()).rejects.toThrow();
    const gauge = byInstance(await scrape(second.app, "a"), "calbridge_last_reconcile_success_timestamp_seconds").a;
    expect(gauge).toBe(Math.floor(succeededAt! / 1000));
  }, 30_000);
});
