// A poll interval longer than one timer can wait (2^31-1 ms, ~24.8 days) does not spin the daemon (review18). The
// schema refuses one now (sync.calendar_poll_seconds at most a day), and the clock sleeps in steps whatever it is
// given: Node fired such a timer after 1 ms, so the poller and the credentials check woke every millisecond (idle CPU
// 15 ms -> 430 ms per 2 s, thousands of TimeoutOverflowWarnings).
import { afterEach, expect, it } from "vitest";
import type { Config } from "../../src/config/schema.ts";
import { type App, createApp } from "../../src/daemon/app.ts";
import { startWorld, type World } from "../../src/simulator/world.ts";
import { captureLog } from "../support/log-capture.ts";

const cleanups: (() => Promise<unknown>)[] = [];
afterEach(async () => {
  for (const c of cleanups.splice(0).reverse()) await c().catch(() => {});
});
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

it("a daemon given a poll interval past the timers' limit idles without a timer overflow", async () => {
  const world: World = await startWorld({ therapists: 2 });
  cleanups.push(() => world.close());
  const config = structuredClone(world.config) as Config;
  config.sync.calendar_poll_seconds = 3_000_000; // past the schema's limit: the clock must hold anyway
  let warnings = 0;
  const onWarning = (w: Error) => {
    if (w.name === "TimeoutOverflowWarning") warnings++;
  };
  process.on("warning", onWarning);
  cleanups.push(async () => process.off("warning", onWarning));
  const log = captureLog("info");
  const app: App = await createApp(config, { logger: log.logger, listen: "127.0.0.1:0", adminListen: "127.0.0.1:0" });
  cleanups.push(() => app.stop(3000));
  await app.start();
  for (let i = 0; i < 200 && !log.lines.some((l) => l.msg === "reconciliation finished"); i++) await sleep(25);
  await app.engine.drained();
  world.google.resetUsage();
  const before = process.cpuUsage();
  await sleep(1500);
  const cpu = process.cpuUsage(before);
  expect(warnings).toBe(0);
  // Spinning took ~300 ms of CPU per 1.5 s; idle is a few ms (a generous bound for a loaded machine).
  expect((cpu.user + cpu.system) / 1000).toBeLessThan(150);
  expect(world.google.usage.requests).toBe(0);
});
