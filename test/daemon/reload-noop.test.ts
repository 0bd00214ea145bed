// A reload whose file changes nothing (a SIGHUP from log rotation or a config-management job: "configuration reloaded:
// nothing changed") leaves the running daemon alone. It used to stop and start the poller, whose start polls every
// calendar at once: one events.list per mapped calendar, Google quota spent for nothing (review18).
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

it("a reload that changes nothing makes no Google call and no booking request", async () => {
  const world: World = await startWorld({
    therapists: 3,
    configure: (c) => {
      c.sync = { ...c.sync, calendar_poll_seconds: 3600 };
    },
  });
  cleanups.push(() => world.close());
  const log = captureLog("info");
  const app: App = await createApp(structuredClone(world.config), {
    logger: log.logger,
    listen: "127.0.0.1:0",
    adminListen: "127.0.0.1:0",
  });
  cleanups.push(() => app.stop(3000));
  await app.start();
  const runs = () => log.lines.filter((l) => l.msg === "reconciliation finished");
  for (let i = 0; i < 200 && runs().length < 1; i++) await sleep(25);
  expect(runs().length).toBeGreaterThan(0);
  await app.engine.drained();
  await sleep(1000); // the start's first polls
  world.google.resetUsage();
  const bookingBefore = world.booking.requests.length;

  const changes = await app.reload(structuredClone(world.config) as Config);
  expect(log.find((l) => String(l.msg).startsWith("configuration reloaded"))?.msg).toBe(
    "configuration reloaded: nothing changed",
  );
  await sleep(1500);
  await app.engine.drained();
  expect(changes.added).toEqual([]);
  expect(world.google.usage.byMethod).toEqual({});
  expect(world.google.usage.requests).toBe(0);
  expect(world.booking.requests.length - bookingBefore).toBe(0);

  // A reload that changes something still applies it (the poller keeps running with the new interval).
  const next = structuredClone(world.config) as Config;
  next.sync = { ...next.sync, calendar_poll_seconds: 1800 };
  const applied = await app.reload(next);
  expect(applied.settings).toEqual(["sync.calendar_poll_seconds"]);
});
