// Redis going away mid-run: store operations fail within a couple of seconds instead of waiting in node-redis'
// offline queue, so a webhook is answered 503 at once (its sender retries) and is accepted again once Redis is back.
// Two ways to lose Redis: the server stops (the connection closes), or the network freezes (it stays open, silent).
import { performance } from "node:perf_hooks";
import { afterEach, describe, expect, it } from "vitest";
import type { Config } from "../../src/config/schema.ts";
import { type App, createApp } from "../../src/daemon/app.ts";
import { silentLogger } from "../../src/log.ts";
import { startWorld, type World } from "../../src/simulator/world.ts";
import { openStore, REDIS_COMMAND_TIMEOUT_MS, StoreUnavailableError } from "../../src/store/store.ts";
import { deliver } from "../support/deliver.ts";
import { redisTestsEnabled, startProxy, startRedis } from "../support/redis.ts";

const cleanups: (() => Promise<unknown>)[] = [];
afterEach(async () => {
  for (const cleanup of cleanups.splice(0).reverse()) await cleanup().catch(() => {});
});

async function timed<T>(work: Promise<T>): Promise<{ value?: T; error?: unknown; ms: number }> {
  const start = performance.now();
  try {
    const value = await work;
    return { value, ms: performance.now() - start };
  } catch (error) {
    return { error, ms: performance.now() - start };
  }
}

let n = 0;
/** A signed event the daemon only acknowledges (a payment): what is measured is the answer, not the processing. */
const payment = () => {
  n++;
  return {
    id: `evt_outage_${n}`,
    type: "payment.completed",
    created_at: new Date().toISOString(),
    data: { object: {} },
  };
};
const status = async (app: App) => (await deliver(app, payment())).status;

describe.skipIf(!redisTestsEnabled("redis-outage"))("Redis down mid-run", () => {
  it("store operations fail fast while Redis is away, batched writes and insert-if-absent included", async () => {
    const server = await startRedis();
    cleanups.push(() => server.stop());
    const proxy = await startProxy(server.port);
    cleanups.push(() => proxy.close());
    const store = await openStore(proxy.url, { commandTimeoutMs: 500 });
    cleanups.push(() => store.close());
    const inbox = store.table<{ n: number }>("inbox");
    await inbox.set("a", { n: 1 });

    proxy.freeze(); // the connection stays open, nothing comes back
    const whileFrozen: (() => Promise<unknown>)[] = [
      () => inbox.get("a"),
      () => inbox.set("b", { n: 2 }),
      () => inbox.setMany([{ key: "c", value: { n: 3 } }]),
      () => inbox.addMany([{ key: "d", value: { n: 4 } }]),
      () => store.ping(),
    ];
    for (const op of whileFrozen) {
      const r = await timed(op());
      expect(r.error).toBeInstanceOf(StoreUnavailableError);
      expect(String(r.error)).toMatch(/did not answer within 500 ms/);
      expect(r.ms).toBeLessThan(1500);
    }
    proxy.thaw();
    expect(await inbox.get("a")).toEqual({ n: 1 });

    await server.stop(); // the connection closes: the client knows at once
    await new Promise((r) => setTimeout(r, 100));
    const whileStopped: (() => Promise<unknown>)[] = [
      () => inbox.get("a"),
      () => inbox.addMany([{ key: "e", value: { n: 5 } }]),
    ];
    for (const op of whileStopped) {
      const r = await timed(op());
      expect(r.error).toBeInstanceOf(StoreUnavailableError);
      expect(String(r.error)).toMatch(/is not connected/);
      expect(r.ms).toBeLessThan(200);
    }
  });

  it("answers a webhook 503 within a couple of seconds, frozen or stopped, and 200 again once Redis is back", async () => {
    const server = await startRedis();
    cleanups.push(() => server.stop());
    const proxy = await startProxy(server.port);
    cleanups.push(() => proxy.close());
    const world: World = await startWorld({ therapists: 1, storeUrl: proxy.url });
    cleanups.push(() => world.close());
    const config: Config = { ...world.config, sync: { ...world.config.sync, reconcile_cron: "0 0 1 1 *" } };
    const app = await createApp(config, { logger: silentLogger, listen: "127.0.0.1:0" });
    cleanups.push(() => app.stop(2000));
    await app.start();
    expect(await status(app)).toBe(200);

    proxy.freeze();
    const frozen = await timed(status(app));
    expect(frozen.value).toBe(503);
    expect(frozen.ms).toBeLessThan(REDIS_COMMAND_TIMEOUT_MS + 1500);
    proxy.thaw();
    expect(await status(app)).toBe(200);

    await server.stop();
    await new Promise((r) => setTimeout(r, 100));
    const stopped = await timed(status(app));
    expect(stopped.value).toBe(503);
    expect(stopped.ms).toBeLessThan(1000);
  });
});
