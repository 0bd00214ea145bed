// Tests notifications with two replicas on a real redis-server: only the leader sends, and a new leader that meets the
// same broken credentials sends nothing again (the condition's state is in the shared store), while it does tell what
// nobody has told yet.
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
});
