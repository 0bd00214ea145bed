// HA: which channel a replica's renewal opened is process memory. A replica that opened a therapist's channel while
// leading, took a reload as a standby (no retire there: the leader's), and leads again must not compare its next
// retire with that stale entry: it read "a newer gateway opened one" and left the channel the other leader had opened
// on the previous account's calendar open and recorded; the new account's calendar got no channel until it was due.
// A retire leaves a channel only if the one a newer gateway opened is the therapist's record.
import { afterEach, expect, it } from "vitest";
import type { Config } from "../../src/config/schema.ts";
import { type App, createApp } from "../../src/daemon/app.ts";
import { silentLogger } from "../../src/log.ts";
import { startWorld } from "../../src/simulator/world.ts";
import { waitFor } from "../support/wait-for.ts";
import { openOn, sleep } from "./push-live.ts";

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

const withAccount = (c: Config, account: string): Config => {
  const next = structuredClone(c);
  next.therapists = next.therapists.map((t) => ({ ...t, calendar_id: "primary", impersonate: account }));
  return next;
};

it("a replica leading again after a standby reload stops the previous account's channel at its next re-point", async () => {
  const w = await startWorld({
    therapists: ["th_a"],
    configure: (c) => {
      c.store = { ...c.store, lease_seconds: 2 };
      c.sync = { ...c.sync, reconcile_cron: "0 0 1 1 *", calendar_poll_seconds: 60 };
      c.google.push = { public_url: "https://127.0.0.1:1/webhooks/google", token: "channel-token-0123456789" };
      c.therapists = c.therapists.map((t) => ({ ...t, calendar_id: "primary", impersonate: "alice@clinic.test" }));
    },
  });
  cleanups.push(() => w.close());
  w.google.requireHttpsChannels = false;
  const open = (cal: string) => openOn(w, cal);

  const configA = structuredClone(w.config);
  const configB = structuredClone(w.config);
  const a = await daemon(configA);
  const b = await daemon(configB);
  expect([a.lease.isLeader, b.lease.isLeader]).toEqual([true, false]);
  await waitFor("A opens alice's channel", () => open("alice@clinic.test").length === 1, 10_000);

  // A loses the lease (a stall); B leads.
  await a.lease.stop({ release: true });
  await waitFor("B leads", () => b.lease.isLeader, 10_000);

  // The admin re-points th_a to bob's primary calendar; both replicas reload (A as a standby: no retire there).
  await b.reload(withAccount(configB, "bob@clinic.test"));
  await a.reload(withAccount(configA, "bob@clinic.test"));
  await waitFor("B opens bob's channel", () => open("bob@clinic.test").length === 1, 10_000);
  await sleep(500);
  expect(open("alice@clinic.test")).toEqual([]);

  // B loses the lease in turn; A leads again (same process, same PushChannels).
  await b.lease.stop({ release: true });
  await a.lease.start();
  await waitFor("A leads again", () => a.lease.isLeader, 10_000);
  await sleep(1000); // A's leader start: push.start() + renew()

  // Re-pointed again, to carol: A is the leader now and retires bob's channel.
  await a.reload(withAccount(configA, "carol@clinic.test"));
  await sleep(1000); // the reload's renewal
  await a.push.renew(); // and the next hourly check
  await sleep(300);
  const stored = await a.store.table<{ subject?: string }>("channels").get("th_a");
  expect({
    bob: open("bob@clinic.test"),
    carol: open("carol@clinic.test").length,
    storedSubject: stored?.subject,
  }).toEqual({
    bob: [],
    carol: 1,
    storedSubject: "carol@clinic.test",
  });
}, 60_000);
