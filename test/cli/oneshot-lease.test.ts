// One-shot commands beside a running daemon (an ops person in the container while `calbridge run` leads): `reconcile`
// writes the same calendars and booking service as the daemon, so it takes the store's leader lease for its duration
// when no daemon holds it (and leaves none behind), and is refused (exit 1, the holder's host and pid named, nothing
// written) while one leads; `reconcile --dry-run` still runs beside it. `purge` is refused only in a calendar the
// leading daemon syncs (it would read the deletions as the therapist's and write them back as cancellations); a
// therapist it no longer maps is purged beside it, as the README says. SQLite and Redis, real processes, real HTTP.
import { hostname } from "node:os";
import { afterEach, describe, expect, it } from "vitest";
import type { Config } from "../../src/config/schema.ts";
import { type App, createApp } from "../../src/daemon/app.ts";
import { startWorld, type World } from "../../src/simulator/world.ts";
import { LEADER_KEY } from "../../src/store/lease.ts";
import { LEASE_ROW_KEY, openStore } from "../../src/store/store.ts";
import { captureLog } from "../support/log-capture.ts";
import { redisTestsEnabled, useRedisServer } from "../support/redis.ts";
import { runCliProcess as cli, writeConfig } from "./support.ts";

const DAY = 86_400_000;
const cleanups: (() => Promise<unknown>)[] = [];
afterEach(async () => {
  for (const c of cleanups.splice(0).reverse()) await c().catch(() => {});
});

async function world(storeUrl?: string): Promise<World> {
  const w = await startWorld({
    therapists: ["th_anna", "th_ben"],
    ...(storeUrl ? { storeUrl } : {}),
    configure: (c) => {
      c.store = { ...c.store, lease_seconds: 2 };
      c.sync = { ...c.sync, reconcile_cron: "0 0 1 1 *" };
    },
  });
  cleanups.push(() => w.close());
  const now = Date.now();
  w.booking.seed({ therapists: w.therapists, count: 4, from: now + DAY, to: now + 10 * DAY });
  return w;
}

/** A leading daemon in this process (the command runs as another process), its start reconciliation done. */
async function daemon(config: Config): Promise<{ app: App; stop: () => Promise<void> }> {
  const app = await createApp(config, {
    logger: captureLog("warn").logger,
    listen: "127.0.0.1:0",
    adminListen: "127.0.0.1:0",
  });
  let stopped: Promise<void> | undefined;
  const stop = () => (stopped ??= app.stop(3000));
  cleanups.push(stop);
  await app.start();
  const until = Date.now() + 10_000;
  while (!app.lease.isLeader) {
    if (Date.now() > until) throw new Error("the daemon did not lead");
    await new Promise((r) => setTimeout(r, 20));
  }
  await app.reconcile(); // joins the start's run
  return { app, stop };
}

/** What reaches the simulators: Google's writes and every booking API request. */
function counts(w: World) {
  return { google: w.google.writes, booking: w.booking.requests.length };
}

/** Once the daemon's own requests after its reconciliation (enrichments) are over: nothing for a second. */
async function quiet(w: World): Promise<ReturnType<typeof counts>> {
  let last = counts(w);
  for (const until = Date.now() + 15_000; Date.now() < until; ) {
    await new Promise((r) => setTimeout(r, 1000));
    const now = counts(w);
    if (now.google === last.google && now.booking === last.booking) return now;
    last = now;
  }
  throw new Error("the daemon did not settle");
}

const REFUSED = `calbridge: a calbridge daemon leads this store (host ${hostname()}, pid ${process.pid}): a reconciliation here would write the same calendars and booking service beside it; nothing was written. The daemon reconciles at its start and on sync.reconcile_cron: restart it for a reconciliation now (or stop it, then run this command); \`calbridge reconcile --dry-run\` shows the plan beside it\n`;

async function reconcileBesideDaemonThenAlone(w: World, leaseLeft: () => Promise<unknown>) {
  const file = writeConfig(w);
  const d = await daemon(w.config);
  // New bookings the daemon has not seen (no webhook endpoint registered): a reconciliation would write them.
  const now = Date.now();
  w.booking.seed({ therapists: w.therapists, count: 3, from: now + 11 * DAY, to: now + 12 * DAY });
  const before = await quiet(w);
  const refused = await cli(["reconcile", "--config", file]);
  expect(refused).toEqual({ code: 1, stdout: "", stderr: REFUSED });
  expect(counts(w)).toEqual(before);
  expect(d.app.lease.isLeader).toBe(true);

  const dry = await cli(["reconcile", "--dry-run", "--config", file]);
  expect(dry.code, dry.stderr).toBe(0);
  expect(dry.stdout).toMatch(/create/);
  expect(w.google.writes).toBe(before.google);

  await d.stop();
  const alone = await cli(["reconcile", "--config", file]);
  expect(alone.code, alone.stderr).toBe(0);
  expect(w.google.writes).toBeGreaterThan(before.google);
  expect(await leaseLeft()).toBeUndefined();
  // The lease is free: a daemon started now leads.
  const next = await daemon(w.config);
  expect(next.app.lease.isLeader).toBe(true);
}

describe("one-shot commands beside a daemon on SQLite", () => {
  it("reconcile: refused while a daemon leads (holder named, nothing written); alone it runs and leaves no lease", async () => {
    const w = await world();
    await reconcileBesideDaemonThenAlone(w, async () => {
      const store = await openStore(w.config.store.url);
      try {
        return await store.table("meta").get(LEASE_ROW_KEY);
      } finally {
        await store.close();
      }
    });
  });

  it("purge: refused in a calendar the leading daemon syncs; a therapist it no longer maps is purged beside it", async () => {
    const w = await world();
    const file = writeConfig(w);
    expect((await cli(["reconcile", "--config", file])).code).toBe(0); // events and links for both therapists
    // th_ben left the daemon's mapping (the file was edited and the daemon restarted); th_anna is still synced.
    const onlyAnna = { ...w.config, therapists: w.config.therapists.filter((t) => t.therapist_id === "th_anna") };
    await daemon(onlyAnna);
    const before = await quiet(w);
    const anna = await cli(["purge", "--therapist", "th_anna", "--force", "--config", file]);
    expect(anna.code).toBe(1);
    expect(anna.stdout).toBe("");
    expect(anna.stderr).toBe(
      `calbridge: a calbridge daemon leads this store (host ${hostname()}, pid ${process.pid}) and syncs th_anna's calendar ${w.calendarOf("th_anna")}: it would take the deletions for th_anna's own and send them to the booking service as cancellations; nothing was deleted. Remove th_anna from therapists: and reload the daemon (SIGHUP), then purge (or stop the daemon, then purge)\n`,
    );
    expect(counts(w)).toEqual(before);

    const ben = await cli(["purge", "--therapist", "th_ben", "--force", "--config", file]);
    expect(ben.code, ben.stderr).toBe(0);
    expect(ben.stdout).toMatch(/deleted [1-9]\d* events/);
    expect(w.google.writes).toBeGreaterThan(before.google);
  });
});

describe.runIf(redisTestsEnabled("oneshot-lease"))("one-shot commands beside a daemon on Redis", () => {
  const redis = useRedisServer();
  it("reconcile: refused while a daemon leads (holder named, nothing written); alone it runs and leaves no lease", async () => {
    const w = await world(redis().url);
    await reconcileBesideDaemonThenAlone(w, async () => {
      const store = await openStore(w.config.store.url);
      try {
        return (await store.redis?.get(LEADER_KEY)) ?? undefined;
      } finally {
        await store.close();
      }
    });
  });
});
