// A retire reads the therapist's record again before removing it; a renewal through the newer gateway whose record
// write crosses that read had its record removed by the stale read: open at Google, recorded under no therapist, and
// the next check opened a second one beside it.
import { afterEach, expect, it } from "vitest";
import { liveDaemon, openOn, repointed, sleep, until } from "./push-live.ts";

let d: Awaited<ReturnType<typeof liveDaemon>> | undefined;
afterEach(async () => {
  await d?.close();
  d = undefined;
});

it("a retire's re-read that crosses the newer renewal's record write keeps that record", async () => {
  d = await liveDaemon(1);
  const { world, app } = d;
  const { oldCal, newCal, next } = repointed(world);
  const open = (cal: string) => openOn(world, cal);

  let releaseStop!: () => void;
  const stopGate = new Promise<void>((r) => (releaseStop = r));
  let stopOut = false;
  world.google.faults.holdNext(/channels\/stop/, () => {
    stopOut = true;
    return stopGate;
  });
  const reloading = app.reload(next);
  expect(await until(() => stopOut)).toBe(true); // the retire's stop of the old channel is out

  let releaseWatch!: () => void;
  const watchGate = new Promise<void>((r) => (releaseWatch = r));
  let watchOut = false;
  world.google.faults.holdNext(/events\/watch/, () => {
    watchOut = true;
    return watchGate;
  });
  const renewing = app.push.renew(); // the hourly check: th_1's record is on another calendar, replaced
  expect(await until(() => watchOut)).toBe(true);

  // The retire's re-read of th_1: its answer comes back late.
  const table = app.store.table<{ channelId: string }>("channels");
  const realGet = table.get.bind(table);
  let readDone = false;
  let releaseRead!: () => void;
  const readGate = new Promise<void>((r) => (releaseRead = r));
  (table as { get: typeof table.get }).get = async (key: string) => {
    const fromRetire = new Error().stack?.includes("retire") ?? false;
    const value = await realGet(key);
    if (key === "th_1" && fromRetire && !readDone) {
      readDone = true;
      await readGate;
    }
    return value;
  };
  releaseStop();
  await until(() => readDone, 1000); // (1ae4979 reads nothing here: it asks #openedWith)
  releaseWatch(); // the renewal's answer: #openedWith set, the new record written
  expect(await until(() => open(newCal).length === 1)).toBe(true);
  const renewed = open(newCal)[0];
  for (let i = 0; i < 100 && (await table.getMany(["th_1"]))[0]?.channelId !== renewed; i++) await sleep(10);
  const recordedBefore = (await table.getMany(["th_1"]))[0]?.channelId === renewed;
  releaseRead();
  await reloading;
  await renewing;
  await sleep(300); // the reload's own renewal
  await app.push.renew(); // and the next check
  await sleep(300);
  const stored = (await table.getMany(["th_1"]))[0]?.channelId;
  expect(recordedBefore).toBe(true); // the renewal's record was written before the retire went on
  expect.soft({ old: open(oldCal), open: open(newCal), stored }).toEqual({
    old: [],
    open: [renewed],
    stored: renewed,
  });
}, 60_000);
