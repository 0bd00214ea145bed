// The notices between processes sharing one SQLite file (the file's counterpart of Redis pub/sub): a notice written
// through one store reaches the listeners of its channel on another store of the same file within about a second,
// in order, once; notices written before a store listened are not delivered (as with a Redis subscription); a
// `:memory:` store (one process only) has none. Real files, two stores as two daemons would open them.
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterEach, expect, it } from "vitest";
import { openStore, type Store } from "../../src/store/store.ts";

const cleanups: (() => unknown)[] = [];
afterEach(async () => {
  for (const c of cleanups.splice(0).reverse()) await c();
});

async function twoStores(): Promise<[Store, Store]> {
  const dir = mkdtempSync(join(tmpdir(), "calbridge-notices-"));
  cleanups.push(() => rmSync(dir, { recursive: true, force: true }));
  const url = `sqlite://${join(dir, "calbridge.sqlite")}`;
  const a = await openStore(url);
  cleanups.push(() => a.close());
  const b = await openStore(url);
  cleanups.push(() => b.close());
  return [a, b];
}

it("a notice written by one process reaches the other's listeners of that channel, in order and once", async () => {
  const [leader, standby] = await twoStores();
  await standby.notices!.publish("inbox", "before-anyone-listened");
  const heard: string[] = [];
  const other: string[] = [];
  const stop = await leader.notices!.subscribe("inbox", (m) => heard.push(m));
  const stopOther = await leader.notices!.subscribe("push", (m) => other.push(m));
  cleanups.push(stop, stopOther);
  await standby.notices!.publish("inbox", "evt_1");
  await standby.notices!.publish("push", "th_a");
  await standby.notices!.publish("inbox", "evt_2");
  await expect.poll(() => heard, { timeout: 3000, interval: 50 }).toEqual(["evt_1", "evt_2"]);
  expect(other).toEqual(["th_a"]);
  // Read again a few times: nothing is delivered twice.
  await new Promise((r) => setTimeout(r, 2200));
  expect(heard).toEqual(["evt_1", "evt_2"]);

  // Once no one listens, nothing more is read.
  stop();
  await standby.notices!.publish("inbox", "evt_3");
  await new Promise((r) => setTimeout(r, 1500));
  expect(heard).toEqual(["evt_1", "evt_2"]);
  expect(other).toEqual(["th_a"]);
  // Fresh notices are kept (a minute): the purge leaves them.
  expect(await standby.purgeExpired()).toBe(0);
}, 15_000);

it("a store only one process can use has no notices", async () => {
  const store = await openStore("sqlite://:memory:");
  cleanups.push(() => store.close());
  expect(store.notices).toBeUndefined();
});
