// A renewal through the reload's new gateway that sets its entry and starts its record write while a retire's first
// read of the therapist's record is out: the retire then forgot that entry (not the one it had read), its check before
// removing the record saw none, and a re-read taken before the write landed removed the renewal's record: open at
// Google, recorded nowhere, and the next check opened a second channel beside it.
import { afterEach, expect, it } from "vitest";
import { liveDaemon, openOn, repointed, sleep, until } from "./push-live.ts";

let d: Awaited<ReturnType<typeof liveDaemon>> | undefined;
afterEach(async () => {
  await d?.close();
  d = undefined;
});

type Entry = { key: string; value: { channelId?: string; opening?: boolean } };

it("an entry set during the retire's first read is not lost to the retire", async () => {
  d = await liveDaemon(1);
  const { world, app } = d;
  const { oldCal, newCal, next } = repointed(world);
  const open = (cal: string) => openOn(world, cal);
  const oldId = open(oldCal)[0];

  const table = app.store.table<{ channelId: string }>("channels");
  const realGet = table.get.bind(table);
  const realSetMany = (table as unknown as { setMany(e: Entry[]): Promise<void> }).setMany.bind(table);
  let retireReads = 0;
  let firstReadOut = false;
  let secondReadOut = false;
  let releaseFirst!: () => void;
  const firstGate = new Promise<void>((r) => (releaseFirst = r));
  let releaseSecond!: () => void;
  const secondGate = new Promise<void>((r) => (releaseSecond = r));
  (table as { get: typeof table.get }).get = async (key: string) => {
    const fromRetire = (new Error().stack?.includes("PushChannels.retire") ?? false) && key === "th_1";
    const n = fromRetire ? ++retireReads : 0;
    const value = await realGet(key);
    if (n === 1) {
      firstReadOut = true;
      await firstGate; // the retire's first read answers late (it read the old record)
    } else if (n === 2) {
      secondReadOut = true;
      await secondGate; // its re-read answers late (it read the old record: the renewal's write still out)
    }
    return value;
  };
  let writeOut = false;
  let releaseWrite!: () => void;
  const writeGate = new Promise<void>((r) => (releaseWrite = r));
  (table as unknown as { setMany(e: Entry[]): Promise<void> }).setMany = async (entries: Entry[]) => {
    if (!writeOut && entries.some((e) => e.key === "th_1" && e.value?.channelId !== oldId && !e.value.opening)) {
      writeOut = true;
      await writeGate; // the renewal's record write is slow
    }
    return realSetMany(entries);
  };

  // The reload's own renewal, and any other, would race: keep renew() quiet until we call it.
  const reloading = app.reload(next);
  expect(await until(() => firstReadOut)).toBe(true); // the retire's first read of th_1 is out
  const renewing = app.push.renew(); // the hourly check: th_1 is on another calendar now, a channel opened there
  expect(await until(() => writeOut)).toBe(true); // its entry is set, its record write out
  releaseFirst(); // the retire goes on: it deletes the entry, stops the old channel, reads again
  expect(await until(() => secondReadOut)).toBe(true);
  releaseWrite(); // the renewal's record lands...
  for (let i = 0; i < 100 && (await realGet("th_1"))?.channelId === oldId; i++) await sleep(10);
  const renewed = open(newCal)[0];
  const recordedBefore = (await realGet("th_1"))?.channelId === renewed;
  releaseSecond(); // ...before the retire's re-read answers (with the old record)
  await reloading;
  await renewing;
  await sleep(300);
  const stored = (await realGet("th_1"))?.channelId;
  expect(recordedBefore).toBe(true);
  expect.soft({ old: open(oldCal), open: open(newCal), stored }).toEqual({ old: [], open: [renewed], stored: renewed });
  await app.push.renew(); // the next check
  await sleep(300);
  expect.soft({ openAfterNextCheck: open(newCal).length }).toEqual({ openAfterNextCheck: 1 });
}, 60_000);
