// Two replicas on Redis: a graceful stop of the leader hands the lease over only once its leader-only work has stopped
// (the inbox processor, the syncs in flight), so the standby never leads while the old leader still applies a webhook
// event (the same event applied twice, write-backs sent from both).
import { performance } from "node:perf_hooks";
import { afterEach, describe, expect, it } from "vitest";
import type { Config } from "../../src/config/schema.ts";
import { type App, createApp } from "../../src/daemon/app.ts";
import { silentLogger } from "../../src/log.ts";
import { startWorld, type World } from "../../src/simulator/world.ts";
import { deliver } from "../support/deliver.ts";
import { useRedisServer } from "../support/redis.ts";

const HOUR = 3_600_000;

async function waitFor(what: string, predicate: () => boolean | Promise<boolean>, timeoutMs: number): Promise<void> {
  const start = performance.now();
  while (!(await predicate())) {
    if (performance.now() - start > timeoutMs) throw new Error(`timed out after ${timeoutMs} ms waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 5));
  }
}

async function processedOk(app: App): Promise<number> {
  const metric = await app.registry.getSingleMetric("calbridge_webhook_processing_total")?.get();
  return (metric?.values ?? []).filter((v) => v.labels.result === "ok").reduce((n, v) => n + v.value, 0);
}

describe("graceful stop of the leader", () => {
  const redis = useRedisServer();
  const cleanups: (() => Promise<void>)[] = [];
  afterEach(async () => {
    for (const c of cleanups.splice(0).reverse()) await c().catch(() => {});
  });

  async function replica(world: World): Promise<{ app: App; stop(): Promise<void> }> {
    const config: Config = { ...world.config, store: { ...world.config.store, url: redis().url } };
    const app = await createApp(config, { logger: silentLogger, listen: "127.0.0.1:0" });
    let stopped: Promise<void> | undefined;
    const stop = () => (stopped ??= app.stop(8000));
    cleanups.push(stop);
    await app.start();
    return { app, stop };
  }

  it("does not let the standby lead while its own webhook events are still being applied", async () => {
    const world = await startWorld({
      therapists: ["th_a"],
      storeUrl: redis().url,
      configure: (c) => {
        c.store = { url: redis().url, lease_seconds: 2 };
        c.sync = { ...c.sync, reconcile_cron: "0 0 1 1 *" };
      },
    });
    cleanups.push(() => world.close());
    const a = await replica(world);
    const b = await replica(world);
    // The first replica holds the fresh lease key 2/3 of the lease before it leads (Redis may have lost a leader's key).
    await waitFor("the first replica to lead", () => a.app.lease.isLeader, 10_000); // a positive wait: 1333 ms of hold, then Redis round trips (seconds under load)
    expect([a.app.lease.isLeader, b.app.lease.isLeader]).toEqual([true, false]);
    await waitFor(
      "start-up reconciliation",
      async () => (await a.app.store.table<number>("meta").get("last_reconcile_success")) !== undefined,
      10_000,
    );
    await a.app.engine.idle();

    const start = new Date(Date.now() + 30 * HOUR);
    start.setUTCMinutes(0, 0, 0);
    const appt = world.booking.create({ therapist_id: "th_a", start_time: start.toISOString() }, { force: true });
    const event = [...world.booking.events]
      .reverse()
      .find(
        (e) =>
          e.type === "appointment.created" && (e.data as { object: { id?: unknown } }).object.id === String(appt.id),
      );
    // Every booking answer now takes 1.5 s: the leader's event stays in flight for a while.
    world.booking.faults.latencyMs = 1500;
    world.google.faults.latencyMs = 1500;
    expect((await deliver(a.app, event!)).status).toBe(200);
    await new Promise((r) => setTimeout(r, 200)); // the leader has taken it

    let aLeaderWorkStopped = false;
    const aProcessor = a.app.processor;
    void aProcessor.idle().then(() => (aLeaderWorkStopped = true));
    await Promise.resolve();
    const stopping = a.stop();
    await waitFor("the standby to lead", () => b.app.lease.isLeader, 5000);
    const overlapped = !aLeaderWorkStopped;
    await stopping;
    await waitFor("b to settle", async () => (await processedOk(b.app)) + (await processedOk(a.app)) >= 1, 10_000);
    await new Promise((r) => setTimeout(r, 3500));
    const total = (await processedOk(a.app)) + (await processedOk(b.app));
    expect({ overlapped, total }).toEqual({ overlapped: false, total: 1 });
  }, 40_000);
});
