// A standby's memory of push channels over a long uptime. Any replica may receive a notification; a standby checks
// the channel against the shared store and keeps it in memory for the next one. Renewals are the leader's, so a
// standby is never told a channel it knows was replaced: it forgets the ones past their expiration instead, or it
// would keep one per calendar per renewal (a week each by default) for as long as it runs.
import { createServer, type Server } from "node:http";
import type { AddressInfo } from "node:net";
import { request } from "undici";
import { afterEach, expect, it } from "vitest";
import { ManualClock } from "../../src/clock.ts";
import { type Channel, PushChannels } from "../../src/daemon/push.ts";
import { silentLogger } from "../../src/log.ts";
import { PUSH_PATH } from "../../src/public-paths.ts";
import { startWorld } from "../../src/simulator/world.ts";
import { tokenDigest } from "../../src/store/secrets.ts";
import { openStore } from "../../src/store/store.ts";
import type { CalendarPoller } from "../../src/sync/calendar-poller.ts";

const DAY = 86_400_000;
const TOKEN = "channel-token-0123456789";
const CALENDARS = 5;
const WEEKS = 10;

const cleanups: (() => Promise<unknown>)[] = [];
afterEach(async () => {
  for (const c of cleanups.splice(0).reverse()) await c().catch(() => {});
});

it("a standby forgets the channels past their expiration: ten weekly renewals leave one week's channels in memory", async () => {
  const world = await startWorld({
    therapists: ["th_a"],
    configure: (c) => {
      c.google.push = { public_url: "https://sync.example/webhooks/google", token: TOKEN };
    },
  });
  cleanups.push(() => world.close());
  const store = await openStore("memory://");
  cleanups.push(() => store.close());
  const clock = new ManualClock(Date.UTC(2026, 10, 23, 8, 0, 0));
  const push = new PushChannels({
    config: world.config,
    calendars: new Map(),
    // A standby never polls: the leader does (it would throw here).
    poller: undefined as unknown as CalendarPoller,
    store,
    logger: silentLogger,
    isLeader: () => false,
    clock,
  });
  const server: Server = createServer((req, res) => {
    void push.handler(req, res).then((handled) => {
      if (!handled) res.writeHead(404).end();
    });
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  cleanups.push(() => new Promise((resolve) => server.close(resolve)));
  const url = `http://127.0.0.1:${(server.address() as AddressInfo).port}${PUSH_PATH}`;
  const notify = async (channelId: string) => {
    const res = await request(url, {
      method: "POST",
      headers: {
        "x-goog-channel-id": channelId,
        "x-goog-channel-token": TOKEN,
        "x-goog-resource-state": "exists",
        "x-goog-resource-id": `res-${channelId}`,
      },
    });
    await res.body.dump();
    return res.statusCode;
  };
  const channels = store.table<Channel>("channels");
  let first: string | undefined;
  for (let week = 0; week < WEEKS; week++) {
    // The leader's weekly renewal: a new channel per calendar, found by id in the shared store.
    for (let i = 0; i < CALENDARS; i++) {
      const channelId = `ch-w${week}-${i}`;
      first ??= channelId;
      const channel: Channel = {
        therapistId: `th_${i}`,
        calendarId: `cal_${i}`,
        address: "https://sync.example/webhooks/google",
        channelId,
        resourceId: `res-${channelId}`,
        tokenHash: tokenDigest(TOKEN),
        expiration: clock.now() + 7 * DAY,
        confirmed: true,
      };
      await channels.set(`channel-id:${channelId}`, channel);
      expect(await notify(channelId)).toBe(200);
    }
    await clock.advance(7 * DAY);
  }
  // One week's channels (they expired just now, and nothing was added since): not ten weeks' worth.
  expect(push.knownChannels).toBeLessThanOrEqual(CALENDARS);
  // A late notification on a channel long expired is still checked against the store, as before: acknowledged.
  expect(await notify(first!)).toBe(200);
  expect(push.knownChannels).toBeLessThanOrEqual(CALENDARS + 1);
});
