// Tests Google push notifications with two replicas over a real redis-server: a notification may reach either
// replica (its channel may have been opened by another one, or by this one while it led). Any replica checks the
// channel against the shared store and acknowledges it, but only the leader polls the calendar (engine writes, the
// booking write-back): a standby hands the calendar to the leader as a notice.
import { performance } from "node:perf_hooks";
import { createClient } from "redis";
import { request } from "undici";
import { afterEach, describe, expect, it } from "vitest";
import { eventIdFor } from "../../src/calendar/ids.ts";
import type { Config } from "../../src/config/schema.ts";
import { type App, createApp } from "../../src/daemon/app.ts";
import { silentLogger } from "../../src/log.ts";
import { startWorld, type World } from "../../src/simulator/world.ts";
import { type FreezableProxy, redisTestsEnabled, startProxy, useRedisServer } from "../support/redis.ts";

const LEASE_SECONDS = 2;
const DAY = 86_400_000;
const TOKEN = "channel-token-0123456789";

async function waitFor(what: string, predicate: () => boolean | Promise<boolean>, timeoutMs: number): Promise<void> {
  const start = performance.now();
  while (!(await predicate())) {
    if (performance.now() - start > timeoutMs) throw new Error(`timed out after ${timeoutMs} ms waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 10));
  }
}

describe.skipIf(!redisTestsEnabled("push-ha"))("push notifications with two replicas sharing one Redis store", () => {
  const redis = useRedisServer();
  const cleanups: (() => Promise<void>)[] = [];
  afterEach(async () => {
    for (const cleanup of cleanups.splice(0).reverse()) await cleanup().catch(() => {});
  });

  async function replica(world: World): Promise<{ app: App; proxy: FreezableProxy }> {
    const proxy = await startProxy(redis().port);
    // The google section stays shared with world.config: the tests point push.public_url at one replica later.
    const config: Config = { ...world.config, store: { ...world.config.store, url: proxy.url } };
    const app = await createApp(config, { logger: silentLogger, listen: "127.0.0.1:0" });
    let stopped: Promise<void> | undefined;
    cleanups.push(async () => {
      proxy.thaw();
      stopped ??= app.stop(3000);
      await stopped;
      await proxy.close();
    });
    await app.start();
    return { app, proxy };
  }

  /**
   * A world with one therapist and push configured, a booking mirrored by the leader (a), and a standby (b). The
   * periodic poll is a minute away, so within the test only a notification makes a calendar change come back.
   */
  async function setUp() {
    const world = await startWorld({
      therapists: ["th_a"],
      storeUrl: redis().url,
      configure: (c) => {
        c.store = { url: redis().url, lease_seconds: LEASE_SECONDS };
        // The move is written back at once: the grace period has tests of its own.
        c.sync = {
          ...c.sync,
          reconcile_cron: "0 0 1 1 *",
          calendar_poll_seconds: 60,
          writeback: { reschedule_grace_seconds: 0 },
        };
        // Nothing listens there: the channel the leader opens at start is re-pointed at a replica by `pointAt`.
        c.google.push = { public_url: "https://127.0.0.1:1/webhooks/google", token: TOKEN };
      },
    });
    cleanups.push(() => world.close());
    world.google.requireHttpsChannels = false;
    // The describe block shares one redis-server: links, tokens and channels of an earlier test must not count.
    const client = createClient({ url: redis().url });
    await client.connect();
    await client.flushAll();
    await client.quit();
    const start = new Date(Date.now() + 3 * DAY);
    start.setUTCHours(10, 0, 0, 0);
    const appt = world.booking.create({ therapist_id: "th_a", start_time: start.toISOString() }, { force: true });
    const id = String(appt.id);
    const cal = world.calendarOf("th_a");

    const a = await replica(world);
    const b = await replica(world);
    // The first replica holds the fresh lease key 2/3 of the lease before it leads (Redis may have lost a leader's key).
    await waitFor("the first replica to lead", () => a.app.lease.isLeader, 10_000); // a positive wait: 1333 ms of hold, then Redis round trips (seconds under load)
    expect([a.app.lease.isLeader, b.app.lease.isLeader]).toEqual([true, false]);
    await waitFor(
      "the leader to mirror the booking, poll once and open a channel",
      () =>
        world.google.events(cal).some((e) => e.id === eventIdFor(id)) &&
        a.app.poller.lastPollAt("th_a") !== undefined &&
        world.google.channels.size === 1,
      10_000,
    );

    /** Replaces the calendar's channel by one whose notifications go to `app` (the leader opens it, as always). */
    const pointAt = async (leader: App, app: App) => {
      world.config.google.push!.public_url = `${app.http!.url}/webhooks/google`;
      await leader.push.renew(Date.now() + 8 * DAY);
      const channels = [...world.google.channels.values()];
      expect(channels.map((c) => c.address)).toEqual([world.config.google.push!.public_url]);
      return channels[0]!;
    };
    /** The therapist moves the event an hour later in Google Calendar; the write-back moves the booking. */
    const moveInCalendar = () => {
      world.google.userEdit(cal, eventIdFor(id), {
        start: { dateTime: new Date(start.getTime() + 3_600_000).toISOString() },
        end: { dateTime: new Date(start.getTime() + 7_200_000).toISOString() },
      });
    };
    const movedBack = () => Date.parse(String(world.booking.get(id)!.start_time)) === start.getTime() + 3_600_000;
    return { world, cal, a, b, pointAt, moveInCalendar, movedBack };
  }

  it("a standby that never led acknowledges a notification for the leader's channel, and the leader polls", async () => {
    const { world, cal, a, b, pointAt, moveInCalendar, movedBack } = await setUp();
    const channel = await pointAt(a.app, b.app);
    // Google's first message reached the standby before the leader heard back from its watch call (the emulator
    // answers it only then): the standby knew the channel from the entry the leader stored before the call, and the
    // leader, told by a notice, stored the channel confirmed once it had stored it.
    expect(world.google.deliveries.filter((d) => d.channelId === channel.id).map((d) => [d.state, d.status])).toEqual([
      ["sync", 200],
    ]);
    const channels = a.app.store.table<{ channelId: string; confirmed?: boolean; resourceId: string }>("channels");
    await waitFor(
      "the leader to store the channel confirmed",
      async () => (await channels.get(`channel-id:${channel.id}`))?.confirmed === true,
      5000,
    );
    expect(await channels.get("th_a")).toMatchObject({ channelId: channel.id, confirmed: true });
    expect((await channels.get(`channel-id:${channel.id}`))?.resourceId).toBeTruthy();

    // Forged notifications keep their answer on the standby too.
    for (const headers of [
      {
        "x-goog-channel-id": channel.id,
        "x-goog-channel-token": "wrong-token-0000000",
        "x-goog-resource-state": "exists",
      },
      { "x-goog-channel-id": "unknown", "x-goog-channel-token": TOKEN, "x-goog-resource-state": "exists" },
    ]) {
      const res = await request(`${b.app.http!.url}/webhooks/google`, { method: "POST", headers });
      await res.body.dump();
      expect(res.statusCode).toBe(404);
    }

    const leaderPolledAt = a.app.poller.lastPollAt("th_a")!;
    moveInCalendar();
    const deliveries = await world.google.notify(cal);
    expect(deliveries.map((d) => [d.channelId, d.status])).toEqual([[channel.id, 200]]);
    // The write-back happens within the poll; the poll counts as done once its sync token is saved.
    await waitFor(
      "the leader to poll and write the move back",
      () => movedBack() && a.app.poller.lastPollAt("th_a")! > leaderPolledAt,
      5000,
    );
    expect(b.app.poller.lastPollAt("th_a")).toBeUndefined();
    expect(world.booking.requests.filter((r) => r.method === "PATCH")).toHaveLength(1);
  }, 30_000);

  it("a forged notification costs one read, never a scan of the keyspace; an earlier build's channels are indexed at start", async () => {
    const { world, a, b, pointAt } = await setUp();
    const channel = await pointAt(a.app, b.app);
    const client = createClient({ url: redis().url });
    await client.connect();
    cleanups.push(async () => {
      await client.quit();
    });
    // Keys enough that a scan would show (each SCAN returns about COUNT keys of the whole database).
    for (let i = 0; i < 20; i++) await client.set(`other:key:${i}`, "x");
    const calls = async (command: string) => {
      const info = await client.info("commandstats");
      return Number(new RegExp(`^cmdstat_${command}:calls=(\\d+)`, "m").exec(info)?.[1] ?? 0);
    };
    const [scans, gets] = [await calls("scan"), await calls("get")];
    // The standby never led: its cache is empty, so every forged id is a question to the shared store.
    for (let i = 0; i < 20; i++) {
      const res = await request(`${b.app.http!.url}/webhooks/google`, {
        method: "POST",
        headers: {
          "x-goog-channel-id": `forged-${i}`,
          "x-goog-channel-token": TOKEN,
          "x-goog-resource-state": "exists",
        },
      });
      await res.body.dump();
      expect(res.statusCode).toBe(404);
    }
    expect((await calls("scan")) - scans).toBe(0);
    // One GET each (the lease and its renewals add a few of their own).
    expect((await calls("get")) - gets).toBeGreaterThanOrEqual(20);
    expect((await calls("get")) - gets).toBeLessThan(30);

    // A channel an earlier build stored under its therapist only: the next leader's start gives it its by-id entry.
    const channels = a.app.store.table<{ channelId: string }>("channels");
    expect(await channels.get(`channel-id:${channel.id}`)).toMatchObject({ channelId: channel.id });
    await channels.delete(`channel-id:${channel.id}`);
    await a.app.push.start();
    a.app.push.stop();
    expect(await channels.get(`channel-id:${channel.id}`)).toMatchObject({ channelId: channel.id });
    expect(world.google.channels.size).toBe(1);
  }, 30_000);

  it("a replica that lost the lease acknowledges notifications for its old channel but leaves the poll to the new leader", async () => {
    const { world, cal, a, b, pointAt, moveInCalendar, movedBack } = await setUp();
    const channel = await pointAt(a.app, a.app);

    // a is cut off without releasing the lease; b takes over (and keeps a's channel, fresh for days); a comes back.
    a.proxy.freeze();
    await waitFor("the standby to take over", () => b.app.lease.isLeader, LEASE_SECONDS * 1000 + 3000);
    a.proxy.thaw();
    await waitFor("the new leader's first poll", () => b.app.poller.lastPollAt("th_a") !== undefined, 10_000);
    await new Promise((r) => setTimeout(r, 200));
    expect([a.app.lease.isLeader, b.app.lease.isLeader]).toEqual([false, true]);
    expect([...world.google.channels.keys()]).toEqual([channel.id]);

    const oldLeaderPolledAt = a.app.poller.lastPollAt("th_a");
    const leaderPolledAt = b.app.poller.lastPollAt("th_a")!;
    moveInCalendar();
    const deliveries = await world.google.notify(cal);
    expect(deliveries.map((d) => [d.channelId, d.status])).toEqual([[channel.id, 200]]);
    // The write-back happens within the poll; a poll counts as done once its sync token is saved.
    const polledByA = () => a.app.poller.lastPollAt("th_a") !== oldLeaderPolledAt;
    const polledByB = () => b.app.poller.lastPollAt("th_a")! > leaderPolledAt;
    await waitFor("a poll that writes the move back", () => movedBack() && (polledByA() || polledByB()), 5000);
    await new Promise((r) => setTimeout(r, 200)); // room for a second poll, by the other replica
    // The old leader ran no poll of its own (no engine writes, no write-back); the new leader did.
    expect(a.app.poller.lastPollAt("th_a")).toBe(oldLeaderPolledAt);
    expect(polledByB()).toBe(true);
    expect(world.booking.requests.filter((r) => r.method === "PATCH")).toHaveLength(1);
  }, 30_000);
});
