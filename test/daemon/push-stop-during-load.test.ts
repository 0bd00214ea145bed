// 7cf9d92: stop() is meant to end a term's work ("a daemon that stopped leading loads nothing and stops nothing").
// start() awaits its load, then calls renew() with no check of its term in between. A load still in flight when the
// lease is lost (push.stop()) resolves later, and start()'s renew() then runs with this.#term undefined: renew's
// "loaded first, by the leader" gate is skipped and #stopLeft (no leadership check) stops the channels the load found
// left behind, and removes their records, from a replica that no longer leads.
import { afterEach, expect, it } from "vitest";
import { ManualClock } from "../../src/clock.ts";
import { type App, createApp } from "../../src/daemon/app.ts";
import type { Channel } from "../../src/daemon/push.ts";
import { captureLog } from "../support/log-capture.ts";
import type { Harness } from "../sync/support.ts";
import { openOn, sleep, stoppedWithThe2Removed, until } from "./push-live.ts";

let h: Harness | undefined;
let next: App | undefined;
afterEach(async () => {
  await next?.stop(2000).catch(() => {});
  next = undefined;
  await h?.close();
  h = undefined;
});

it("a start whose load is in flight when the lease is lost: the replica that stopped leading stops nothing", async () => {
  const x = await stoppedWithThe2Removed();
  h = x;
  // th_2 is not in this replica's configuration (removed, or its file not yet reloaded like the other replica's).
  const cal2 = x.world.calendarOf("th_2") ?? "";
  expect(openOn(x.world, cal2)).toHaveLength(1);

  const log = captureLog();
  const listen = new URL(x.world.config.google.push!.public_url).host;
  const app = await createApp(x.world.config, {
    logger: log.logger,
    clock: new ManualClock(Date.now()),
    listen,
    adminListen: "127.0.0.1:0",
  });
  next = app;
  // The channels table answers slowly (a store under load): the start's load is in flight until `release`.
  let release!: () => void;
  const gate = new Promise<void>((r) => (release = r));
  let reading = false;
  const table = app.store.table<Channel>("channels");
  const entries = table.entries.bind(table);
  table.entries = (...args: Parameters<typeof table.entries>) => {
    const inner = entries(...args);
    return (async function* () {
      reading = true;
      await gate;
      yield* inner;
    })();
  };
  await app.start();
  expect(await until(() => reading)).toBe(true);

  await app.lease.stop({ release: true }); // the lease is lost: leader work stops (push.stop())
  await sleep(200);
  const before = x.world.google.requestLog.length;
  release(); // the store answers the load now
  await sleep(1000);
  const stops = x.world.google.requestLog.slice(before).filter((r) => r.path.endsWith("/channels/stop")).length;
  expect({ stops, cal2: openOn(x.world, cal2).length }).toEqual({ stops: 0, cal2: 1 });
}, 30_000);
