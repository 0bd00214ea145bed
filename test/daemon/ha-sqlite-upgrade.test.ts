// The first rolling update to the build with the SQLite leader lease: the old pod still runs a build that takes no lease
// (it always led on SQLite) and keeps only its heartbeat, `calbridge:runner` in meta (written every L/3 with a ttl of L).
// The new daemon must stand by while that heartbeat is fresh, not lead beside it, and lead once the old one stops.
import { afterEach, describe, expect, it } from "vitest";
import { type App, createApp } from "../../src/daemon/app.ts";
import { startWorld, type World } from "../../src/simulator/world.ts";
import { openStore } from "../../src/store/store.ts";
import { captureLog } from "../support/log-capture.ts";

const LEASE_SECONDS = 3;
const cleanups: (() => Promise<unknown>)[] = [];
afterEach(async () => {
  for (const c of cleanups.splice(0).reverse()) await c().catch(() => {});
});

async function world(): Promise<World> {
  const w = await startWorld({
    therapists: ["th_a"],
    configure: (c) => {
      c.store = { ...c.store, lease_seconds: LEASE_SECONDS };
      c.sync = { ...c.sync, reconcile_cron: "0 0 1 1 *" };
    },
  });
  cleanups.push(() => w.close());
  return w;
}

describe("a rolling update from a build without the SQLite lease", () => {
  it("stands by while the earlier build's heartbeat is fresh, says why, and leads once that daemon stops", async () => {
    const w = await world();
    expect(w.config.store.url.startsWith("sqlite://")).toBe(true);
    // The earlier build in the old pod (its sqlite-runners.ts): the heartbeat, kept fresh as it did.
    const old = await openStore(w.config.store.url);
    const meta = old.table<{ holder: string; host: string; pid: number; at: number }>("meta");
    const entry = { holder: "old-pod:1:abcd1234", host: "old-pod", pid: 1 };
    const beat = () => meta.set("calbridge:runner", { ...entry, at: Date.now() }, LEASE_SECONDS * 1000);
    await beat();
    const timer = setInterval(() => void beat(), (LEASE_SECONDS * 1000) / 3);
    cleanups.push(async () => {
      clearInterval(timer);
      await old.close();
    });

    const log = captureLog("info");
    const app: App = await createApp(w.config, {
      logger: log.logger,
      listen: "127.0.0.1:0",
      adminListen: "127.0.0.1:0",
    });
    cleanups.push(() => app.stop(3000));
    await app.start();
    const standing = Date.now();
    while (Date.now() - standing < 1500) {
      expect(app.lease.isLeader, "led beside a running earlier build").toBe(false);
      await new Promise((r) => setTimeout(r, 50));
    }
    expect(log.lines).toContainEqual(
      expect.objectContaining({
        level: 40,
        other_host: "old-pod",
        other_pid: 1,
        msg: expect.stringContaining("earlier calbridge build"),
      }),
    );

    // The old pod stops (its orderly stop deletes the heartbeat): the new daemon leads at its next read.
    clearInterval(timer);
    await meta.delete("calbridge:runner");
    await expect.poll(() => app.lease.isLeader, { timeout: 3000 }).toBe(true);
  }, 30_000);
});
