// A leader's start whose load of the push channels fails (the store did not answer) logged "the hourly check retries"
// and returned before its checks began: nothing retried. Push never started for the life of the process (calendars
// polled at the short interval, the recorded channels never renewed, a channel left behind never stopped, /status
// showing none of them). The checks now begin all the same, and each loads the channels first until a load succeeded
// (renew() alone knows neither the channels left behind nor what each recorded channel is): 10 s after the first
// failure, then less often. stop() ends them; a reload meanwhile loads first too.
import { afterEach, expect, it } from "vitest";
import { ManualClock } from "../../src/clock.ts";
import { type App, createApp } from "../../src/daemon/app.ts";
import type { Channel } from "../../src/daemon/push.ts";
import { captureLog } from "../support/log-capture.ts";
import type { Harness } from "../sync/support.ts";
import { openOn, repointed, sleep, stoppedWithThe2Removed, until } from "./push-live.ts";

let h: Harness | undefined;
let next: App | undefined;
afterEach(async () => {
  await next?.stop(2000).catch(() => {});
  next = undefined;
  await h?.close();
  h = undefined;
});

/**
 * The daemon started again (not one-shot: it leads, and its leader start calls push.start()) on the same store and
 * address, on a clock the test moves, with the channels table unreadable (`down`) from the start.
 */
async function restartWithStoreDown(x: Harness, clock: ManualClock) {
  const log = captureLog();
  const listen = new URL(x.world.config.google.push!.public_url).host;
  const app = await createApp(x.world.config, { logger: log.logger, clock, listen, adminListen: "127.0.0.1:0" });
  next = app;
  const store = { down: true, reads: 0 };
  const table = app.store.table<Channel>("channels");
  const entries = table.entries.bind(table);
  table.entries = (...args: Parameters<typeof table.entries>) => {
    store.reads += 1;
    if (!store.down) return entries(...args);
    // biome-ignore lint/correctness/useYield: the store fails before the first entry
    return (async function* () {
      throw new Error("the store did not answer within 500 ms");
    })();
  };
  await app.start();
  const failed = () =>
    log.find((l) => String(l.msg).startsWith("push channels not loaded: the store did not answer")) !== undefined;
  expect(await until(failed)).toBe(true);
  return { app, log, store };
}

const cal = (x: Harness, therapistId: string): string => x.world.calendarOf(therapistId) ?? "";

const state = async (app: App, therapistId: string) =>
  (await app.status()).therapists.find((t) => t.therapistId === therapistId)?.push?.state;

it("a start whose channel load failed loads them again once the store answers: the left-behind channel is stopped, the recorded ones kept and trusted", async () => {
  h = await stoppedWithThe2Removed();
  const [cal1, cal2, cal3] = [cal(h, "th_1"), cal(h, "th_2"), cal(h, "th_3")];
  const before = { cal1: openOn(h.world, cal1), cal3: openOn(h.world, cal3) };
  const clock = new ManualClock(Date.now());
  const { app, store } = await restartWithStoreDown(h, clock);
  await sleep(200);
  // Nothing is known yet: th_2's channel still notifies, th_1's calendar is polled as if it had no channel.
  expect({ cal2: openOn(h.world, cal2).length, th1: await state(app, "th_1"), reads: store.reads }).toEqual({
    cal2: 1,
    th1: "none",
    reads: 1,
  });

  // The store answers again; the next check (10 s later) loads the channels first.
  store.down = false;
  await clock.advance(10_000);
  expect(await until(() => openOn(h!.world, cal2).length === 0)).toBe(true);
  await sleep(200);
  expect({
    cal1: openOn(h.world, cal1),
    cal2: openOn(h.world, cal2),
    cal3: openOn(h.world, cal3),
    // What /status says (and the poller reads): the recorded channels are known and confirmed again.
    th1: await state(app, "th_1"),
    th3: await state(app, "th_3"),
    th2Record: await app.store.table<Channel>("channels").get("th_2"),
  }).toEqual({ ...before, cal2: [], th1: "confirmed", th3: "confirmed", th2Record: undefined });

  // Loaded: from here on the checks renew, they do not read the whole table again.
  const reads = store.reads;
  await clock.advance(3_600_000);
  await sleep(200);
  expect(store.reads).toBe(reads);
}, 30_000);

it("a load that keeps failing is tried again less often, up to hourly", async () => {
  h = await stoppedWithThe2Removed();
  const clock = new ManualClock(Date.now());
  const { store } = await restartWithStoreDown(h, clock);
  const readsAfter = async (ms: number) => {
    await clock.advance(ms);
    await sleep(100);
    return store.reads;
  };
  // 10 s after the first failure, twice as long after each next one, never longer than the hourly check.
  const waits = [10, 20, 40, 80, 160, 320, 640, 1280, 2560, 3600, 3600].map((s) => s * 1000);
  const seen: [number, number][] = [];
  for (const wait of waits) seen.push([await readsAfter(wait - 1), await readsAfter(1)]);
  expect(seen).toEqual(waits.map((_, i) => [i + 1, i + 2]));
}, 30_000);

it("stop() ends the retries: a daemon that stopped leading loads nothing and stops nothing", async () => {
  h = await stoppedWithThe2Removed();
  const cal2 = cal(h, "th_2");
  const clock = new ManualClock(Date.now());
  const { app, store } = await restartWithStoreDown(h, clock);
  app.push.stop();
  store.down = false;
  await clock.advance(2 * 3_600_000);
  await sleep(300);
  expect({ reads: store.reads, cal2: openOn(h.world, cal2).length }).toEqual({ reads: 1, cal2: 1 });
}, 30_000);

it("a reload while the channels are not loaded loads them first: no second channel, the left-behind one stopped", async () => {
  h = await stoppedWithThe2Removed();
  const [cal1, cal2] = [cal(h, "th_1"), cal(h, "th_2")];
  const before1 = openOn(h.world, cal1);
  const clock = new ManualClock(Date.now());
  const { app, store } = await restartWithStoreDown(h, clock);
  // th_3 gets another calendar while the store is still down (the reload's own renewal cannot load the channels).
  const { oldCal, newCal, next: config } = repointed(h.world, "th_3");
  await app.reload(config);
  await sleep(300);
  expect(openOn(h.world, newCal)).toEqual([]);
  expect(openOn(h.world, cal2)).toHaveLength(1);

  // The store answers; a reload now (one that changes something: one that changes nothing leaves the daemon alone)
  // loads the channels before it renews, without waiting for the next check.
  store.down = false;
  const changed = structuredClone(config);
  changed.sync.calendar_poll_seconds += 1;
  await app.reload(changed);
  expect(await until(() => openOn(h!.world, cal2).length === 0 && openOn(h!.world, newCal).length === 1)).toBe(true);
  await sleep(200);
  expect({ cal1: openOn(h.world, cal1), old: openOn(h.world, oldCal), th3: await state(app, "th_3") }).toEqual({
    cal1: before1,
    old: [],
    th3: expect.stringMatching(/^(confirmed|unconfirmed)$/),
  });
  // Loaded once, by the reload; the check 10 s later renews (it does not load again).
  const reads = store.reads;
  await clock.advance(10_000);
  await sleep(200);
  expect(store.reads).toBe(reads);
}, 30_000);
