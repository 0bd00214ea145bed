// Tests a Redis store that may evict keys (a maxmemory with maxmemory-policy allkeys-lru, say, a common cache
// setting). Once full, such a Redis drops the least used keys, which are calbridge's webhooks accepted and not yet
// processed (already acknowledged 2xx), its links, held write-backs and stored tokens, without a word; doctor said
// "ok". Now the daemon logs an error at every start and doctor fails its store check, both with the fix.
import { createClient } from "redis";
import { afterAll, afterEach, beforeAll, describe, expect, it } from "vitest";
import { runDoctor } from "../../src/cli/doctor.ts";
import { createApp } from "../../src/daemon/app.ts";
import { silentLogger } from "../../src/log.ts";
import { startWorld, type World } from "../../src/simulator/world.ts";
import { captureLog } from "../support/log-capture.ts";
import { redisTestsEnabled, useRedisServer } from "../support/redis.ts";

describe.skipIf(!redisTestsEnabled("redis-eviction"))("a Redis store that may evict keys", () => {
  const redis = useRedisServer();
  let admin: ReturnType<typeof createClient>;
  const cleanups: (() => Promise<unknown>)[] = [];
  beforeAll(async () => {
    admin = createClient({ url: redis().url });
    await admin.connect();
  });
  afterAll(async () => {
    await admin?.configSet({ maxmemory: "0", "maxmemory-policy": "noeviction" }).catch(() => {});
    await admin?.quit();
  });
  afterEach(async () => {
    for (const c of cleanups.splice(0).reverse()) await c().catch(() => {});
  });

  async function world(): Promise<World> {
    const w = await startWorld({
      therapists: ["th_a"],
      storeUrl: redis().url,
      configure: (c) => {
        c.store = { url: redis().url, lease_seconds: 2 };
      },
    });
    cleanups.push(() => w.close());
    return w;
  }

  const doctorStore = async (w: World) => {
    const app = await createApp(w.config, { logger: silentLogger, oneShot: true, readOnly: true });
    cleanups.push(() => app.stop(3000));
    return (await runDoctor(app)).find((c) => c.name === "store");
  };

  it("is said at start (error) and by doctor (fail), with the fix; noeviction, or no maxmemory, passes", async () => {
    await admin.configSet({ maxmemory: "64mb", "maxmemory-policy": "allkeys-lru" });
    const w = await world();
    const log = captureLog("info");
    const daemon = await createApp(w.config, { logger: log.logger, listen: "127.0.0.1:0", adminListen: "127.0.0.1:0" });
    cleanups.push(() => daemon.stop(3000));
    await daemon.start();
    expect(log.find((l) => String(l.msg).startsWith("Redis may evict calbridge's keys"))).toMatchObject({
      level: 50,
      msg: expect.stringContaining("maxmemory 67108864 bytes with maxmemory-policy allkeys-lru"),
      fix: expect.stringContaining("CONFIG SET maxmemory-policy noeviction"),
    });
    expect(await doctorStore(w)).toMatchObject({
      status: "fail",
      detail: expect.stringMatching(/^Redis may evict calbridge's keys: .*allkeys-lru/),
      fix: expect.stringContaining("maxmemory-policy noeviction"),
    });

    await admin.configSet({ "maxmemory-policy": "noeviction" });
    expect(await doctorStore(w)).toMatchObject({ status: "ok" });
    await admin.configSet({ maxmemory: "0", "maxmemory-policy": "allkeys-lru" }); // no limit: nothing is evicted
    expect(await doctorStore(w)).toMatchObject({ status: "ok" });
  });
});
