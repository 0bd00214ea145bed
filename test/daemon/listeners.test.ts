// The daemon's two listeners, wired by createApp against a simulated world: the public one serves the booking
// webhook, the Google push route and /healthz and nothing else; the admin one serves /status, /status.html, /metrics,
// /readyz and /healthz, behind a bearer token when one is configured. /readyz checks that the store still takes
// writes and that its disk has room, and says which check fails.
import { createClient } from "redis";
import { afterEach, describe, expect, it } from "vitest";
import type { ConfigInput } from "../../src/config/schema.ts";
import { type App, createApp } from "../../src/daemon/app.ts";
import { silentLogger } from "../../src/log.ts";
import { startWorld, WORLD_WEBHOOK_SECRET, type World } from "../../src/simulator/world.ts";
import { sign } from "../../src/webhooks/signature.ts";
import { captureLog } from "../support/log-capture.ts";
import { redisTestsEnabled, useRedisServer } from "../support/redis.ts";

const cleanups: (() => Promise<void>)[] = [];
afterEach(async () => {
  for (const c of cleanups.splice(0).reverse()) await c().catch(() => {});
});

async function daemon(
  configure: (c: ConfigInput) => void = () => {},
  options: { storeUrl?: string; adminListen?: string; logger?: ReturnType<typeof captureLog>["logger"] } = {},
): Promise<{ world: World; app: App }> {
  const world = await startWorld({
    therapists: ["th_anna"],
    configure,
    ...(options.storeUrl ? { storeUrl: options.storeUrl } : {}),
  });
  cleanups.push(() => world.close());
  const app = await createApp(world.config, {
    logger: options.logger ?? silentLogger,
    oneShot: true,
    listen: "127.0.0.1:0",
    ...(options.adminListen ? { adminListen: options.adminListen } : {}),
  });
  cleanups.push(() => app.stop(2000));
  await app.start();
  return { world, app };
}

const ADMIN_PATHS = ["/status", "/status.html", "/metrics", "/readyz"];

async function readyz(app: App, headers: Record<string, string> = {}) {
  const res = await fetch(`${app.admin!.url}/readyz`, { headers });
  return {
    status: res.status,
    body: (await res.json()) as { status: string; checks: Record<string, { ok: boolean; detail: string }> },
  };
}

describe("two listeners", () => {
  it("the public one serves the webhook, push and /healthz only; the admin routes are 404 there", async () => {
    const { world, app } = await daemon();
    const pub = app.http!.url;
    expect(app.admin!.url).not.toBe(pub);
    for (const path of ADMIN_PATHS) {
      const res = await fetch(`${pub}${path}`);
      expect(res.status, path).toBe(404);
      expect(((await res.json()) as { error: string }).error).toBe("not_found");
    }
    expect((await fetch(`${pub}/healthz`)).status).toBe(200);
    // The webhook route works there...
    const body = JSON.stringify({
      id: "evt_pub",
      type: "customer.updated",
      created_at: new Date().toISOString(),
      data: { object: { id: "cus_1" } },
    });
    const signature = sign(body, WORLD_WEBHOOK_SECRET, Math.floor(Date.now() / 1000));
    const delivered = await fetch(`${pub}${world.config.webhooks.path}`, {
      method: "POST",
      headers: { "content-type": "application/json", "x-service-signature": signature },
      body,
    });
    expect(delivered.status).toBe(200);
    // ...and the push route (here without push configured: a notification names no channel we know).
    expect((await fetch(`${pub}/webhooks/google`, { method: "POST" })).status).toBe(400);
  });

  it("the admin one serves /status, /status.html, /metrics, /readyz and /healthz, and no webhook route", async () => {
    const { world, app } = await daemon();
    const admin = app.admin!.url;
    for (const path of [...ADMIN_PATHS, "/healthz"]) {
      const res = await fetch(`${admin}${path}`);
      expect(res.status, path).toBe(200);
      await res.body?.cancel();
    }
    const status = (await (await fetch(`${admin}/status`)).json()) as { therapists: { therapistId: string }[] };
    expect(status.therapists.map((t) => t.therapistId)).toEqual(["th_anna"]);
    const res = await fetch(`${admin}${world.config.webhooks.path}`, { method: "POST", body: "{}" });
    expect(res.status).toBe(404);
  });

  it("asks for the configured bearer token on every admin route but /healthz", async () => {
    const token = "admin-token-0123456789";
    const { app } = await daemon((c) => {
      c.admin = { listen: "127.0.0.1:0", bearer_token: token };
    });
    for (const path of ADMIN_PATHS) {
      const refused = await fetch(`${app.admin!.url}${path}`);
      expect(refused.status, path).toBe(401);
      expect(refused.headers.get("www-authenticate")).toMatch(/^Bearer /);
      const ok = await fetch(`${app.admin!.url}${path}`, { headers: { authorization: `Bearer ${token}` } });
      expect(ok.status, path).toBe(200);
      await ok.body?.cancel();
    }
    expect((await fetch(`${app.admin!.url}/healthz`)).status).toBe(200);
  });

  it("warns at start when the admin listener is reachable from the network without a token", async () => {
    const log = captureLog("info");
    await daemon(() => {}, { adminListen: "0.0.0.0:0", logger: log.logger });
    const warning = log.find((l) => String(l.msg).includes("admin listener is reachable"));
    expect(warning).toMatchObject({ level: 40, listen: "0.0.0.0:0" });
  });
});

describe("readiness of a running daemon", () => {
  it("is not ready when the store's folder has less free space than store.min_free_mb, and says so", async () => {
    const { app } = await daemon((c) => {
      c.store = { ...c.store, min_free_mb: 1024 ** 3 }; // a petabyte: more than any test machine has free
    });
    const { status, body } = await readyz(app);
    expect(status).toBe(503);
    expect(body.checks.disk).toMatchObject({ ok: false, detail: expect.stringMatching(/below store.min_free_mb/) });
    expect(body.checks.store!.ok).toBe(true);
    expect(body.checks.store_write!.ok).toBe(true);
  });

  it("is ready with room on the disk, the store writable", async () => {
    const { app } = await daemon();
    const { status, body } = await readyz(app);
    expect(status, JSON.stringify(body)).toBe(200);
    expect(body.checks.disk!.detail).toMatch(/MiB free in /);
    expect(body.checks.store_write).toEqual({ ok: true, detail: "store took a write" });
  });
});

describe.skipIf(!redisTestsEnabled("readiness"))("readiness with a Redis store that refuses writes", () => {
  const redis = useRedisServer();

  it("is not ready when Redis answers PING but refuses writes (maxmemory reached)", async () => {
    const { app } = await daemon(() => {}, { storeUrl: redis().url });
    expect((await readyz(app)).status).toBe(200);
    const client = createClient({ url: redis().url });
    await client.connect();
    cleanups.push(async () => {
      await client.configSet("maxmemory", "0");
      await client.quit();
    });
    // With no eviction policy, Redis refuses every write over maxmemory ("OOM command not allowed ...").
    await client.configSet({ maxmemory: "1", "maxmemory-policy": "noeviction" });
    const { status, body } = await readyz(app);
    expect(status).toBe(503);
    expect(body.checks.store).toEqual({ ok: true, detail: "store answered" });
    expect(body.checks.store_write).toMatchObject({
      ok: false,
      detail: expect.stringMatching(/^store refuses writes: .*OOM/),
    });
    expect(body.checks.disk).toEqual({ ok: true, detail: "no local store file" });
  });
});
