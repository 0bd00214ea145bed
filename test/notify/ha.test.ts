// Tests notifications with two replicas on a real redis-server: only the leader sends, and a new leader that meets the
// same broken credentials sends nothing again (the condition's state is in the shared store), while it does tell what
// nobody has told yet; and a replica that leads again after another leader told a condition fixed does not re-open it
// from the health it kept of its earlier term.
import { createClient } from "redis";
import { afterEach, describe, expect, it } from "vitest";
import type { Config } from "../../src/config/schema.ts";
import { type App, createApp } from "../../src/daemon/app.ts";
import { silentLogger } from "../../src/log.ts";
import { startWorld, type World } from "../../src/simulator/world.ts";
import { redisTestsEnabled, useRedisServer } from "../support/redis.ts";
import { type HookSink, type MailSink, SMTP_PASS, SMTP_USER, startHookSink, startMailSink } from "./support.ts";

async function waitFor(what: string, predicate: () => boolean, timeoutMs: number): Promise<void> {
  const until = Date.now() + timeoutMs;
  while (!predicate()) {
    if (Date.now() > until) throw new Error(`timed out after ${timeoutMs} ms waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 10));
  }
}

describe.skipIf(!redisTestsEnabled("notify-ha"))("notifications with two replicas sharing one Redis store", () => {
  const redis = useRedisServer();
  const cleanups: (() => Promise<void>)[] = [];
  afterEach(async () => {
    for (const c of cleanups.splice(0).reverse()) await c().catch(() => {});
  });

  async function replica(config: Config): Promise<App> {
    const app = await createApp(config, { logger: silentLogger, listen: "127.0.0.1:0", notifyIntervalMs: 20 });
    let stopped: Promise<void> | undefined;
    cleanups.push(() => (stopped ??= app.stop(3000)));
    await app.start();
    return app;
  }

  it("only the leader sends; a new leader does not send the same message again", { timeout: 30_000 }, async () => {
    const mail: MailSink = await startMailSink();
    const hook: HookSink = await startHookSink();
    cleanups.push(mail.close, hook.close);
    const world: World = await startWorld({
      therapists: ["th_a", "th_b"],
      configure: (c) => {
        c.store = { url: redis().url, lease_seconds: 2 };
        c.sync = { ...c.sync, reconcile_cron: "0 0 1 1 *" };
        c.notify = {
          min_interval_seconds: 0, // th_b's message follows th_a's within the minute
          targets: [
            { type: "webhook", name: "chat", url: hook.url },
            {
              type: "email",
              name: "mail",
              smtp: { host: "127.0.0.1", port: mail.port, auth: { user: SMTP_USER, pass: SMTP_PASS } },
              from: "calbridge@clinic.test",
              to: ["ops@clinic.test"],
            },
          ],
        };
      },
    });
    cleanups.push(() => world.close());
    world.google.revokeTokens("th_a@clinic.test");

    const a = await replica(world.config);
    const b = await replica(world.config);
    // The first replica holds the fresh lease key 2/3 of the lease before it leads (Redis may have lost a leader's key).
    await waitFor("the first replica to lead", () => a.lease.isLeader, 10_000); // a positive wait: 1333 ms of hold, then Redis round trips (seconds under load)
    expect([a.lease.isLeader, b.lease.isLeader]).toEqual([true, false]);
    await waitFor("the leader's message", () => mail.mails.length > 0 && hook.posts.length > 0, 10_000);
    // The standby meets broken credentials of its own (th_b's), and is asked to tell: it does not lead, so it does not.
    world.google.revokeTokens("th_b@clinic.test");
    await b.poller.poll("th_b").catch(() => {});
    expect(b.calendars.get("th_b")!.health().credentials).toBe("broken");
    await b.notifier.check();
    await new Promise((r) => setTimeout(r, 300));
    expect(mail.mails.map((m) => m.subject)).toEqual(["[calbridge] Google credentials of th_a stopped working"]);
    expect(hook.posts).toHaveLength(1);

    // The leader goes away; the standby takes over and polls: th_a's credentials, already told, are not told again;
    // th_b's, which nobody has told yet, are.
    await a.stop(3000);
    await waitFor("the standby to lead", () => b.lease.isLeader, 10_000);
    await waitFor("th_b's message", () => mail.mails.length >= 2, 10_000);
    await waitFor("its poll of th_a", () => b.calendars.get("th_a")!.health().credentials === "broken", 10_000);
    await new Promise((r) => setTimeout(r, 300));
    expect(mail.mails.map((m) => m.subject)).toEqual([
      "[calbridge] Google credentials of th_a stopped working",
      "[calbridge] Google credentials of th_b stopped working",
    ]);
    expect(hook.posts).toHaveLength(2);
  });

  it("a replica that leads again does not re-open what the other leader told fixed", { timeout: 60_000 }, async () => {
    // The first test's conditions (told, in the shared store) would be this one's.
    const client = createClient({ url: redis().url });
    await client.connect();
    await client.flushAll();
    await client.quit();
    const mail: MailSink = await startMailSink();
    cleanups.push(mail.close);
    const world: World = await startWorld({
      therapists: ["th_a", "th_b"],
      configure: (c) => {
        c.store = { url: redis().url, lease_seconds: 2 };
        c.sync = { ...c.sync, reconcile_cron: "0 0 1 1 *" };
        c.notify = {
          min_interval_seconds: 0,
          targets: [
            {
              type: "email",
              name: "mail",
              smtp: { host: "127.0.0.1", port: mail.port, auth: { user: SMTP_USER, pass: SMTP_PASS } },
              from: "calbridge@clinic.test",
              to: ["ops@clinic.test"],
            },
          ],
        };
      },
    });
    cleanups.push(() => world.close());
    world.google.revokeTokens("th_a@clinic.test");

    const a = await replica(world.config);
    const b = await replica(world.config);
    await waitFor("a to lead", () => a.lease.isLeader, 10_000);
    await waitFor("the broken alert", () => mail.mails.length >= 1, 10_000);
    expect(a.calendars.get("th_a")!.health().credentials).toBe("broken");

    // The admin fixes th_a's access. Meanwhile a loses the lease (a blip); b leads, finds th_a working and tells so.
    world.google.restoreAccess("th_a@clinic.test");
    await a.lease.stop({ release: true });
    await waitFor("b to lead", () => b.lease.isLeader, 10_000);
    await b.poller.poll("th_a").catch(() => {});
    await waitFor("the recovery", () => mail.mails.length >= 2, 10_000);
    await a.lease.start(); // a is back, as a standby: it makes no Google calls, its health of th_a is its first term's

    // b goes away (a deploy): a leads again. Its first check used to see th_a broken (calls failing fast until the next
    // probe, 10 minutes away) and tell "stopped working" again.
    await b.stop(3000);
    await waitFor("a to lead again", () => a.lease.isLeader, 10_000);
    expect(a.calendars.get("th_a")!.health().credentials).not.toBe("broken");
    await a.poller.poll("th_a").catch(() => {});
    expect(a.calendars.get("th_a")!.health().credentials).toBe("ok");
    await new Promise((r) => setTimeout(r, 500)); // a few of a's checks (every 20 ms)
    expect(mail.mails.map((m) => m.subject)).toEqual([
      "[calbridge] Google credentials of th_a stopped working",
      "[calbridge] Google credentials of th_a work again",
    ]);

    // Still broken is still told once: th_a's access is withdrawn again and a, leading, tells it; it loses the lease
    // and leads again (nobody in between): its next calls find th_a broken as told, and nothing is sent.
    world.google.revokeTokens("th_a@clinic.test");
    await a.poller.poll("th_a").catch(() => {});
    await waitFor("the second broken alert", () => mail.mails.length >= 3, 10_000);
    await a.lease.stop({ release: true });
    await a.lease.start();
    await waitFor("a to lead once more", () => a.lease.isLeader, 10_000);
    await a.poller.poll("th_a").catch(() => {});
    expect(a.calendars.get("th_a")!.health().credentials).toBe("broken");
    await new Promise((r) => setTimeout(r, 500));
    expect(mail.mails.map((m) => m.subject)).toEqual([
      "[calbridge] Google credentials of th_a stopped working",
      "[calbridge] Google credentials of th_a work again",
      "[calbridge] Google credentials of th_a stopped working",
    ]);
  });
});
