// A reconciliation's deletion of a stray waits for its appointment's turn (SyncEngine.exclusive, 48ea1dc). The lease
// was checked before that wait, never after it, and the deletion ran outside any write guard: a replica that lost the
// lease while a sync of the appointment held its key (a slow Google read here; Google retries, quota waits, booking
// 429 pauses in general) still deleted the event once its turn came, beside a new leader that may be moving the
// appointment back into that calendar. It now checks after the wait and before each attempt (review5).
import { createClient } from "redis";
import { afterEach, describe, expect, it } from "vitest";
import { eventIdFor } from "../../src/calendar/ids.ts";
import type { Config } from "../../src/config/schema.ts";
import { createApp } from "../../src/daemon/app.ts";
import { silentLogger } from "../../src/log.ts";
import { startWorld, type World } from "../../src/simulator/world.ts";
import { LEADER_KEY } from "../../src/store/lease.ts";
import { redisTestsEnabled, useRedisServer } from "../support/redis.ts";
import { waitFor } from "../support/wait-for.ts";

const HOUR = 3_600_000;

async function world(storeUrl: string, cleanups: (() => Promise<void>)[]) {
  const w = await startWorld({
    therapists: ["th_a", "th_b"],
    storeUrl,
    configure: (c) => {
      c.store = { ...c.store, url: storeUrl, lease_seconds: 2 };
      c.sync = { ...c.sync, reconcile_cron: "0 0 1 1 *" };
    },
  });
  cleanups.push(() => w.close());
  return w;
}

async function replica(w: World, storeUrl: string, cleanups: (() => Promise<void>)[]) {
  const config: Config = { ...w.config, store: { ...w.config.store, url: storeUrl } };
  const app = await createApp(config, { logger: silentLogger, listen: "127.0.0.1:0", adminListen: "127.0.0.1:0" });
  cleanups.push(() => app.stop(3000));
  return { app };
}

const booked = (w: World, therapistId: string, inHours: number) => {
  const start = new Date(Date.now() + inHours * HOUR);
  start.setUTCMinutes(0, 0, 0);
  return String(w.booking.create({ therapist_id: therapistId, start_time: start.toISOString() }, { force: true }).id);
};

describe.skipIf(!redisTestsEnabled("ha-lost-lease-stray"))("a stray's deletion and the lease", () => {
  const redis = useRedisServer();
  const cleanups: (() => Promise<void>)[] = [];
  afterEach(async () => {
    for (const c of cleanups.splice(0).reverse()) await c().catch(() => {});
  });

  it("a replica that lost the lease while waiting for the appointment's turn sends no stray deletion", async () => {
    const url = redis().url;
    const w = await world(url, cleanups);
    const other = createClient({ url });
    await other.connect();
    cleanups.push(() => other.flushAll().then(() => other.quit().then(() => {})));
    const { app } = await replica(w, url, cleanups);
    await app.start();
    await waitFor("lead", () => app.lease.isLeader, 10_000);
    await app.reconcile();
    await app.engine.idle();

    // A copy left behind: reassigned th_a -> th_b, the old event's deletion refused once.
    const id = booked(w, "th_a", 30);
    expect(await app.engine.syncAppointment(id, { reason: "test", priority: "webhook" })).toMatchObject({ ok: true });
    const eventId = eventIdFor(id);
    const calA = w.calendarOf("th_a");
    w.google.faults.next(1, { status: 403, reason: "forbidden", match: /DELETE .*th_a%40clinic\.test\/events\// });
    w.booking.reassign(id, "th_b", { force: true });
    await app.engine.syncAppointment(id, { reason: "test", priority: "webhook" }).catch(() => {});
    await app.engine.idle();
    expect(w.google.event(calA, eventId)?.status).toBe("confirmed");
    expect(await app.sync.links.get(id)).toMatchObject({ therapistId: "th_b", present: true });

    // A sync of the appointment holds its key: its read of th_b's event is slow.
    let release!: () => void;
    const released = new Promise<void>((r) => (release = r));
    let held = false;
    w.google.faults.holdNext(new RegExp(`GET .*th_b%40clinic\\.test/events/${eventId}`), async () => {
      held = true;
      await released;
    });
    const syncing = app.engine
      .syncAppointment(id, { reason: "test", priority: "webhook", calendar: { reread: true } })
      .catch((e: unknown) => e);
    await waitFor("the sync to hold the key", () => held, 5000);

    // The reconciliation plans the copy's deletion and waits for the appointment's turn (observed, not changed).
    let waiting = false;
    const exclusive = app.engine.exclusive;
    app.engine.exclusive = (k, fn) => {
      waiting = true;
      return exclusive(k, fn);
    };
    const run = app.reconcile({ force: true }).catch((e: unknown) => e);
    await waitFor("the stray deletion to wait for its turn", () => waiting, 10_000);

    // Meanwhile another replica takes the lease.
    await other.set(LEADER_KEY, "other-replica:1:abcdef", { PX: 60_000 });
    await waitFor("the lease to be lost", () => !app.lease.isLeader, 5000);
    expect(w.google.event(calA, eventId)?.status).toBe("confirmed");
    const deletes: boolean[] = []; // whether the replica led when each DELETE of th_a's event arrived
    w.google.faults.holdNext(new RegExp(`DELETE .*th_a%40clinic\\.test/events/${eventId}`), async () => {
      deletes.push(app.lease.isLeader);
    });
    release();
    await syncing;
    await run;
    expect(app.lease.isLeader).toBe(false);
    expect({ deletes, status: w.google.event(calA, eventId)?.status }).toEqual({ deletes: [], status: "confirmed" });
  }, 40_000);
});
