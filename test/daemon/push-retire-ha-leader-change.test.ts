// HA: a replica whose reload's retires are under way loses the lease; the other leads, reloads and opens the new
// channels. The first one's retire loop, going on, stopped the new leader's channel with the old account's credentials
// and removed its record. Channels are the leader's: a replica that is not leading retires nothing.
import { afterEach, expect, it } from "vitest";
import type { Config } from "../../src/config/schema.ts";
import { type App, createApp } from "../../src/daemon/app.ts";
import { silentLogger } from "../../src/log.ts";
import { startWorld } from "../../src/simulator/world.ts";
import { waitFor } from "../support/wait-for.ts";
import { openOn, sleep, until } from "./push-live.ts";

const cleanups: (() => Promise<unknown>)[] = [];
afterEach(async () => {
  for (const c of cleanups.splice(0).reverse()) await c().catch(() => {});
});

async function daemon(config: Config): Promise<App> {
  const app = await createApp(config, { logger: silentLogger, listen: "127.0.0.1:0", adminListen: "127.0.0.1:0" });
  let stopped: Promise<void> | undefined;
  cleanups.push(() => (stopped ??= app.stop(3000)));
  await app.start();
  return app;
}

const accounts = { th_a: ["alice@clinic.test", "bob@clinic.test"], th_b: ["ann@clinic.test", "bea@clinic.test"] };
const withAccounts = (c: Config, i: 0 | 1): Config => {
  const next = structuredClone(c);
  next.therapists = next.therapists.map((t) => ({
    ...t,
    calendar_id: "primary",
    impersonate: accounts[t.therapist_id as keyof typeof accounts][i],
  }));
  return next;
};

it("a replica that lost the lease mid retire loop leaves the new leader's channels alone", async () => {
  const w = await startWorld({
    therapists: ["th_a", "th_b"],
    configure: (c) => {
      c.store = { ...c.store, lease_seconds: 2 };
      c.sync = { ...c.sync, reconcile_cron: "0 0 1 1 *", calendar_poll_seconds: 60 };
      c.google.push = { public_url: "https://127.0.0.1:1/webhooks/google", token: "channel-token-0123456789" };
    },
  });
  cleanups.push(() => w.close());
  w.google.requireHttpsChannels = false;
  const open = (cal: string) => openOn(w, cal);
  const configA = withAccounts(w.config, 0);
  const configB = withAccounts(w.config, 0);
  const a = await daemon(configA);
  const b = await daemon(configB);
  expect([a.lease.isLeader, b.lease.isLeader]).toEqual([true, false]);
  await waitFor(
    "A opens the channels",
    () => open("alice@clinic.test").length + open("ann@clinic.test").length === 2,
    10_000,
  );

  let release!: () => void;
  const gate = new Promise<void>((r) => (release = r));
  let arrived = false;
  w.google.faults.holdNext(/channels\/stop/, () => {
    arrived = true;
    return gate;
  });
  const reloadingA = a.reload(withAccounts(configA, 1));
  expect(await until(() => arrived)).toBe(true); // A's retire of th_a: its stop is out
  await a.lease.stop({ release: true }); // A loses the lease
  await waitFor("B leads", () => b.lease.isLeader, 10_000);
  await sleep(500);
  await b.reload(withAccounts(configB, 1));
  await waitFor(
    "B opens bob's and bea's channels",
    () => open("bob@clinic.test").length + open("bea@clinic.test").length === 2,
    10_000,
  );
  const bea = open("bea@clinic.test");
  const before = w.google.requestLog.length;
  release();
  await reloadingA;
  await sleep(300);
  const stored = await b.store.table<{ channelId: string }>("channels").get("th_b");
  const annStops = w.google.requestLog
    .slice(before)
    .filter((r) => r.path.endsWith("/channels/stop") && r.subject === "ann@clinic.test").length;
  expect.soft({ bea: open("bea@clinic.test"), stored: stored?.channelId, annStops }).toEqual({
    bea,
    stored: bea[0],
    annStops: 0,
  });
}, 60_000);
