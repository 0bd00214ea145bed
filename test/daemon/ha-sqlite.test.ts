// Two daemons on one SQLite store file (a rolling update on a shared volume, a second `calbridge run` started by hand):
// the lease is a row of the file, so exactly one leads and the other stands by (no inbox processing, reconciliation,
// polling or notifications); the standby takes webhooks into the shared inbox and the leader applies them; a leader's
// orderly stop hands over at once, a leader that stops without releasing (its work still running, or stalled) is
// taken over only when its lease lapses; a daemon alone on the file leads at once. Real Apps, real HTTP, one file.
import { performance } from "node:perf_hooks";
import { afterEach, describe, expect, it } from "vitest";
import type { Config } from "../../src/config/schema.ts";
import { type App, createApp } from "../../src/daemon/app.ts";
import { startWorld, type World } from "../../src/simulator/world.ts";
import { LEASE_ROW_KEY, type LeaseHolder } from "../../src/store/store.ts";
import { deliver } from "../support/deliver.ts";
import { captureLog } from "../support/log-capture.ts";

const LEASE_SECONDS = 2;
const HOUR = 3_600_000;
const STANDBY = "another calbridge daemon holds the leader lease of this store: this one is a standby";

const cleanups: (() => Promise<unknown>)[] = [];
afterEach(async () => {
  for (const c of cleanups.splice(0).reverse()) await c().catch(() => {});
});

async function waitFor(what: string, predicate: () => boolean | Promise<boolean>, timeoutMs: number): Promise<number> {
  const start = performance.now();
  while (!(await predicate())) {
    if (performance.now() - start > timeoutMs) throw new Error(`timed out after ${timeoutMs} ms waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 10));
  }
  return performance.now() - start;
}

async function processedOk(app: App): Promise<number> {
  const metric = await app.registry.getSingleMetric("calbridge_webhook_processing_total")?.get();
  return (metric?.values ?? []).filter((v) => v.labels.result === "ok").reduce((n, v) => n + v.value, 0);
}

async function leaderGauge(app: App): Promise<number | undefined> {
  return (await app.registry.getSingleMetric("calbridge_leader")?.get())?.values[0]?.value;
}

async function world(): Promise<World> {
  const w = await startWorld({
    therapists: ["th_a"],
    configure: (c) => {
      c.store = { ...c.store, lease_seconds: LEASE_SECONDS };
      // No cron run during the test: after the start-up reconciliation only webhooks bring new bookings in.
      c.sync = { ...c.sync, reconcile_cron: "0 0 1 1 *" };
    },
  });
  cleanups.push(() => w.close());
  return w;
}

async function daemon(w: World, log = captureLog("info")) {
  const config: Config = w.config;
  const app = await createApp(config, {
    logger: log.logger,
    listen: "127.0.0.1:0",
    adminListen: "127.0.0.1:0",
    inboxSweepMs: 200,
  });
  let stopped: Promise<void> | undefined;
  const stop = () => (stopped ??= app.stop(3000));
  cleanups.push(stop);
  const started = performance.now();
  await app.start();
  return { app, stop, log, startMs: performance.now() - started };
}

/** A new booking (no webhook endpoint registered, so nothing is delivered by itself) and its created event. */
function book(w: World, hoursAhead: number): { id: string; event: Record<string, unknown> } {
  const start = new Date(Date.now() + hoursAhead * HOUR);
  start.setUTCMinutes(0, 0, 0);
  const a = w.booking.create({ therapist_id: "th_a", start_time: start.toISOString() }, { force: true });
  const id = String(a.id);
  const event = [...w.booking.events]
    .reverse()
    .find((e) => e.type === "appointment.created" && (e.data as { object: { id?: unknown } }).object.id === id);
  if (!event) throw new Error(`the simulator emitted no appointment.created for ${id}`);
  return { id, event };
}

const mirrored = (w: World, appointmentId: string) =>
  w.google.events(w.calendarOf("th_a")).filter((e) => {
    const props = (e.extendedProperties as { private?: Record<string, string> } | undefined)?.private;
    return props?.calbridge_appointment_id === appointmentId && e.status !== "cancelled";
  }).length;

describe("two daemons on one SQLite store file", () => {
  it("a lone daemon leads at once; a second one stands by and its webhooks are applied by the leader", async () => {
    const w = await world();
    const a = await daemon(w);
    // Nobody holds the row: the start itself takes it (no wait for a lease to lapse).
    expect(a.app.lease.isLeader).toBe(true);
    const b = await daemon(w);
    expect(b.app.lease.isLeader).toBe(false);
    const line = b.log.lines.find((l) => l["msg"] === STANDBY);
    expect(line).toMatchObject({ other_pid: process.pid, other_holder: a.app.lease.holderId });
    const row = await a.app.store.table<LeaseHolder>("meta").get(LEASE_ROW_KEY);
    expect(row?.holder).toBe(a.app.lease.holderId);

    // Several renewals later: still exactly one leader.
    await new Promise((r) => setTimeout(r, LEASE_SECONDS * 1000 * 1.5));
    expect([a.app.lease.isLeader, b.app.lease.isLeader]).toEqual([true, false]);
    expect([(await a.app.status()).leader, (await b.app.status()).leader]).toEqual([true, false]);
    expect([await leaderGauge(a.app), await leaderGauge(b.app)]).toEqual([1, 0]);
    const ready = (await (await fetch(`${b.app.admin!.url}/readyz`)).json()) as {
      checks: { booking: { ok: boolean; detail: string } };
    };
    expect(ready.checks.booking).toMatchObject({ ok: true, detail: expect.stringMatching(/^standby/) });

    // The standby stores a webhook in the shared inbox; the leader applies it, the standby does not.
    const x = book(w, 30);
    expect(await deliver(b.app, x.event)).toEqual({ status: 200, body: { received: true } });
    await waitFor("the leader to apply the standby's webhook", () => mirrored(w, x.id) === 1, 5000);
    await waitFor("the leader to mark it done", async () => (await processedOk(a.app)) === 1, 5000);
    expect(await processedOk(b.app)).toBe(0);
    // The same delivery again, to the leader: a duplicate of the shared inbox.
    expect(await deliver(a.app, x.event)).toEqual({ status: 200, body: { received: true, duplicate: true } });

    // --- the leader stops (a rolling update): it releases the row, and the standby leads at its next read
    const stoppedAt = performance.now();
    await a.stop();
    await waitFor("the standby to lead", () => b.app.lease.isLeader, 1500);
    expect(performance.now() - stoppedAt).toBeLessThan(LEASE_SECONDS * 1000);
    const y = book(w, 54);
    expect(await deliver(b.app, y.event)).toEqual({ status: 200, body: { received: true } });
    await waitFor("the new leader to apply its webhook", () => mirrored(w, y.id) === 1, 5000);
    expect(await leaderGauge(b.app)).toBe(1);
    expect((await b.app.status()).leader).toBe(true);
    expect(mirrored(w, x.id)).toBe(1);
  }, 30_000);

  it("a leader that stops without releasing is taken over when its lease lapses, not before", async () => {
    const w = await world();
    const a = await daemon(w);
    const b = await daemon(w);
    expect([a.app.lease.isLeader, b.app.lease.isLeader]).toEqual([true, false]);
    // As a stop whose leader work outlived the grace, or a stalled process: the row is left to lapse.
    const row = () => a.app.store.table<LeaseHolder>("meta").get(LEASE_ROW_KEY);
    await a.app.lease.stop({ release: false });
    const until = (await row())!.until;
    expect(until).toBeGreaterThan(Date.now());
    let earliest = Number.POSITIVE_INFINITY;
    await waitFor(
      "the standby to lead",
      () => {
        if (b.app.lease.isLeader) earliest = Math.min(earliest, Date.now());
        return b.app.lease.isLeader;
      },
      LEASE_SECONDS * 1000 + 2000,
    );
    expect(earliest).toBeGreaterThanOrEqual(until);
    expect(earliest - until).toBeLessThan(1500);
    expect((await row())?.holder).toBe(b.app.lease.holderId);
    expect(a.app.lease.isLeader).toBe(false);
  }, 30_000);
});
