// A leader that loses the lease while work is under way must send no further calendar write: the next leader writes
// the same calendars (a double insert, or a delete racing its insert). A sync under way is given up before its next
// Google write (not failed, nothing restored), a reconciliation sends no stray removal planned before the hand-over,
// and a calendar poll whose syncs are refused keeps its sync token (the leader's poll reads the changes again). A push
// channel Google opens after the lease was lost is stopped at once: the next leader renews the channels it finds.
import { createServer, request as httpRequest } from "node:http";
import type { AddressInfo } from "node:net";
import { performance } from "node:perf_hooks";
import { createClient } from "redis";
import { afterEach, describe, expect, it } from "vitest";
import { eventIdFor } from "../../src/calendar/ids.ts";
import type { Config, ConfigInput } from "../../src/config/schema.ts";
import { type App, createApp } from "../../src/daemon/app.ts";
import { startWorld, type World } from "../../src/simulator/world.ts";
import { LEADER_KEY } from "../../src/store/lease.ts";
import { EngineStoppedError } from "../../src/sync/stopped.ts";
import { type CapturedLog, captureLog } from "../support/log-capture.ts";
import { redisTestsEnabled, useRedisServer } from "../support/redis.ts";

const HOUR = 3_600_000;

async function waitFor(what: string, predicate: () => boolean | Promise<boolean>, timeoutMs: number): Promise<void> {
  const start = performance.now();
  while (!(await predicate())) {
    if (performance.now() - start > timeoutMs) throw new Error(`timed out after ${timeoutMs} ms waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 10));
  }
}

/** Whether the emulator received `method` for calendar `calendarId`'s events since request number `since`. */
function sent(world: World, since: number, method: string, calendarId: string): boolean {
  const events = `/calendar/v3/calendars/${encodeURIComponent(calendarId)}/events`;
  return world.google.requestLog.slice(since).some((r) => r.method === method && r.path.startsWith(events));
}

describe.skipIf(!redisTestsEnabled("ha-lost-lease-sync"))("a leader losing its lease while work is under way", () => {
  const redis = useRedisServer();
  const cleanups: (() => Promise<void>)[] = [];
  afterEach(async () => {
    for (const c of cleanups.splice(0).reverse()) await c().catch(() => {});
  });

  /** One daemon on Redis (lease 2 s) leading, its start-up reconciliation over; `takeLease` makes it lose the lease. */
  async function leader(
    level = "info",
    configure: (c: ConfigInput) => void = () => {},
    beforeApp: (world: World) => void = () => {},
  ): Promise<{ world: World; app: App; log: CapturedLog; takeLease(): Promise<void> }> {
    const world = await startWorld({
      therapists: ["th_a", "th_b"],
      storeUrl: redis().url,
      configure: (c) => {
        c.store = { url: redis().url, lease_seconds: 2 };
        c.sync = { ...c.sync, reconcile_cron: "0 0 1 1 *" };
        configure(c);
      },
    });
    cleanups.push(() => world.close());
    beforeApp(world);
    const config: Config = { ...world.config, store: { ...world.config.store, url: redis().url } };
    const log = captureLog(level);
    const app = await createApp(config, { logger: log.logger, listen: "127.0.0.1:0" });
    cleanups.push(() => app.stop(3000));
    const other = createClient({ url: redis().url });
    await other.connect();
    // The next test starts on an empty Redis (the other holder's key, this world's links and tokens).
    cleanups.push(() => other.flushAll().then(() => other.quit().then(() => {})));
    await app.start();
    // A fresh lease key is held 2/3 of the lease before its holder leads (Redis may have lost a leader's key).
    await waitFor("the daemon to lead", () => app.lease.isLeader, 10_000); // a positive wait: 1333 ms of hold, then Redis round trips (seconds under load)
    const meta = app.store.table<number>("meta");
    await waitFor(
      "the start-up reconciliation",
      async () => (await meta.get("last_reconcile_success")) !== undefined,
      10_000,
    );
    await app.reconcile(); // the start-up run is over (a later call would join it otherwise)
    await app.engine.idle();
    const takeLease = async () => {
      await other.set(LEADER_KEY, "other-replica:1:abcdef", { PX: 60_000 });
      await waitFor("the lease to be lost", () => !app.lease.isLeader, 3000);
    };
    return { world, app, log, takeLease };
  }

  /** A leader with push on whose start-up channels are open; `before` their ids. */
  async function leaderWithChannels() {
    const x = await leader("info", (c) => {
      c.google.push = { public_url: "https://sync.example/webhooks/google" };
    });
    await waitFor("the start-up channels", () => x.world.google.channels.size === 2, 10_000);
    return { ...x, before: new Set(x.world.google.channels.keys()) };
  }

  const booked = (world: World, therapistId: string, inHours: number) => {
    const start = new Date(Date.now() + inHours * HOUR);
    start.setUTCMinutes(0, 0, 0);
    return String(
      world.booking.create({ therapist_id: therapistId, start_time: start.toISOString() }, { force: true }).id,
    );
  };

  it("gives a sync up before its next calendar write: a reassignment removes nothing from the old calendar", async () => {
    const { world, app, log, takeLease } = await leader();
    const id = booked(world, "th_a", 30);
    expect(await app.engine.syncAppointment(id, { reason: "test", priority: "webhook" })).toMatchObject({ ok: true });
    const calA = world.calendarOf("th_a");
    const calB = world.calendarOf("th_b");
    expect(world.google.event(calA, eventIdFor(id))?.status).toBe("confirmed");

    // Reassigned: the sync writes the event in th_b's calendar (a slow answer), then would delete th_a's.
    world.booking.reassign(id, "th_b", { force: true });
    world.google.faults.latencyMs = 3000;
    const since = world.google.requestLog.length;
    const run = app.engine.syncAppointment(id, { reason: "test", priority: "webhook" }).then(
      (outcome) => outcome,
      (err: unknown) => err,
    );
    await waitFor("the insert in th_b's calendar to be sent", () => sent(world, since, "POST", calB), 10_000);
    await takeLease(); // while that insert's answer is on its way
    const outcome = await run;
    world.google.faults.latencyMs = 0;
    await app.engine.idle();

    // The write already sent stands; the deletion after it was not sent: the next leader's sync does it.
    expect(world.google.event(calB, eventIdFor(id))?.status).toBe("confirmed");
    expect(sent(world, since, "DELETE", calA)).toBe(false);
    expect(world.google.event(calA, eventIdFor(id))?.status).toBe("confirmed");
    // Given up, not failed: no retry, no dead letter, no "old event not removed" warning.
    expect(outcome).toBeInstanceOf(EngineStoppedError);
    expect(log.find((l) => String(l.msg).startsWith("sync given up: leadership was lost"))).toBeDefined();
    expect(
      log.find((l) => l.msg === "sync failed" || l.msg === "old event not removed yet after a reassignment"),
    ).toBeUndefined();
    expect(await app.sync.dead.get(`appt:${id}`)).toBeUndefined();
  }, 30_000);

  it("gives a sync up before its first write when the lease is lost while it reads the booking", async () => {
    const { world, app, log, takeLease } = await leader();
    const id = booked(world, "th_a", 31);
    const calA = world.calendarOf("th_a");
    world.booking.faults.latencyMs = 3000; // the sync is reading the booking when another replica takes the lease
    const since = world.google.requestLog.length;
    const run = app.engine.syncAppointment(id, { reason: "test", priority: "webhook" }).then(
      (outcome) => outcome,
      (err: unknown) => err,
    );
    await new Promise((r) => setTimeout(r, 200));
    await takeLease();
    const outcome = await run;
    world.booking.faults.latencyMs = 0;
    await app.engine.idle();
    // No insert beside the new leader's: the appointment is the next leader's to write.
    expect(sent(world, since, "POST", calA)).toBe(false);
    expect(world.google.event(calA, eventIdFor(id))).toBeUndefined();
    expect(outcome).toBeInstanceOf(EngineStoppedError);
    expect(log.find((l) => String(l.msg).startsWith("sync given up: leadership was lost"))).toBeDefined();
    expect(log.find((l) => l.msg === "sync failed")).toBeUndefined();
  }, 30_000);

  /** A deletion of th_a's event whose write-back runs while `during` (a held Google read of `eventIn`'s calendar). */
  async function deletionWhileLeaseLost(eventIn: "th_a" | "th_b") {
    const noGrace = (c: ConfigInput) => {
      c.sync = { ...c.sync, writeback: { cancel_grace_seconds: 0 } };
    };
    const { world, app, log, takeLease } = await leader("info", noGrace);
    const id = booked(world, "th_a", 30);
    expect(await app.engine.syncAppointment(id, { reason: "test", priority: "webhook" })).toMatchObject({ ok: true });
    const eventId = eventIdFor(id);
    world.google.userDelete(world.calendarOf("th_a"), eventId);
    const where = encodeURIComponent(world.calendarOf(eventIn));
    let lost = false;
    world.google.faults.holdNext(new RegExp(`GET .*${where}/events/${eventId}`), async () => {
      await takeLease();
      lost = true;
    });
    const since = world.booking.requests.length;
    const outcome = await app.engine
      .syncAppointment(id, { reason: "test", priority: "writeback", origin: "calendar", calendar: { reread: true } })
      .then(
        (o) => o,
        (e: unknown) => e,
      );
    await app.engine.idle();
    expect(lost).toBe(true);
    const cancels = world.booking.requests.slice(since).filter((r) => r.route === "POST /v1/appointments/:id/cancel");
    return { world, log, id, outcome, cancels };
  }

  it("sends no cancellation once the lease is lost while the write-back looks for the event in other calendars", async () => {
    // The gate let the write-back through while this replica led; the look-ups that follow (a "Change calendar" to a
    // colleague?) may take minutes. The booking call is checked against the lease too, just before it is sent.
    const { world, log, id, outcome, cancels } = await deletionWhileLeaseLost("th_b");
    expect(cancels).toEqual([]);
    expect(world.booking.get(id)?.status).toBe("confirmed");
    expect(outcome).toBeInstanceOf(EngineStoppedError);
    expect(log.find((l) => String(l.msg).startsWith("sync given up: leadership was lost"))).toBeDefined();
    expect(log.find((l) => l.msg === "sync failed")).toBeUndefined();
  }, 40_000);

  it("a write-back the gate refuses for a lost lease is given up as such, not a failed sync", async () => {
    const { world, log, id, cancels } = await deletionWhileLeaseLost("th_a");
    expect(cancels).toEqual([]);
    expect(world.booking.get(id)?.status).toBe("confirmed");
    expect(log.find((l) => String(l.msg).startsWith("sync given up: leadership was lost"))).toBeDefined();
    expect(log.find((l) => l.msg === "sync failed")).toBeUndefined();
  }, 40_000);

  it("sends no stray removal a reconciliation planned from what it read before the lease was lost", async () => {
    const { world, app, log, takeLease } = await leader();
    const id = booked(world, "th_a", 32);
    expect(await app.engine.syncAppointment(id, { reason: "test", priority: "webhook" })).toMatchObject({ ok: true });
    const calA = world.calendarOf("th_a");
    // Reassigned, but removing the event from th_a's calendar fails once: a copy is left there (a stray).
    world.google.faults.next(1, { status: 403, reason: "forbidden", match: /DELETE .*th_a%40clinic\.test\/events\// });
    world.booking.reassign(id, "th_b", { force: true });
    expect(await app.engine.syncAppointment(id, { reason: "test", priority: "webhook" })).toMatchObject({ ok: true });
    expect(world.google.event(calA, eventIdFor(id))?.status).toBe("confirmed");

    // The booking API is slow: the run lists while another replica takes the lease, then plans the copy's removal.
    world.booking.faults.latencyMs = 3000;
    const since = world.google.requestLog.length;
    const run = app.reconcile().then(
      (report) => report,
      (err: unknown) => err,
    );
    await new Promise((r) => setTimeout(r, 200));
    await takeLease();
    const outcome = await run;
    world.booking.faults.latencyMs = 0;
    await app.engine.idle();
    expect(sent(world, since, "DELETE", calA)).toBe(false);
    expect(world.google.event(calA, eventIdFor(id))?.status).toBe("confirmed");
    expect(outcome).toBeInstanceOf(EngineStoppedError);
    expect(log.find((l) => String(l.msg).startsWith("reconciliation given up: leadership was lost"))).toBeDefined();
  }, 30_000);

  it("stops a push channel it opened while losing the lease, and keeps none: the next leader's is the only one", async () => {
    const { world, app, log, takeLease, before } = await leaderWithChannels();
    const channels = app.store.table<{ channelId: string }>("channels");
    const stored = await channels.get("th_a");
    // The renewal's watch is answered after another replica took the lease (a slow answer, a paused process).
    world.google.faults.holdNext(/^POST .*\/events\/watch$/, takeLease);
    await app.push.renew(Date.now() + 8 * 86_400_000);
    // Google opened it; kept, it notified for a week beside the next leader's, and nobody stopped it.
    expect([...world.google.channels.keys()].filter((c) => !before.has(c))).toEqual([]);
    expect(world.google.channels.size).toBe(2);
    // The channels the next leader finds are the ones it had: it renews those.
    expect(await channels.get("th_a")).toEqual(stored);
    expect(log.find((l) => String(l.msg).startsWith("push channel opened while the lease was lost"))).toBeDefined();
  }, 30_000);

  it("keeps a channel whose stop fails aside under left:, where a leader's start finds it", async () => {
    const { world, app, log, takeLease, before } = await leaderWithChannels();
    world.google.faults.holdNext(/^POST .*\/events\/watch$/, async () => {
      await takeLease();
      world.google.faults.next(1, { status: 403, reason: "forbidden", match: /channels\/stop/ });
    });
    await app.push.renew(Date.now() + 8 * 86_400_000);
    const opened = [...world.google.channels.keys()].filter((c) => !before.has(c));
    expect(opened).toHaveLength(1);
    expect(await app.store.table<{ therapistId: string }>("channels").get(`left:${opened[0]}`)).toMatchObject({
      therapistId: "th_a",
    });
    expect(
      log.find((l) => String(l.msg).startsWith("push channel opened while the lease was lost: not stopped")),
    ).toBeDefined();
  }, 30_000);

  it("sends no calendar write once the lease is lost while the write's access token is fetched", async () => {
    // The write meets an expired token (401), and the new one is slow to come (a slow token endpoint, a stall): the
    // lease is lost meanwhile. The guard ran before the token was fetched, so the insert went out beside the next
    // leader's writes; now it runs after.
    let tokenUrl = "";
    let duringFetch: (() => Promise<void>) | undefined;
    const proxy = createServer((req, res) => {
      const chunks: Buffer[] = [];
      req.on("data", (c: Buffer) => chunks.push(c));
      req.on("end", async () => {
        const hook = duringFetch;
        duringFetch = undefined;
        await hook?.().catch(() => {});
        const url = new URL(tokenUrl);
        const out = httpRequest(
          { host: url.hostname, port: url.port, path: url.pathname, method: req.method, headers: req.headers },
          (up) => {
            res.writeHead(up.statusCode ?? 502, up.headers);
            up.pipe(res);
          },
        );
        out.on("error", () => res.destroy());
        out.end(Buffer.concat(chunks));
      });
    });
    await new Promise<void>((r) => proxy.listen(0, "127.0.0.1", r));
    cleanups.push(() => new Promise<void>((r) => proxy.close(() => r())));
    const { port } = proxy.address() as AddressInfo;
    const { world, app, takeLease } = await leader(
      "info",
      (c) => {
        c.google = { ...c.google!, token_url: `http://127.0.0.1:${port}/token` };
      },
      (w) => {
        tokenUrl = w.google.tokenUrl;
      },
    );
    const id = booked(world, "th_a", 34);
    const events = `/calendar/v3/calendars/${encodeURIComponent(world.calendarOf("th_a"))}/events`;
    let since = -1;
    world.google.faults.holdNext(/^POST .*\/events$/, async () => {
      world.google.expireAccessTokens();
      duringFetch = async () => {
        await takeLease();
        since = world.google.requestLog.length;
      };
    });
    await app.engine.syncAppointment(id, { reason: "test", priority: "webhook" }).catch(() => {});
    await app.engine.idle();
    expect(since).toBeGreaterThan(0);
    const writes = world.google.requestLog.slice(since).filter((r) => r.method !== "GET" && r.path.startsWith(events));
    expect(writes.map((r) => `${r.method} ${r.status}`)).toEqual([]);
  }, 30_000);

  it("keeps a poll's sync token when its syncs are refused, and says why at debug", async () => {
    const { world, app, log, takeLease } = await leader("debug");
    const id = booked(world, "th_a", 33);
    expect(await app.engine.syncAppointment(id, { reason: "test", priority: "webhook" })).toMatchObject({ ok: true });
    const calA = world.calendarOf("th_a");
    await app.poller.poll("th_a");
    const tokens = app.store.table<string>("tokens");
    const token = await tokens.get("th_a");
    expect(token).toBeDefined();

    // The therapist deletes the event: the poll reads it slowly, and the lease is lost before its sync runs.
    world.google.userDelete(calA, eventIdFor(id));
    world.google.faults.latencyMs = 3000;
    const poll = app.poller.poll("th_a").then(
      (result) => result,
      (err: unknown) => err,
    );
    await new Promise((r) => setTimeout(r, 200));
    await takeLease();
    const outcome = await poll;
    world.google.faults.latencyMs = 0;
    await app.engine.idle();
    expect(outcome).toBeInstanceOf(EngineStoppedError);
    const refused = log.find((l) => String(l.msg).startsWith("calendar changes not synced here"));
    expect(refused).toMatchObject({ level: 20, refused: 1, changes: 1 });
    expect(String(refused?.reason)).toMatch(/no longer leads/);
    // Nothing lost: the token stays before the deletion (the leader's poll reads it), nothing was cancelled.
    expect(await tokens.get("th_a")).toBe(token);
    expect(world.booking.get(id)?.status).not.toBe("cancelled");
  }, 30_000);
});
