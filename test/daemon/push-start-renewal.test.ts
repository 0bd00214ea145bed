// A leader's push.start() (the lease regained, or the daemon's start beside its first renewal) reads the channels
// table a page at a time and walks it with awaits. A renewal running meanwhile writes its provisional entry, gets
// Google's answer and stores the channel; when start() reached the provisional value it had read, it took the
// calendar's own, recorded channel for one whose watch answer was lost: its notifications polled nothing and the first
// one had it stopped at Google, while the therapist's record (and /status) still named it. A channel is taken for lost
// only while nothing records it (review6).
import { afterEach, expect, it } from "vitest";
import type { Channel } from "../../src/daemon/push.ts";
import { tokenDigest } from "../../src/store/secrets.ts";
import { captureLog } from "../support/log-capture.ts";
import { DAY, type Harness, harness } from "../sync/support.ts";
import { listings, sleep, until } from "./push-live.ts";

let h: Harness | undefined;
afterEach(async () => {
  h?.app.poller.stop();
  h?.app.push.stop();
  await h?.close();
  h = undefined;
});

it("a channel whose renewal completes while start() walks the channels table stays the calendar's channel", async () => {
  const log = captureLog();
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
  x.world.config.google.push!.public_url = `${x.app.http!.url}/webhooks/google`;
  x.world.google.requireHttpsChannels = false;
  x.world.google.resourceIdPerChannel = true;
  const table = x.app.store.table<Channel>("channels");
  const cal = x.world.calendarOf("th_1");
  const atGoogle = () => [...x.world.google.channels.values()].filter((c) => c.calendarId === cal).map((c) => c.id);

  await x.app.push.start();
  await x.world.google.settleNotifications();
  const first = (await table.get("th_1"))?.channelId;
  expect(atGoogle()).toEqual([first]);

  // The next renewal's watch is held at Google until released.
  let release!: () => void;
  const gate = new Promise<void>((r) => (release = r));
  let arrived = false;
  x.world.google.faults.holdNext(/\/watch$/, async () => {
    arrived = true;
    await gate;
  });
  const renewal = x.app.push.renew(Date.now() + 6.5 * DAY); // the channel is due: a new one is opened
  expect(await until(() => arrived)).toBe(true);

  // Entries of earlier lost watches (each lost answer leaves one for a week and a day): start() walks them first.
  const gw = x.app.calendars.get("th_1")!;
  const stale = Array.from({ length: 400 }, (_, i) => `00000000-0000-4000-8000-${String(i).padStart(12, "0")}`);
  await table.setMany(
    stale.map((channelId) => ({
      key: `channel-id:${channelId}`,
      value: {
        therapistId: "th_1",
        calendarId: gw.calendarId,
        address: x.world.config.google.push!.public_url,
        channelId,
        resourceId: "",
        tokenHash: tokenDigest(`t-${channelId}`),
        expiration: Date.now() + 7 * DAY,
        opening: true,
      } satisfies Channel,
      ttlMs: 8 * DAY,
    })),
  );

  // A leader's start (lease regained) while the renewal is out.
  const started = x.app.push.start();
  // Once start() has read the table, Google answers the watch.
  let read = false;
  for (let t = 0; t < 10_000 && !read; t += 2) {
    read = await isLost(table, stale[0]!);
    if (!read) await sleep(2);
  }
  expect(read).toBe(true);
  release();
  await renewal;
  await started;
  await x.world.google.settleNotifications();

  const second = (await table.get("th_1"))?.channelId;
  expect(second).toBeDefined();
  expect(second).not.toBe(first);
  // A change: Google notifies the calendar's channel; the daemon polls the calendar, and the channel stays open.
  const listed = listings(x.world, cal);
  const deliveries = await x.world.google.notify(cal);
  expect(deliveries.map((d) => [d.channelId, d.status])).toEqual([[second, 200]]);
  await sleep(500);
  expect({
    openAtGoogle: atGoogle(),
    polled: listings(x.world, cal) > listed,
    // What ops see: /status still says the calendar's channel is open and confirmed (the poller slows down).
    push: (await x.app.status()).therapists.find((t) => t.therapistId === "th_1")?.push?.state,
  }).toEqual({ openAtGoogle: [second], polled: true, push: "confirmed" });
});

async function isLost(table: ReturnType<Harness["app"]["store"]["table"]>, channelId: string): Promise<boolean> {
  const v = (await table.get(`channel-id:${channelId}`)) as Channel | undefined;
  return v?.lost === true;
}
