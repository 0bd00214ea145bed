// Push channels left behind while the daemon was stopped: a therapist taken out of the mapping, or given another
// calendar, keeps a channel open at Google (notifying the webhook address for up to a week) unless the next start
// stops it. The leader stops each with the credentials that opened it and forgets it; a stop that fails is tried again
// at the next check; a channel whose credentials are gone is forgotten (Google stops it at its expiration).
import { afterEach, expect, it } from "vitest";
import { type App, createApp } from "../../src/daemon/app.ts";
import type { Channel } from "../../src/daemon/push.ts";
import { type Logger, silentLogger } from "../../src/log.ts";
import { tokenDigest } from "../../src/store/secrets.ts";
import { captureLog } from "../support/log-capture.ts";
import { DAY, type Harness, harness } from "../sync/support.ts";

let h: Harness | undefined;
let next: App | undefined;
afterEach(async () => {
  next?.push.stop();
  await next?.stop(2000).catch(() => {});
  next = undefined;
  h?.app.push.stop();
  await h?.close();
  h = undefined;
});

/** A daemon with push on whose channels are open, then stopped; the emulator delivers over plain HTTP on loopback. */
async function channelsOpenThenStopped(therapists: number, before?: (app: App) => Promise<void>): Promise<Harness> {
  const x = await harness({
    therapists,
    configure: (c) => {
      c.google.push = { public_url: "https://sync.example/webhooks/google" };
    },
  });
  await x.app.start();
  x.world.config.google.push!.public_url = `${x.app.http!.url}/webhooks/google`;
  x.world.google.requireHttpsChannels = false;
  await x.app.push.start();
  await x.world.google.settleNotifications();
  expect(x.world.google.channels.size).toBe(therapists);
  await before?.(x.app);
  x.app.push.stop();
  await x.app.stop(2000);
  return x;
}

/** The daemon started again on the same store, (edited) configuration and address, as the leader. */
async function restart(x: Harness, logger: Logger = silentLogger): Promise<App> {
  const listen = new URL(x.world.config.google.push!.public_url).host;
  const app = await createApp(x.world.config, { logger, oneShot: true, listen });
  await app.start();
  await app.push.start();
  await x.world.google.settleNotifications();
  return app;
}

const stops = (x: Harness) =>
  x.world.google.requestLog.filter((r) => r.method === "POST" && r.path.endsWith("/channels/stop"));

it("a therapist removed, and one re-pointed, while the daemon was stopped: their channels are stopped at start with their own credentials and forgotten", async () => {
  h = await channelsOpenThenStopped(3);
  const [cal1, cal2, cal3] = ["th_1", "th_2", "th_3"].map((t) => h!.world.calendarOf(t));
  const moved = "th_3-new@clinic.test";
  h.world.google.createCalendar(moved, cal3!, { timeZone: "Europe/Berlin" });
  // While stopped: th_2 leaves the configuration, th_3 gets another calendar.
  h.world.config.therapists = h.world.config.therapists
    .filter((t) => t.therapist_id !== "th_2")
    .map((t) => (t.therapist_id === "th_3" ? { ...t, calendar_id: moved } : t));
  const before = stops(h).length;

  next = await restart(h);
  expect([...h.world.google.channels.values()].map((c) => c.calendarId).sort()).toEqual([cal1, moved].sort());
  // Each stopped as the account that opened it (the delegated therapist), not as someone else.
  expect(
    stops(h)
      .slice(before)
      .map((r) => [r.subject, r.status])
      .sort(),
  ).toEqual([
    [cal2, 204],
    [cal3, 204],
  ]);
  // Google notifies nobody for the removed therapist's calendar any more, and the store forgot the channel.
  expect(await h.world.google.notify(cal2!)).toEqual([]);
  const keys: string[] = [];
  for await (const [key] of next.store.table<Channel>("channels").entries()) keys.push(key);
  expect(keys.filter((k) => !k.startsWith("channel-id:")).sort()).toEqual(["th_1", "th_3"]);
  expect((await next.store.table<Channel>("channels").get("th_3"))?.calendarId).toBe(moved);
});

it("a stop Google refuses at start is logged, kept, and tried again at the next check; the start goes on", async () => {
  h = await channelsOpenThenStopped(2);
  const cal2 = h.world.calendarOf("th_2");
  h.world.config.therapists = h.world.config.therapists.filter((t) => t.therapist_id !== "th_2");
  h.world.google.faults.next(1, { status: 403, reason: "forbidden", match: /channels\/stop/ });
  const log = captureLog();

  next = await restart(h, log.logger);
  expect([...h.world.google.channels.values()].map((c) => c.calendarId)).toContain(cal2);
  expect(
    log.find((l) => String(l.msg).includes("no longer mapped not stopped; tried again") && l.therapist_id === "th_2"),
  ).toBeDefined();
  const channels = next.store.table<Channel>("channels");
  expect(await channels.get("th_2")).toBeUndefined(); // moved aside, under its channel id
  // Its notifications meanwhile are acknowledged (the channel is known) and trigger nothing.
  expect((await h.world.google.notify(cal2)).map((d) => d.status)).toEqual([200]);

  await next.push.renew(); // the next check
  expect([...h.world.google.channels.values()].map((c) => c.calendarId)).not.toContain(cal2);
  const keys: string[] = [];
  for await (const [key] of channels.entries()) keys.push(key);
  expect(keys.filter((k) => !k.startsWith("channel-id:"))).toEqual(["th_1"]);
});

it("a channel whose credentials are gone (an OAuth therapist's token removed) is forgotten, with a log line saying Google stops it at its expiration", async () => {
  const expiration = Date.now() + 5 * DAY;
  // Opened by an OAuth therapist no longer mapped, whose refresh token is no longer stored.
  const left: Channel = {
    therapistId: "th_gone",
    calendarId: "primary",
    address: "https://sync.example/webhooks/google",
    channelId: "left-behind",
    resourceId: "res-gone",
    tokenHash: tokenDigest("x".repeat(43)),
    expiration,
    oauth: true,
  };
  h = await channelsOpenThenStopped(1, (app) => app.store.table<Channel>("channels").set("th_gone", left));
  const log = captureLog();

  next = await restart(h, log.logger);
  const line = log.find((l) => l.channel_id === "left-behind");
  expect(String(line?.msg)).toContain("Google stops it at its expiration");
  expect(line?.expiration).toBe(new Date(expiration).toISOString());
  expect(await next.store.table<Channel>("channels").get("th_gone")).toBeUndefined();
  await next.push.renew();
  expect(log.lines.filter((l) => l.channel_id === "left-behind")).toHaveLength(1); // forgotten: not tried again
});

it("the old channel's stop refused at its renewal: kept aside, its notifications acknowledged, and stopped at the next check", async () => {
  h = await harness({
    therapists: 1,
    configure: (c) => {
      c.google.push = { public_url: "https://sync.example/webhooks/google" };
    },
  });
  await h.app.start();
  h.world.config.google.push!.public_url = `${h.app.http!.url}/webhooks/google`;
  h.world.google.requireHttpsChannels = false;
  await h.app.push.start();
  await h.world.google.settleNotifications();
  const cal = h.world.calendarOf("th_1")!;
  const channels = h.app.store.table<Channel>("channels");
  const old = (await channels.get("th_1"))!;
  h.world.google.faults.next(1, { status: 403, reason: "forbidden", match: /channels\/stop/ });
  const log = captureLog();
  // A fresh app on the same store, logging: renewal is due (inside the last day before the old channel's expiration).
  h.app.push.stop();
  await h.app.stop(2000);
  next = await createApp(h.world.config, {
    logger: log.logger,
    oneShot: true,
    listen: new URL(h.world.config.google.push!.public_url).host,
  });
  await next.start();
  await next.push.renew(old.expiration - 60_000);
  await h.world.google.settleNotifications();
  const live = () => [...h!.world.google.channels.values()].filter((c) => c.calendarId === cal).map((c) => c.id);
  const renewed = (await next.store.table<Channel>("channels").get("th_1"))!;
  expect(renewed.channelId).not.toBe(old.channelId);
  // Google refused the old channel's stop: both deliver for now.
  expect(live().sort()).toEqual([old.channelId, renewed.channelId].sort());
  expect(
    log.find((l) => String(l.msg).includes("replaced at its renewal not stopped") && l.channel_id === old.channelId),
  ).toBeDefined();
  // The old channel's notifications are acknowledged as a known channel's, not refused as unknown.
  expect(log.find((l) => String(l.msg).includes("unknown channel"))).toBeUndefined();

  await next.push.renew(); // the next check (nothing due for renewal now)
  expect(live()).toEqual([renewed.channelId]);
  const keys: string[] = [];
  for await (const [key] of next.store.table<Channel>("channels").entries()) keys.push(key);
  expect(keys.filter((k) => !k.startsWith("channel-id:"))).toEqual(["th_1"]);
});
