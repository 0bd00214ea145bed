// Two replicas on Redis. An OAuth therapist who was not connected at start (calbridge_therapist_credentials_ok 0 on
// both replicas) connects with `calbridge authorize`. Both replicas take the token up at once and the leader mirrors
// their appointments: the credentials work. calbridge_therapist_credentials_ok used to be set back to 1 only by a
// request to /status (Prometheus asks /metrics only), so it stayed 0 on both replicas; the standby makes no Google call
// and has no calbridge_google_credentials_ok series to cancel it, and the second clause of CalbridgeCredentialsBroken
// had no leader filter: a critical alert fired for good for a therapist whose credentials work. Now the gauge is read
// from the live state at every scrape, on every replica, and the rule reads the leader's.
import { request } from "undici";
import { afterEach, describe, expect, it } from "vitest";
import { eventIdFor } from "../../src/calendar/ids.ts";
import { type App, createApp } from "../../src/daemon/app.ts";
import { silentLogger } from "../../src/log.ts";
import { startWorld, type World } from "../../src/simulator/world.ts";
import { runCliWatching, writeConfig } from "../cli/support.ts";
import { answerConsent } from "../support/consent.ts";
import { redisTestsEnabled, useRedisServer } from "../support/redis.ts";
import { credentialsBroken, scrape, series, shipped } from "./ha-metrics-support.ts";

const KEY = "ha-metrics-creds-key-0123456789abcdef";
const DAY = 86_400_000;

const cleanups: (() => Promise<unknown>)[] = [];
afterEach(async () => {
  for (const c of cleanups.splice(0).reverse()) await c().catch(() => {});
});

async function oauthWorld(storeUrl: string) {
  const world = await startWorld({
    therapists: ["th_anna", "th_ben"],
    storeUrl,
    configure: (c) => {
      c.google.oauth = { client_id: "placeholder", client_secret: "placeholder-secret" };
      c.sync = { ...c.sync, calendar_poll_seconds: 3600 };
      c.store = { ...c.store, encryption_key: KEY, url: storeUrl, lease_seconds: 2 };
      const ben = c.therapists.find((t) => t.therapist_id === "th_ben")!;
      ben.calendar_id = "primary";
      ben.auth = { type: "oauth" };
    },
  });
  cleanups.push(() => world.close());
  world.config.google.oauth = world.google.registerOAuthClient();
  return { world, file: writeConfig(world) };
}

async function authorize(file: string, therapistId: string) {
  let printed = "";
  let browser: Promise<unknown> | undefined;
  const result = await runCliWatching(
    (text) => {
      printed += text;
      const url = printed.match(/https?:\/\/\S+authorize\S*/)?.[0];
      if (!url) return;
      printed = "";
      browser = answerConsent(url, { tick: "all" }).then(async (location) => (await request(location)).body.text());
    },
    "--config",
    file,
    "authorize",
    "--therapist",
    therapistId,
  );
  await browser;
  expect(result.code, result.stderr).toBe(0);
}

async function daemon(world: World): Promise<App> {
  const app = await createApp(world.config, {
    logger: silentLogger,
    listen: "127.0.0.1:0",
    adminListen: "127.0.0.1:0",
  });
  cleanups.push(() => app.stop(3000));
  await app.start();
  return app;
}

describe("the evaluator", () => {
  it("is the shipped CalbridgeCredentialsBroken rule, and the dashboard's (none loaded) query is its second clause", () => {
    expect(shipped("CalbridgeCredentialsBroken")).toBe(credentialsBroken.expr);
    expect(credentialsBroken.expr).toContain(shipped("Google credentials/B"));
  });
});

describe.skipIf(!redisTestsEnabled("ha-metrics-credentials"))("CalbridgeCredentialsBroken with two replicas", () => {
  const redis = useRedisServer();

  it("does not fire for a therapist who connected after the start and whose calendar is mirrored", async () => {
    const { createClient } = await import("redis");
    const client = createClient({ url: redis().url });
    await client.connect();
    await client.flushAll();
    await client.quit();
    const { world, file } = await oauthWorld(redis().url);
    const booked = String(
      world.booking.create(
        { therapist_id: "th_ben", start_time: new Date(Date.now() + 2 * DAY).toISOString() },
        { force: true },
      ).id,
    );
    const a = await daemon(world);
    await expect.poll(() => a.lease.isLeader, { timeout: 5000 }).toBe(true);
    const b = await daemon(world);

    // Before connecting, the alert rightly fires for th_ben (none could be loaded), on both replicas' gauges.
    const before = [...(await scrape(a, "a")), ...(await scrape(b, "b"))];
    expect(credentialsBroken.evaluate(before)).toEqual(["th_ben"]);
    const ben = (samples: typeof before) =>
      series(samples, "calbridge_therapist_credentials_ok")
        .filter((s) => s.labels.therapist === "th_ben")
        .map((s) => `${s.labels.instance}=${s.value}`);
    expect(ben(before)).toEqual(["a=0", "b=0"]);

    await authorize(file, "th_ben");
    await expect.poll(() => a.calendars.has("th_ben") && b.calendars.has("th_ben"), { timeout: 5000 }).toBe(true);
    // The leader mirrors Ben's appointment with his new token: his credentials work.
    await expect
      .poll(
        () => {
          const ev = world.google.event(world.calendarOf("th_ben"), eventIdFor(booked));
          return ev !== undefined && ev.status !== "cancelled";
        },
        { timeout: 20_000 },
      )
      .toBe(true);
    expect(a.calendars.get("th_ben")!.health().credentials).toBe("ok");

    const samples = [...(await scrape(a, "a")), ...(await scrape(b, "b"))];
    // What Prometheus evaluates: the rule has cleared for Ben; each replica's gauge says his credentials work.
    expect({ firing: credentialsBroken.evaluate(samples), therapist_credentials_ok: ben(samples) }).toEqual({
      firing: [],
      therapist_credentials_ok: ["a=1", "b=1"],
    });
  }, 90_000);
});
