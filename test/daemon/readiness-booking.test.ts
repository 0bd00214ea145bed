// /readyz's `booking` check on a running daemon (createApp wiring, simulators over real HTTP): it follows the booking
// client's own requests (webhook reads, write-backs, reconciliations), not only the last reconciliation. Ready again
// as soon as the service answers after an outage; unready once requests keep failing, without waiting for a
// reconciliation; one failed request among answered ones changes nothing; refused credentials name booking.api_key;
// with no traffic, /readyz's own connection test finds the service back; a standby does not depend on the booking API.
import { afterEach, describe, expect, it } from "vitest";
import { eventIdFor } from "../../src/calendar/ids.ts";
import type { Config } from "../../src/config/schema.ts";
import { type App, createApp } from "../../src/daemon/app.ts";
import { silentLogger } from "../../src/log.ts";
import { startWorld, WORLD_WEBHOOK_SECRET, type World } from "../../src/simulator/world.ts";
import { redisTestsEnabled, useRedisServer } from "../support/redis.ts";

const cleanups: (() => Promise<void>)[] = [];
afterEach(async () => {
  for (const c of cleanups.splice(0).reverse()) await c().catch(() => {});
});

const DAY = 86_400_000;

async function daemon(): Promise<{ world: World; app: App }> {
  const world = await startWorld({ therapists: ["th_anna"] });
  cleanups.push(() => world.close());
  const app = await createApp(world.config, {
    logger: silentLogger,
    oneShot: true, // no cron of its own: the test runs the reconciliations the cron would run
    listen: "127.0.0.1:0",
    adminListen: "127.0.0.1:0",
    bookingMaxRetries: 0,
  });
  cleanups.push(() => app.stop(2000));
  await app.start();
  return { world, app };
}

async function readyz(app: App) {
  const res = await fetch(`${app.admin!.url}/readyz`);
  const body = (await res.json()) as { checks: Record<string, { ok: boolean; detail: string }> };
  return { status: res.status, booking: body.checks.booking! };
}

async function until(what: string, cond: () => boolean | Promise<boolean>, ms = 10_000) {
  const end = Date.now() + ms;
  while (!(await cond())) {
    if (Date.now() > end) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 25));
  }
}

/** A booking starting `days` ahead at `hour`:00 UTC. */
function at(days: number, hour: number): string {
  const d = new Date(Date.now() + days * DAY);
  d.setUTCHours(hour, 0, 0, 0);
  return d.toISOString();
}

/** One read of the daemon's booking client (the request a webhook's sync makes); its failure is the test's business. */
const read = (app: App, id: string) =>
  app.booking.getAppointment(id).then(
    () => "answered",
    (err: unknown) => (err as Error).message,
  );

describe("readiness follows the booking client's requests", () => {
  it("is ready again once the booking API answers the daemon's webhook reads after a failed reconciliation", async () => {
    const { world, app } = await daemon();
    world.booking.addWebhookEndpoint({
      url: `${app.http!.url}${world.config.webhooks.path}`,
      secret: WORLD_WEBHOOK_SECRET,
      events: ["*"],
    });
    expect((await readyz(app)).status).toBe(200);

    world.booking.faults.failNext(100, 503);
    await expect(app.reconcile()).rejects.toThrow();
    const down = await readyz(app);
    expect(down.status).toBe(503);
    expect(down.booking.ok).toBe(false);
    expect(down.booking.detail).toMatch(/^booking API unreachable: .*503/);

    // The service is back; no reconciliation runs. A booking made there is read (webhook) and mirrored.
    world.booking.faults.reset();
    const id = String(world.booking.create({ therapist_id: "th_anna", start_time: at(2, 9) }).id);
    const cal = world.calendarOf("th_anna");
    await until("the booking mirrored", () => world.google.events(cal).some((e) => e.id === eventIdFor(id)));

    const after = await readyz(app);
    expect(after.booking, JSON.stringify(after.booking)).toMatchObject({ ok: true });
    expect(after.booking.detail).toMatch(/^booking API answered \d+s ago/);
    expect(after.status).toBe(200);
  });

  it("turns unready after three failed requests in a row without a reconciliation, not after one among answers", async () => {
    const { world, app } = await daemon();
    const id = String(world.booking.create({ therapist_id: "th_anna", start_time: at(2, 10) }).id);
    expect(await read(app, id)).toBe("answered");

    // One 503 and one lost answer (no response at all), then answers: a blip, still ready.
    world.booking.faults.failNext(1, 503);
    expect(await read(app, id)).toMatch(/503/);
    world.booking.faults.dropResponseNext(1);
    expect(await read(app, id)).toMatch(/network_error/);
    const blip = await readyz(app);
    expect(blip.status, JSON.stringify(blip.booking)).toBe(200);
    expect(blip.booking.detail).toMatch(/2 request\(s\) failed since/);
    // A refusal is an answer: the service's own 404 for an appointment it does not have.
    expect(await read(app, "apt_does_not_exist")).toMatch(/not_found/);
    expect((await readyz(app)).booking.detail).toMatch(/^booking API answered \d+s ago$/);

    // The service stops answering: three failed requests in a row (webhook reads), no reconciliation.
    world.booking.faults.failNext(3, 503);
    for (let i = 0; i < 3; i++) expect(await read(app, id)).toMatch(/503/);
    const down = await readyz(app);
    expect(down.status).toBe(503);
    expect(down.booking.ok).toBe(false);
    expect(down.booking.detail).toMatch(/^booking API unreachable: 3 requests in a row failed, the last: .*503/);

    // One answer and it is ready again.
    world.booking.faults.reset();
    expect(await read(app, id)).toBe("answered");
    expect(await readyz(app)).toMatchObject({ status: 200, booking: { ok: true } });
  });

  it("names booking.api_key when the service refuses the credentials", async () => {
    const { world, app } = await daemon();
    const id = String(world.booking.create({ therapist_id: "th_anna", start_time: at(2, 11) }).id);
    world.booking.faults.failNext(3, 401);
    for (let i = 0; i < 3; i++) expect(await read(app, id)).toMatch(/401/);
    const down = await readyz(app);
    expect(down.status).toBe(503);
    expect(down.booking.detail).toMatch(/^booking API unreachable: .*credentials refused \(check booking\.api_key\)/);
  });

  it("with no traffic, /readyz sends a connection test while unready (at most one per 30 s) and sees the service back", async () => {
    const { world, app } = await daemon();
    const services = () => world.booking.requests.filter((r) => r.route === "GET /v1/services");

    // Down: the connection test fails too, and /readyz asked again and again does not send another one.
    world.booking.faults.failNext(1000, 503);
    await expect(app.reconcile()).rejects.toThrow();
    const before = services().length;
    for (let i = 0; i < 5; i++) expect((await readyz(app)).status).toBe(503);
    await until("the connection test answered", () => app.booking.gate.snapshot().inFlight === 0);
    expect(services().length - before).toBe(1);
    expect((await readyz(app)).status).toBe(503);
    expect(services().length - before).toBe(1);
  });

  it("is ready again through its connection test when the service is back and nothing else calls it", async () => {
    const { world, app } = await daemon();
    world.booking.faults.failNext(100, 503);
    await expect(app.reconcile()).rejects.toThrow();
    world.booking.faults.reset();
    // No webhook, no reconciliation: only /readyz's own connection test (GET /v1/services) can see it back.
    const first = await readyz(app);
    expect(first.status).toBe(503);
    await until("/readyz ready again", async () => (await readyz(app)).status === 200, 5000);
    expect(world.booking.requests.some((r) => r.route === "GET /v1/services" && r.status === 200)).toBe(true);
  });
});

describe.skipIf(!redisTestsEnabled("readiness-booking"))("readiness of a standby", () => {
  const redis = useRedisServer();

  it("a standby makes no booking API calls and stays ready while the leader finds the service down", async () => {
    const world = await startWorld({
      therapists: ["th_a"],
      storeUrl: redis().url,
      configure: (c) => {
        c.store = { url: redis().url, lease_seconds: 2 };
        c.sync = { ...c.sync, reconcile_cron: "0 0 1 1 *" };
      },
    });
    cleanups.push(() => world.close());
    world.booking.faults.failNext(10_000, 503);
    const replica = async () => {
      const config: Config = { ...world.config };
      const app = await createApp(config, {
        logger: silentLogger,
        listen: "127.0.0.1:0",
        adminListen: "127.0.0.1:0",
        bookingMaxRetries: 0,
      });
      cleanups.push(() => app.stop(3000));
      await app.start();
      return app;
    };
    const leader = await replica();
    const standby = await replica();
    // The first replica holds the fresh lease key 2/3 of the lease before it leads (Redis may have lost a leader's key).
    // 1333 ms of hold, then Redis round trips: 2 s was short under load (a positive wait; it costs nothing when fast).
    await until("the first replica to lead", () => leader.lease.isLeader);
    expect([leader.lease.isLeader, standby.lease.isLeader]).toEqual([true, false]);

    // The leader's start-up reconciliation fails on the booking API: the leader is not ready, the standby is.
    await until("the leader unready", async () => (await readyz(leader)).status === 503);
    expect((await readyz(leader)).booking.ok).toBe(false);
    const s = await readyz(standby);
    expect(s.booking).toEqual({ ok: true, detail: "standby: the leader makes the booking API calls" });
    expect(s.status).toBe(200);
  });
});
