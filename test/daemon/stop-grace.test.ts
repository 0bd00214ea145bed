// An orderly stop keeps to its grace (README, Deployment: SIGTERM gives work in progress 8 s, closes the store and
// exits 0 within Docker's 10-second stop deadline) however slowly Google or the store answer, leaves what it could not
// finish in the inbox, and a stop during a reconciliation is not a failed reconciliation.
import { afterEach, describe, expect, it } from "vitest";
import { type App, createApp } from "../../src/daemon/app.ts";
import { NotifyLedger } from "../../src/notify/ledger.ts";
import { startWorld, WORLD_WEBHOOK_SECRET, type World } from "../../src/simulator/world.ts";
import { openStore } from "../../src/store/store.ts";
import { WebhookInbox } from "../../src/webhooks/inbox.ts";
import { type Daemon, daemonFor } from "../chaos/daemon.ts";
import { captureLog } from "../support/log-capture.ts";
import { type FreezableProxy, type RedisServer, redisTestsEnabled, startProxy, startRedis } from "../support/redis.ts";

const DAY = 86_400_000;
const cleanups: (() => Promise<unknown>)[] = [];
afterEach(async () => {
  for (const c of cleanups.splice(0).reverse()) await c().catch(() => {});
});

async function waitFor(what: string, predicate: () => boolean | Promise<boolean>, timeoutMs = 15_000) {
  const until = Date.now() + timeoutMs;
  while (!(await predicate())) {
    if (Date.now() > until) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 25));
  }
}

function book(world: World, therapistId: string, n: number): void {
  const start = new Date(Date.now() + (1 + (n % 60)) * DAY);
  start.setUTCHours(6 + (n % 12), 0, 0, 0);
  world.booking.create({ therapist_id: therapistId, start_time: start.toISOString() }, { force: true });
}

/** SIGTERM; resolves with the exit code and how long the process took to exit. */
async function sigterm(daemon: Daemon): Promise<{ code: number | null; ms: number }> {
  const t0 = Date.now();
  const code = await daemon.stop(15_000);
  return { code, ms: Date.now() - t0 };
}

const msgs = (daemon: Daemon) =>
  daemon.lines().flatMap((l) => {
    try {
      return [JSON.parse(l) as { msg?: string; level?: number; unfinished?: string[] }];
    } catch {
      return [];
    }
  });

describe("SIGTERM to `calbridge run` keeps to the 8-second grace", () => {
  it("while Google answers in 12 s: exits 0 within 10 s, store closed, the unfinished webhooks left in the inbox", async () => {
    const world = await startWorld({ therapists: ["th_anna", "th_ben"] });
    cleanups.push(() => world.close());
    const daemon = await daemonFor(world, { name: "slow google", env: { LOG_LEVEL: "info" } });
    cleanups.push(() => daemon.stop(1000));
    await daemon.start();
    world.booking.addWebhookEndpoint({ url: daemon.webhookUrl, secret: WORLD_WEBHOOK_SECRET, events: ["*"] });
    await waitFor("the start's reconciliation", () => msgs(daemon).some((m) => m.msg === "reconciliation finished"));

    // Google slows down (below the client's own 30 s limit) while a burst of bookings arrives as webhooks.
    world.google.faults.latencyMs = 12_000;
    for (let i = 0; i < 10; i++) book(world, i % 2 ? "th_anna" : "th_ben", i);
    await world.booking.webhooksIdle();
    expect(world.booking.deliveries.filter((d) => d.state !== "delivered")).toEqual([]);
    await new Promise((r) => setTimeout(r, 500)); // their syncs are waiting on Google

    const { code, ms } = await sigterm(daemon);
    const lines = msgs(daemon);
    expect({
      code,
      within10s: ms < 10_000,
      graceKept: ms >= 7_500,
      stopped: lines.some((m) => m.msg === "calbridge stopped"),
      exceeded: lines.find((m) => m.msg?.startsWith("stop grace exceeded"))?.msg,
    }).toEqual({
      code: 0,
      within10s: true,
      graceKept: true,
      stopped: true,
      exceeded: "stop grace exceeded: unfinished work stays in the inbox or is retried at next start",
    });
    // Nothing is lost: every acknowledged webhook is still pending in the inbox, for the next start to replay.
    const store = await openStore(world.config.store.url);
    const pending: string[] = [];
    for await (const entry of new WebhookInbox({ store }).pending()) pending.push(entry.type);
    await store.close();
    expect(pending.filter((t) => t === "appointment.created")).toHaveLength(10);
  }, 40_000);

  it.runIf(redisTestsEnabled("stop-grace"))(
    "while Redis does not answer (a partition): exits 0 within 10 s",
    async () => {
      const redis: RedisServer = await startRedis();
      cleanups.push(() => redis.stop());
      const proxy: FreezableProxy = await startProxy(redis.port);
      cleanups.push(() => proxy.close());
      const world = await startWorld({ therapists: ["th_anna"] });
      cleanups.push(() => world.close());
      const daemon = await daemonFor(world, {
        name: "redis partition",
        env: { LOG_LEVEL: "info" },
        edit: (c) => {
          c.store = { ...c.store, url: proxy.url };
        },
      });
      cleanups.push(() => daemon.stop(1000));
      await daemon.start();
      await waitFor("the start's reconciliation", () => msgs(daemon).some((m) => m.msg === "reconciliation finished"));
      proxy.freeze();
      await new Promise((r) => setTimeout(r, 300));

      const { code, ms } = await sigterm(daemon);
      expect({
        code,
        within10s: ms < 10_000,
        stopped: msgs(daemon).some((m) => m.msg === "calbridge stopped"),
      }).toEqual({ code: 0, within10s: true, stopped: true });
    },
    40_000,
  );
});

describe("a stop during a reconciliation", () => {
  it("is logged as given up, not as failed, and does not count toward notify.reconcile_failures", async () => {
    const world = await startWorld({ therapists: ["th_anna", "th_ben"], google: { latencyMs: 100 } });
    cleanups.push(() => world.close());
    for (let i = 0; i < 300; i++) book(world, i % 2 ? "th_anna" : "th_ben", i);
    const log = captureLog("info");
    const app: App = await createApp(world.config, {
      logger: log.logger,
      listen: "127.0.0.1:0",
      adminListen: "127.0.0.1:0",
    });
    await app.start();
    // The start's reconciliation is writing events when the deploy stops the daemon.
    const writes = world.google.writes;
    await waitFor("the reconciliation's first writes", () => world.google.writes > writes);
    await app.stop(8_000);

    const reader = await createApp(world.config, { logger: log.logger, oneShot: true });
    const facts = await new NotifyLedger(reader.store).reconcileFacts();
    await reader.stop(2000);
    expect({
      failures: facts?.failures ?? 0,
      failedLines: log.lines.filter((l) => l.msg === "reconciliation failed; nothing was deleted").length,
      givenUp: log.lines.filter((l) => l.msg === "reconciliation given up: stopping").map((l) => l.level),
    }).toEqual({ failures: 0, failedLines: 0, givenUp: [30] });
  }, 30_000);
});
