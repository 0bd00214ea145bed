// A retire that goes on after the lease was lost (the reload checked leadership once, before its loop; stopping cleared
// this replica's memory of what its renewals opened) stopped the new account's channel with the old account's
// credentials (Google answers such a stop "not found": open, notifying for a week) and removed its record.
import { afterEach, expect, it } from "vitest";
import type { App } from "../../src/daemon/app.ts";
import type { World } from "../../src/simulator/world.ts";
import { liveDaemon, openOn, sleep, until } from "./push-live.ts";

const DAY = 86_400_000;
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

it("a retire that goes on after the lease is lost leaves the new account's recorded channel alone", async () => {
  const { world, app } = await primaryDaemon(2);
  const newAccount = (id: string) => `${id}-new@clinic.test`;
  const next = structuredClone(world.config);
  next.therapists = next.therapists.map((t) => ({ ...t, impersonate: newAccount(t.therapist_id) }));

  let release!: () => void;
  const gate = new Promise<void>((r) => (release = r));
  let arrived = false;
  world.google.faults.holdNext(/channels\/stop/, () => {
    arrived = true;
    return gate;
  });
  const reloading = app.reload(next);
  expect(await until(() => arrived)).toBe(true); // th_1's retire: its stop is out
  await app.push.renew(Date.now() + 7 * DAY - 3_600_000); // the hourly check: both new channels opened and recorded
  const open = (account: string) => openOn(world, account);
  const opened = open(newAccount("th_2"));
  const table = app.store.table<{ channelId: string; subject?: string }>("channels");
  expect((await table.get("th_2"))?.channelId).toBe(opened[0]);

  await app.lease.stop({ release: true }); // the lease is lost: leader work stops (push.stop())
  await sleep(300);
  const before = world.google.requestLog.length;
  release();
  await reloading; // th_2's retire runs now
  await sleep(300);
  const stopsWithOldCreds = world.google.requestLog
    .slice(before)
    .filter((r) => r.path.endsWith("/channels/stop") && r.subject === "th_2@clinic.test").length;
  const stored = await table.get("th_2");
  expect
    .soft({ open: open(newAccount("th_2")), stored: stored?.channelId, stopsWithOldCreds })
    .toEqual({ open: opened, stored: opened[0], stopsWithOldCreds: 0 });
}, 60_000);
