// A reload re-points th_1; the retire's first read of th_1's record is out (a slow store round trip) while a renewal
// through the new gateway (the hourly check, a suspect channel's replacement) opens th_1's channel on the new calendar,
// records it and confirms it. The retire's read answers with the old record: #newerOpened compares the renewal's
// channel with that stale read, says no, and retire() calls health.closed(th_1), wiping the health of the channel
// just opened (recorded and open at Google): /status says "none" and the calendar is polled at the short interval
// until the channel's next renewal (days), since the hourly check finds it recorded and not due, and its
// notifications find no state to confirm.
import { afterEach, expect, it } from "vitest";
import { liveDaemon, openOn, repointed, sleep, until } from "./push-live.ts";

let d: Awaited<ReturnType<typeof liveDaemon>> | undefined;
afterEach(async () => {
  await d?.close();
  d = undefined;
});

it("a renewal recorded while the retire's first read is out keeps its channel's health", async () => {
  d = await liveDaemon(1);
  const { world, app } = d;
  const { oldCal, newCal, next } = repointed(world);
  const open = (cal: string) => openOn(world, cal);
  const oldId = open(oldCal)[0];

  const table = app.store.table<{ channelId: string }>("channels");
  const realGet = table.get.bind(table);
  let retireReads = 0;
  let firstReadOut = false;
  let releaseFirst!: () => void;
  const firstGate = new Promise<void>((r) => (releaseFirst = r));
  (table as { get: typeof table.get }).get = async (key: string) => {
    const fromRetire = (new Error().stack?.includes("PushChannels.retire") ?? false) && key === "th_1";
    const n = fromRetire ? ++retireReads : 0;
    const value = await realGet(key);
    if (n === 1) {
      firstReadOut = true;
      await firstGate; // the retire's first read answers late (it read the old record)
    }
    return value;
  };

  const reloading = app.reload(next);
  expect(await until(() => firstReadOut)).toBe(true);
  await app.push.renew(); // the hourly check: th_1's channel opened on the new calendar, recorded, the old one stopped
  const renewed = open(newCal)[0];
  expect(renewed).toBeDefined();
  expect((await realGet("th_1"))?.channelId).toBe(renewed);
  await world.google.settleNotifications();
  expect(await until(() => app.pushHealth.state("th_1", Date.now()) === "confirmed")).toBe(true);
  releaseFirst(); // the retire goes on with the old record it read
  await reloading;
  await sleep(300); // the reload's own renewal
  await app.push.renew(); // and the next check
  await sleep(300);
  const stored = (await realGet("th_1"))?.channelId;
  expect({ oldId, old: open(oldCal), open: open(newCal), stored }).toEqual({
    oldId,
    old: [],
    open: [renewed],
    stored: renewed,
  });
  // The channel is open, recorded and confirmed: its health says so, also after a notification on it.
  await world.google.notify(newCal);
  await sleep(200);
  expect(app.pushHealth.state("th_1", Date.now())).toBe("confirmed");
}, 60_000);
