// Tests calbridge_inbox_pending on a standby (a second daemon on the same SQLite file, or a Redis replica). The standby
// accepts deliveries into the shared inbox and the leader processes them, but the standby never learns they are done:
// its count only grew (and its memory with it), so the pair's backlog alert, on max(calbridge_inbox_pending), fired
// for a healthy pair. A replica counts pending events only while it processes the inbox.
import { performance } from "node:perf_hooks";
import { afterEach, describe, expect, it } from "vitest";
import type { Config } from "../../src/config/schema.ts";
import { type App, createApp } from "../../src/daemon/app.ts";
import { startWorld, type World } from "../../src/simulator/world.ts";
import { deliver } from "../support/deliver.ts";
import { captureLog } from "../support/log-capture.ts";

const HOUR = 3_600_000;
const cleanups: (() => Promise<unknown>)[] = [];
afterEach(async () => {
  for (const c of cleanups.splice(0).reverse()) await c().catch(() => {});
});

async function waitFor(what: string, predicate: () => boolean | Promise<boolean>, timeoutMs: number) {
  const start = performance.now();
  while (!(await predicate())) {
    if (performance.now() - start > timeoutMs) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 20));
  }
}

async function gauge(app: App, name: string): Promise<number | undefined> {
  return (await app.registry.getSingleMetric(name)?.get())?.values[0]?.value;
}
async function processedOk(app: App): Promise<number> {
  const metric = await app.registry.getSingleMetric("calbridge_webhook_processing_total")?.get();
  return (metric?.values ?? []).filter((v) => v.labels.result === "ok").reduce((n, v) => n + v.value, 0);
}

async function daemon(w: World) {
  const app = await createApp(w.config as Config, {
    logger: captureLog("info").logger,
    listen: "127.0.0.1:0",
    adminListen: "127.0.0.1:0",
    inboxSweepMs: 200,
  });
  let stopped: Promise<void> | undefined;
  cleanups.push(() => (stopped ??= app.stop(3000)));
  await app.start();
  return app;
}

function book(w: World, hoursAhead: number): Record<string, unknown> {
  const start = new Date(Date.now() + hoursAhead * HOUR);
  start.setUTCMinutes(0, 0, 0);
  const a = w.booking.create({ therapist_id: "th_a", start_time: start.toISOString() }, { force: true });
  const id = String(a.id);
  const event = [...w.booking.events]
    .reverse()
    .find((e) => e.type === "appointment.created" && (e.data as { object: { id?: unknown } }).object.id === id);
  if (!event) throw new Error("no event");
  return event as Record<string, unknown>;
}

describe("standby inbox_pending", () => {
  it("a standby's calbridge_inbox_pending returns to 0 once the leader processed what it accepted", async () => {
    const w = await startWorld({
      therapists: ["th_a"],
      configure: (c) => {
        c.store = { ...c.store, lease_seconds: 2 };
        c.sync = { ...c.sync, reconcile_cron: "0 0 1 1 *" };
      },
    });
    cleanups.push(() => w.close());
    const leader = await daemon(w);
    const standby = await daemon(w);
    expect([leader.lease.isLeader, standby.lease.isLeader]).toEqual([true, false]);
    const n = 5;
    for (let i = 0; i < n; i++) expect((await deliver(standby, book(w, 30 + i))).status).toBe(200);
    await waitFor("the leader to process all", async () => (await processedOk(leader)) === n, 10_000);
    // Several sweeps later: everything is done in the store.
    await new Promise((r) => setTimeout(r, 1000));
    expect(await gauge(leader, "calbridge_inbox_pending")).toBe(0);
    // The pair's alert reads max(calbridge_inbox_pending) across replicas.
    expect(await gauge(standby, "calbridge_inbox_pending")).toBe(0);
  }, 40_000);
});
