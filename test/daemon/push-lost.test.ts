// events.watch carried out by Google but its answer lost (a connection reset, a timeout, a 5xx; or the daemon stopped
// while waiting): the channel is open at Google for its whole lifetime (a week by default). calbridge forgot its id,
// answered each of its notifications 404 ("unknown channel", warned), never stopped it, and opened another at the
// next check: each lost answer added a channel notifying for the calendar (push2 audit). Such a channel is now kept
// as lost (its id and token digest, stored by id): its notifications are acknowledged and poll nothing, and the first
// one, which names its resource (X-Goog-Resource-ID), gets it stopped. A watch Google refused (4xx) opened nothing, and
// leaves nothing behind, as before.
import { createServer, type IncomingHttpHeaders, type Server } from "node:http";
import type { AddressInfo } from "node:net";
import { request } from "undici";
import { afterEach, expect, it } from "vitest";
import type { Channel } from "../../src/daemon/push.ts";
import { tokenDigest } from "../../src/store/secrets.ts";
import { captureLog } from "../support/log-capture.ts";
import { DAY, type Harness, harness } from "../sync/support.ts";
import { listings, sleep, until } from "./push-live.ts";

let h: Harness | undefined;
let relay: Server | undefined;
afterEach(async () => {
  h?.app.poller.stop();
  h?.app.push.stop();
  await h?.close();
  h = undefined;
  relay?.closeAllConnections();
  await new Promise<void>((r) => (relay ? relay.close(() => r()) : r()));
  relay = undefined;
});

/**
 * Google's way to the daemon: passes each notification on (all of its X-Goog headers) and answers with the daemon's
 * status, except the ones `swallow` picks, which it answers 200 itself (a message the daemon never sees).
 */
async function relayTo(daemon: string, swallow: (headers: IncomingHttpHeaders) => boolean): Promise<string> {
  relay = createServer((req, res) => {
    req.resume();
    if (swallow(req.headers)) {
      res.writeHead(200).end();
      return;
    }
    const headers: Record<string, string> = {};
    for (const [name, value] of Object.entries(req.headers)) {
      if (name.startsWith("x-goog-") && typeof value === "string") headers[name] = value;
    }
    void request(daemon, { method: "POST", headers })
      .then(async (out) => {
        await out.body.dump();
        res.writeHead(out.statusCode).end();
      })
      .catch(() => res.writeHead(502).end());
  });
  await new Promise<void>((r) => relay!.listen(0, "127.0.0.1", r));
  return `http://127.0.0.1:${(relay.address() as AddressInfo).port}/webhooks/google`;
}

/** A daemon with push on, no channel open yet, nothing polling (no other Google call meets a dropped answer). */
async function ready(log: ReturnType<typeof captureLog>, swallow?: (headers: IncomingHttpHeaders) => boolean) {
  const x = await harness({
    therapists: 1,
    logger: log.logger,
    configure: (c) => {
      c.google.push = { public_url: "https://sync.example/webhooks/google" };
    },
  });
  h = x;
  await x.app.start();
  x.app.poller.stop();
  const daemon = `${x.app.http!.url}/webhooks/google`;
  x.world.config.google.push!.public_url = swallow ? await relayTo(daemon, swallow) : daemon;
  x.world.google.requireHttpsChannels = false;
  // Each channel its own resourceId: what stops a channel must be its own, not borrowed from the calendar's other one.
  x.world.google.resourceIdPerChannel = true;
  return x;
}

/** The next events.watch is carried out at Google; its answer never reaches the daemon. */
function loseNextWatchAnswer(x: Harness): void {
  x.world.google.faults.holdNext(/\/watch$/, async () => {
    x.world.google.faults.dropResponseNext(1);
  });
}

const atGoogle = (x: Harness) => {
  const cal = x.world.calendarOf("th_1");
  return [...x.world.google.channels.values()].filter((c) => c.calendarId === cal).map((c) => c.id);
};
const recorded = async (x: Harness) => (await x.app.store.table<Channel>("channels").get("th_1"))?.channelId;
/** What the daemon changed elsewhere: calendar writes, and booking service calls. */
const sideEffects = (x: Harness) => ({ calendarWrites: x.writes(), bookingCalls: x.world.booking.requests.length });
const rejected = (log: ReturnType<typeof captureLog>) =>
  log.lines.filter((l) => String(l.msg).includes("unknown channel") || String(l.msg).includes("wrong token"));

it("a lost watch answer whose channel's first message came meanwhile: the channel is stopped at once", async () => {
  const log = captureLog();
  const x = await ready(log);
  const before = sideEffects(x);
  loseNextWatchAnswer(x);
  await x.app.push.start(); // its check meets the lost answer
  await x.world.google.settleNotifications();
  expect(atGoogle(x)).toEqual([]);
  expect(log.find((l) => String(l.msg).includes("Google's answer to the watch was lost"))).toBeDefined();
  expect(log.find((l) => l.msg === "push channel whose watch answer was lost: stopped")).toBeDefined();

  await x.app.push.renew(); // the next check opens the calendar's channel
  await x.world.google.settleNotifications();
  const known = await recorded(x);
  expect(known).toBeDefined();
  expect(atGoogle(x)).toEqual([known]);
  const deliveries = await x.world.google.notify(x.world.calendarOf("th_1"));
  expect(deliveries.map((d) => [d.channelId, d.status])).toEqual([[known, 200]]);
  expect(rejected(log)).toEqual([]);
  expect(sideEffects(x)).toEqual(before);
});

it("a lost watch answer whose channel's first message was not seen: acknowledged, polls nothing, stopped by its next notification", async () => {
  const log = captureLog();
  // The sync message (sent before the watch answer) is lost on its way: nothing named the channel's resource yet.
  const x = await ready(log, (headers) => headers["x-goog-resource-state"] === "sync");
  const cal = x.world.calendarOf("th_1");
  const before = sideEffects(x);
  loseNextWatchAnswer(x);
  await x.app.push.start();
  await x.world.google.settleNotifications();
  const [lost] = atGoogle(x);
  expect(lost).toBeDefined();
  expect(await recorded(x)).toBeUndefined();
  // Kept by id, so that a restart or another replica recognises it too.
  const entry = await x.app.store.table<Channel>("channels").get(`channel-id:${lost}`);
  expect(entry).toMatchObject({ channelId: lost, lost: true, resourceId: "", therapistId: "th_1" });
  expect(entry?.tokenHash).toMatch(/^[0-9a-f]{64}$/);

  // A change in the calendar: the lost channel notifies (the calendar has no other channel yet).
  const listed = listings(x.world, cal);
  const deliveries = await x.world.google.notify(cal);
  expect(deliveries.map((d) => [d.channelId, d.status])).toEqual([[lost, 200]]);
  expect(await until(() => atGoogle(x).length === 0)).toBe(true); // stopped with the resourceId it carried
  await sleep(200);
  expect(listings(x.world, cal)).toBe(listed); // its notification polled nothing
  expect(await x.app.store.table<Channel>("channels").get(`channel-id:${lost}`)).toBeUndefined();

  await x.app.push.renew();
  await x.world.google.settleNotifications();
  const known = await recorded(x);
  expect(atGoogle(x)).toEqual([known]);
  expect(rejected(log)).toEqual([]);
  expect(sideEffects(x)).toEqual(before);
});

it("a lost channel whose notification never comes is forgotten when its lifetime ends", async () => {
  const log = captureLog();
  const x = await ready(log, (headers) => headers["x-goog-resource-state"] === "sync");
  loseNextWatchAnswer(x);
  await x.app.push.start();
  await x.world.google.settleNotifications();
  const [lost] = atGoogle(x);
  const entry = await x.app.store.table<Channel>("channels").get(`channel-id:${lost}`);
  // Stored for the channel's requested lifetime (a week by default) and the by-id entries' day of grace.
  expect(entry?.expiration).toBeGreaterThan(Date.now() + 7 * DAY - 60_000);
  expect(entry?.expiration).toBeLessThanOrEqual(Date.now() + 7 * DAY);
  expect(x.app.push.knownChannels).toBe(1);
  await x.app.push.renew(); // the calendar's channel
  expect(x.app.push.knownChannels).toBe(2);
  await x.app.push.renew(entry!.expiration + 3_600_000); // a check after it ended forgets it (and renews the other)
  expect(x.app.push.knownChannels).toBe(1);
});

it("a watch in flight when its daemon stopped: the next start keeps it as lost, and its first notification stops it", async () => {
  const log = captureLog();
  const x = await ready(log, (headers) => headers["x-goog-resource-state"] === "sync");
  await x.app.push.start();
  await x.world.google.settleNotifications();
  const known = await recorded(x);
  expect(atGoogle(x)).toEqual([known]);
  // What the daemon that stopped had done: its provisional entry, then the watch, carried out at Google, unanswered.
  const gw = x.app.calendars.get("th_1")!;
  const token = "a-token-of-the-channel-in-flight";
  const channelId = "c0ffee00-0000-4000-8000-000000000001";
  const provisional: Channel = {
    therapistId: "th_1",
    calendarId: gw.calendarId,
    address: x.world.config.google.push!.public_url,
    channelId,
    resourceId: "",
    tokenHash: tokenDigest(token),
    expiration: Date.now() + 7 * DAY,
    opening: true,
  };
  await x.app.store.table<Channel>("channels").set(`channel-id:${channelId}`, provisional, 8 * DAY);
  await gw.watch({ channelId, address: provisional.address!, token });
  expect(atGoogle(x).sort()).toEqual([known, channelId].sort());

  x.app.push.stop();
  await x.app.push.start(); // the restart
  const cal = x.world.calendarOf("th_1");
  const listed = listings(x.world, cal);
  const deliveries = await x.world.google.notify(cal);
  expect(deliveries.map((d) => d.status)).toEqual([200, 200]);
  await until(() => atGoogle(x).length === 1);
  expect(atGoogle(x)).toEqual([known]);
  await sleep(200);
  expect(listings(x.world, cal)).toBe(listed + 1); // the calendar's own channel's notification, not the lost one's
  expect(rejected(log)).toEqual([]);
  expect(log.find((l) => String(l.msg).includes("not answered before its daemon stopped"))).toBeDefined();
});

it("a watch Google refused (4xx) opened no channel: nothing is kept, the next check opens one", async () => {
  const log = captureLog();
  const x = await ready(log);
  x.world.google.faults.next(1, { status: 403, reason: "forbidden", match: /\/watch$/ });
  await x.app.push.start();
  await x.world.google.settleNotifications();
  expect(log.find((l) => l.msg === "push channel not opened; polling covers this calendar")).toBeDefined();
  expect(log.find((l) => String(l.msg).includes("answer to the watch was lost"))).toBeUndefined();
  expect(atGoogle(x)).toEqual([]);
  const stored: string[] = [];
  for await (const [key] of x.app.store.table<Channel>("channels").entries()) stored.push(key);
  expect(stored).toEqual([]);
  expect(x.app.push.knownChannels).toBe(0);

  await x.app.push.renew();
  await x.world.google.settleNotifications();
  expect(atGoogle(x)).toEqual([await recorded(x)]);
});
