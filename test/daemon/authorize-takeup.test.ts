// `calbridge authorize` runs as a process of its own while the daemon runs: the daemon must take the token it stored
// up without a restart (README runbook, invalid_grant). A broken gateway's probe reads the stored token first; every
// replica checks the stored token of each OAuth therapist without working credentials every
// sync.calendar_poll_seconds; authorize also publishes a notice every replica takes up at once (Redis pub/sub, or a row
// of the SQLite file read every second). The switch
// writes nothing back, and a therapist unmapped meanwhile gets no gateway.
import { request } from "undici";
import { afterEach, describe, expect, it } from "vitest";
import { eventIdFor } from "../../src/calendar/ids.ts";
import { ManualClock } from "../../src/clock.ts";
import type { Config } from "../../src/config/schema.ts";
import { type App, createApp } from "../../src/daemon/app.ts";
import { silentLogger } from "../../src/log.ts";
import { startWorld, type World } from "../../src/simulator/world.ts";
import { runCliWatching, writeConfig } from "../cli/support.ts";
import { answerConsent } from "../support/consent.ts";
import { captureLog } from "../support/log-capture.ts";
import { redisTestsEnabled, useRedisServer } from "../support/redis.ts";

const KEY = "authorize-takeup-key-0123456789abcdef";
const DAY = 86_400_000;

const cleanups: (() => Promise<unknown>)[] = [];
afterEach(async () => {
  for (const c of cleanups.splice(0).reverse()) await c().catch(() => {});
});

/** A world whose `oauth` therapists connect their own Google account (their primary calendar); the others do not. */
async function oauthWorld(therapists: string[], oauth: string[], pollSeconds: number, storeUrl?: string) {
  const world = await startWorld({
    therapists,
    ...(storeUrl ? { storeUrl } : {}),
    configure: (c) => {
      c.google.oauth = { client_id: "placeholder", client_secret: "placeholder-secret" };
      c.sync = { ...c.sync, calendar_poll_seconds: pollSeconds };
      c.store = { ...c.store, encryption_key: KEY, ...(storeUrl ? { url: storeUrl, lease_seconds: 2 } : {}) };
      for (const t of c.therapists) {
        if (!oauth.includes(t.therapist_id)) continue;
        // impersonate stays: `authorize` sends it as the login hint, so the account is the therapist's own.
        t.calendar_id = "primary";
        t.auth = { type: "oauth" };
      }
    },
  });
  cleanups.push(() => world.close());
  world.config.google.oauth = world.google.registerOAuthClient();
  return { world, file: writeConfig(world) };
}

/** `calbridge authorize --therapist ID`, the therapist at the browser ticking every box. */
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
  return result;
}

async function daemon(world: World, logger = silentLogger): Promise<App> {
  const app = await createApp(world.config, { logger, listen: "127.0.0.1:0", adminListen: "127.0.0.1:0" });
  cleanups.push(() => app.stop(3000));
  await app.start();
  return app;
}

const book = (world: World, therapistId: string, days: number) =>
  String(
    world.booking.create(
      { therapist_id: therapistId, start_time: new Date(Date.now() + days * DAY).toISOString() },
      { force: true },
    ).id,
  );
const live = (world: World, therapistId: string, id: string) => {
  const ev = world.google.event(world.calendarOf(therapistId), eventIdFor(id));
  return ev !== undefined && ev.status !== "cancelled";
};
const credentialsOf = async (app: App, therapistId: string) =>
  (await app.status()).therapists.find((t) => t.therapistId === therapistId)!.credentials;
/** Requests to the booking service that change something (write-backs: moves, cancellations). */
const bookingWrites = (world: World) => world.booking.requests.filter((r) => r.method !== "GET");

describe("calbridge authorize while the daemon runs", () => {
  it("a broken therapist's probe reads the stored token first: the new one is used, without a restart", async () => {
    const { world, file } = await oauthWorld(["th_ben"], ["th_ben"], 60);
    await authorize(file, "th_ben");
    const clock = new ManualClock(Date.now());
    const app = await createApp(world.config, { clock, logger: silentLogger, oneShot: true, listen: "127.0.0.1:0" });
    cleanups.push(() => app.stop(1000));
    const gw = app.calendars.get("th_ben")!;
    expect((await gw.checkAccess()).ok).toBe(true);

    world.google.revokeTokens(world.calendarOf("th_ben"));
    await app.poller.poll("th_ben").catch(() => {});
    expect(gw.health().credentials).toBe("broken");
    world.google.restoreAccess(world.calendarOf("th_ben"));
    await authorize(file, "th_ben");

    // Before the probe is due, calls still fail fast (no store read per call); the probe 10 minutes on takes it up.
    await expect(app.poller.poll("th_ben")).rejects.toThrow(/broken/);
    await clock.advance(10 * 60_000);
    await app.poller.poll("th_ben");
    expect(app.calendars.get("th_ben")).toBe(gw);
    expect((await credentialsOf(app, "th_ben")).ok).toBe(true);
  }, 60_000);

  it("a running daemon on SQLite takes the token up without a restart and catches up, writing nothing back", async () => {
    const { world, file } = await oauthWorld(["th_anna", "th_ben"], ["th_ben"], 5);
    await authorize(file, "th_ben");
    const before = book(world, "th_ben", 2);
    const log = captureLog("info");
    const app = await daemon(world, log.logger);
    await expect.poll(() => live(world, "th_ben", before), { timeout: 20_000 }).toBe(true);

    // Ben revokes calbridge's access: the next poll finds the credentials broken; what he is booked meanwhile waits.
    world.google.revokeTokens(world.calendarOf("th_ben"));
    await expect
      .poll(async () => (await credentialsOf(app, "th_ben")).reason, { timeout: 20_000 })
      .toBe("invalid_grant");
    expect((await credentialsOf(app, "th_ben")).reconnect).toBe("calbridge authorize --therapist th_ben");
    const during = book(world, "th_ben", 3);

    // The runbook: `calbridge authorize --therapist th_ben`, another process, which says when the daemon takes it up.
    world.google.restoreAccess(world.calendarOf("th_ben"));
    const again = await authorize(file, "th_ben");
    const at = Date.now();
    await expect.poll(async () => (await credentialsOf(app, "th_ben")).ok, { timeout: 15_000 }).toBe(true);
    expect(Date.now() - at).toBeLessThan(12_000);
    // The daemon reads the notice authorize wrote into the file within a second (its check is the fallback).
    expect(again.stdout).toContain("a running daemon takes it up at once, without a restart");
    expect(log.find((l) => l.msg === "new Google credentials in use")).toMatchObject({
      therapist_id: "th_ben",
      source: "authorize",
    });
    // The leader reconciles Ben at once: the appointment booked while he was broken appears.
    await expect.poll(() => live(world, "th_ben", during), { timeout: 20_000 }).toBe(true);
    expect(live(world, "th_ben", before)).toBe(true);
    expect(bookingWrites(world)).toEqual([]);
  }, 90_000);

  it("a therapist connected by authorize after the start gets a gateway; one unmapped meanwhile does not", async () => {
    const { world, file } = await oauthWorld(["th_anna", "th_ben", "th_cleo"], ["th_ben", "th_cleo"], 5);
    const ben = book(world, "th_ben", 2);
    const cleo = book(world, "th_cleo", 2);
    const app = await daemon(world);
    expect(app.calendars.has("th_ben")).toBe(false);
    expect(app.calendars.has("th_cleo")).toBe(false);
    expect((await credentialsOf(app, "th_cleo")).detail).toMatch(/not connected yet/);

    // Ben leaves the mapping; his authorize (the admin's file still lists him) and then Cleo's.
    const next = structuredClone(world.config) as Config;
    next.therapists = next.therapists.filter((t) => t.therapist_id !== "th_ben");
    await app.reload(next);
    await authorize(file, "th_ben");
    await authorize(file, "th_cleo");

    await expect.poll(() => app.calendars.has("th_cleo"), { timeout: 15_000 }).toBe(true);
    await expect.poll(() => live(world, "th_cleo", cleo), { timeout: 20_000 }).toBe(true);
    // The check that took Cleo's token up ran after Ben's was stored: he stays without a gateway, nothing written.
    expect(app.calendars.has("th_ben")).toBe(false);
    expect(live(world, "th_ben", ben)).toBe(false);
    expect(bookingWrites(world)).toEqual([]);
  }, 90_000);
});

describe.skipIf(!redisTestsEnabled("authorize-takeup"))("calbridge authorize with daemons on a Redis store", () => {
  const redis = useRedisServer();

  it("every replica takes the token up at once (authorize publishes a notice), long before the check", async () => {
    const { createClient } = await import("redis");
    const client = createClient({ url: redis().url });
    await client.connect();
    await client.flushAll();
    await client.quit();
    // The check runs every hour here: only the notice can explain a take-up within seconds.
    const { world, file } = await oauthWorld(["th_anna", "th_ben"], ["th_ben"], 3600, redis().url);
    const booked = book(world, "th_ben", 2);
    const a = await daemon(world);
    const b = await daemon(world);
    expect(a.calendars.has("th_ben") || b.calendars.has("th_ben")).toBe(false);

    const r = await authorize(file, "th_ben");
    await expect.poll(() => a.calendars.has("th_ben") && b.calendars.has("th_ben"), { timeout: 5_000 }).toBe(true);
    expect(r.stdout).toContain("a running daemon takes it up at once, without a restart");
    await expect.poll(() => live(world, "th_ben", booked), { timeout: 20_000 }).toBe(true);
    expect(bookingWrites(world)).toEqual([]);
  }, 60_000);
});
