// A leader that loses the lease while its reconciliation is still listing must not write its plan afterwards: the
// next leader writes the same calendars (it could re-create the event of an appointment cancelled meanwhile). The
// engine of a daemon refuses every sync while the replica does not lead, and the run is given up, not failed.
import { performance } from "node:perf_hooks";
import { createClient } from "redis";
import { afterEach, describe, expect, it } from "vitest";
import type { Config } from "../../src/config/schema.ts";
import { type App, createApp } from "../../src/daemon/app.ts";
import { startWorld, type World } from "../../src/simulator/world.ts";
import { LEADER_KEY } from "../../src/store/lease.ts";
import { EngineStoppedError } from "../../src/sync/stopped.ts";
import { captureLog } from "../support/log-capture.ts";
import { redisTestsEnabled, useRedisServer } from "../support/redis.ts";

const HOUR = 3_600_000;

async function waitFor(what: string, predicate: () => boolean | Promise<boolean>, timeoutMs: number): Promise<void> {
  const start = performance.now();
  while (!(await predicate())) {
    if (performance.now() - start > timeoutMs) throw new Error(`timed out after ${timeoutMs} ms waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 10));
  }
}

function mirrors(world: World, therapistId: string, appointmentId: string): Record<string, unknown>[] {
  return world.google.events(world.calendarOf(therapistId)).filter((e) => {
    const props = (e.extendedProperties as { private?: Record<string, string> } | undefined)?.private;
    return props?.calbridge_appointment_id === appointmentId && e.status !== "cancelled";
  });
}

describe.skipIf(!redisTestsEnabled("ha-lost-lease-reconcile"))("a leader losing its lease mid-reconciliation", () => {
  const redis = useRedisServer();
  const cleanups: (() => Promise<void>)[] = [];
  afterEach(async () => {
    for (const c of cleanups.splice(0).reverse()) await c().catch(() => {});
  });

  it("writes nothing of its plan afterwards and gives the run up without counting a failure", async () => {
    const world = await startWorld({
      therapists: ["th_a"],
      storeUrl: redis().url,
      configure: (c) => {
        c.store = { url: redis().url, lease_seconds: 2 };
        c.sync = { ...c.sync, reconcile_cron: "0 0 1 1 *" };
      },
    });
    cleanups.push(() => world.close());
    const config: Config = { ...world.config, store: { ...world.config.store, url: redis().url } };
    const log = captureLog("info");
    const app: App = await createApp(config, { logger: log.logger, listen: "127.0.0.1:0" });
    cleanups.push(() => app.stop(3000));
    await app.start();
    // A freshly won lease is held 2/3 of its time before the replica leads (lease.ts).
    await waitFor("the replica to lead", () => app.lease.isLeader, 10_000); // a positive wait: 1333 ms of hold, then Redis round trips (seconds under load)
    const meta = app.store.table<number>("meta");
    await waitFor(
      "the start-up reconciliation",
      async () => (await meta.get("last_reconcile_success")) !== undefined,
      10_000,
    );
    await app.reconcile(); // the start-up run is over (a later call would join it otherwise)
    await app.engine.idle();
    const succeededAt = await meta.get("last_reconcile_success");

    // New bookings, no webhook: only a reconciliation brings them in.
    const ids: string[] = [];
    for (let i = 0; i < 3; i++) {
      const start = new Date(Date.now() + (30 + i) * HOUR);
      start.setUTCMinutes(0, 0, 0);
      ids.push(
        String(world.booking.create({ therapist_id: "th_a", start_time: start.toISOString() }, { force: true }).id),
      );
    }

    // The booking API is slow (3 s an answer): the run is still listing when another replica takes the lease.
    world.booking.faults.latencyMs = 3000;
    const run = app.reconcile().then(
      (report) => report,
      (err: unknown) => err,
    );
    await new Promise((r) => setTimeout(r, 200));
    const other = createClient({ url: redis().url });
    await other.connect();
    cleanups.push(() => other.quit().then(() => {}));
    await other.set(LEADER_KEY, "other-replica:1:abcdef", { PX: 60_000 });
    await waitFor("the lease to be lost", () => !app.lease.isLeader, 3000);

    const outcome = await run;
    world.booking.faults.latencyMs = 0;
    await app.engine.idle();
    await new Promise((r) => setTimeout(r, 500));
    expect(app.lease.isLeader).toBe(false);
    // Given up: its plan's syncs were refused, and nothing of it reached the calendar.
    expect(ids.map((id) => mirrors(world, "th_a", id).length)).toEqual([0, 0, 0]);
    expect(outcome).toBeInstanceOf(EngineStoppedError);
    expect(log.find((l) => String(l.msg).startsWith("reconciliation given up: leadership was lost"))).toBeDefined();
    expect(log.find((l) => l.msg === "reconciliation failed; nothing was deleted")).toBeUndefined();
    expect(await meta.get("last_reconcile_success")).toBe(succeededAt);

    // The standby never needed the engine, but a sync asked of it now is refused, not run.
    await expect(app.engine.syncAppointment(ids[0]!, { reason: "test", priority: "webhook" })).rejects.toBeInstanceOf(
      EngineStoppedError,
    );
    expect(mirrors(world, "th_a", ids[0]!)).toHaveLength(0);
  }, 30_000);
});
