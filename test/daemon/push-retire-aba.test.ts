// A -> B -> A quickly (calendar `primary`, `impersonate` alice -> bob -> alice) while reload 1's renewal through bob's
// gateway still has its record write out (SQLite busy while the other replica writes, a Redis round trip). Reload 2's
// retire of bob's gateway read no record yet and returned; the write then landed, bob's channel recorded as th_1's,
// and reload 2's renewal (same "primary", same address, not due) kept it: alice's calendar without a channel for ~6
// days. A retire now waits for any renewal's record write of the therapist first.
import { afterEach, expect, it } from "vitest";
import type { App } from "../../src/daemon/app.ts";
import type { World } from "../../src/simulator/world.ts";
import { liveDaemon, openOn, sleep, until } from "./push-live.ts";

let close: (() => Promise<void>) | undefined;
afterEach(async () => {
  await close?.();
  close = undefined;
});

/** Every therapist on calendar_id `primary` (another `impersonate` is another account's calendar, same id). */
async function primaryDaemon(n: number): Promise<{ world: World; app: App }> {
  const d = await liveDaemon(n, { primary: true });
  close = d.close;
  return d;
}

type Entry = { key: string; value: { subject?: string; opening?: boolean } };

it("A->B->A: a record write of B's channel still out at the second reload does not leave B's channel as th_1's", async () => {
  const { world, app } = await primaryDaemon(1);
  const alice = world.config.therapists[0]!.impersonate ?? "th_1@clinic.test";
  const bob = "th_1-bob@clinic.test";
  const cfg = (account: string) => {
    const next = structuredClone(world.config);
    next.therapists = next.therapists.map((t) => ({ ...t, impersonate: account }));
    return next;
  };
  const table = app.store.table<unknown>("channels") as unknown as { setMany(e: Entry[]): Promise<void> };
  const realSetMany = table.setMany.bind(table);
  let writeOut = false;
  let releaseWrite!: () => void;
  const writeGate = new Promise<void>((r) => (releaseWrite = r));
  table.setMany = async (entries: Entry[]) => {
    if (!writeOut && entries.some((e) => e.key === "th_1" && e.value?.subject === bob && !e.value.opening)) {
      writeOut = true;
      await writeGate; // the write is slow
    }
    return realSetMany(entries);
  };
  await app.reload(cfg(bob)); // alice's channel retired; the reload's renewal opens bob's
  expect(await until(() => writeOut)).toBe(true);
  const back = app.reload(cfg(alice)); // back again, quickly
  await sleep(100);
  releaseWrite(); // the slow write lands
  await back;
  await sleep(500); // reload 2's own renewal
  await world.google.settleNotifications();
  await app.push.renew(); // and the next check
  await sleep(300);
  const open = (account: string) => openOn(world, account);
  const stored = await app.store.table<{ subject?: string }>("channels").get("th_1");
  expect
    .soft({ bob: open(bob), alice: open(alice).length, storedSubject: stored?.subject })
    .toEqual({ bob: [], alice: 1, storedSubject: alice });
}, 60_000);
