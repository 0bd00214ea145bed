// Tests a Redis store whose ACL user may not run scripts (`-@scripting`, common on managed Redis): the lease renews
// and releases with EVAL, so such a replica won the key with SET NX, had every renewal refused and never led (no
// reconciliation, no inbox processing) while it ran and /readyz stayed green, saying nothing. Now the daemon refuses to
// start, naming the permission; `doctor` fails its store check the same way; and a refusal that begins at run time
// (the ACL changed) is logged at error with the fix and shown in /status until it ends.
import { performance } from "node:perf_hooks";
import { createClient } from "redis";
import { afterAll, afterEach, beforeAll, describe, expect, it } from "vitest";
import { runDoctor } from "../../src/cli/doctor.ts";
import type { Config } from "../../src/config/schema.ts";
import { type App, createApp } from "../../src/daemon/app.ts";
import { silentLogger } from "../../src/log.ts";
import { startWorld, type World } from "../../src/simulator/world.ts";
import { captureLog } from "../support/log-capture.ts";
import { redisTestsEnabled, useRedisServer } from "../support/redis.ts";

async function waitFor(what: string, predicate: () => boolean | Promise<boolean>, timeoutMs: number): Promise<void> {
  const start = performance.now();
  while (!(await predicate())) {
    if (performance.now() - start > timeoutMs) throw new Error(`timed out after ${timeoutMs} ms waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 20));
  }
}

describe.skipIf(!redisTestsEnabled("redis-acl"))("a Redis user without scripting permission", () => {
  const redis = useRedisServer();
  let admin: ReturnType<typeof createClient>;
  const cleanups: (() => Promise<void>)[] = [];
  const userUrl = (user: string) => `redis://${user}:secret@127.0.0.1:${redis().port}`;
  const setUser = (user: string, ...rules: string[]) => admin.sendCommand(["ACL", "SETUSER", user, ...rules]);

  beforeAll(async () => {
    admin = createClient({ url: redis().url });
    await admin.connect();
  });
  afterAll(async () => {
    await admin?.quit();
  });
  afterEach(async () => {
    for (const cleanup of cleanups.splice(0).reverse()) await cleanup().catch(() => {});
  });

  async function world(storeUrl: string): Promise<World> {
    const w = await startWorld({
      therapists: ["th_a"],
      storeUrl,
      configure: (c) => {
        c.store = { url: storeUrl, lease_seconds: 2 };
      },
    });
    cleanups.push(() => w.close());
    return w;
  }

  async function app(config: Config, options: Parameters<typeof createApp>[1] = {}): Promise<App> {
    const a = await createApp(config, {
      logger: silentLogger,
      listen: "127.0.0.1:0",
      adminListen: "127.0.0.1:0",
      ...options,
    });
    cleanups.push(() => a.stop(3000));
    return a;
  }

  it("refuses to start, naming the missing permission and the fix; doctor fails its store check", async () => {
    await setUser("noscript", "on", ">secret", "~*", "&*", "+@all", "-@scripting");
    const w = await world(userUrl("noscript"));
    const daemon = await app(w.config);
    await expect(daemon.start()).rejects.toThrow(
      /^store: Redis refuses the leader lease: NOPERM .*'eval'.*; .*ACL SETUSER <user> \+@scripting` \(at least `\+eval`\)/,
    );
    expect(daemon.lease.isLeader).toBe(false);

    const oneShot = await app(w.config, { oneShot: true, readOnly: true });
    const store = (await runDoctor(oneShot)).find((c) => c.name === "store");
    expect(store).toMatchObject({
      status: "fail",
      detail: expect.stringMatching(/^Redis answers but refuses the leader lease's script: NOPERM .*'eval'/),
      fix: expect.stringContaining("+@scripting"),
    });
    expect(store?.detail).not.toContain("secret");

    // EVAL allowed but not a command the lease's scripts run inside: refused the same way.
    await setUser("nopexpire", "on", ">secret", "~*", "&*", "+@all", "-pexpire");
    const w2 = await world(userUrl("nopexpire"));
    await expect((await app(w2.config)).start()).rejects.toThrow(
      /^store: Redis refuses the leader lease: ERR The user executing the script can't run this command.*\+@scripting/,
    );
  });

  it("a user who may not SUBSCRIBE: refused at start with the fix, as doctor's store check does; allowed, all is well", async () => {
    // What README lists, without SUBSCRIBE: the start met Redis's bare NOPERM while subscribing to the inbox notices.
    const allowed = "get set mget exists del unlink scan multi exec pttl pexpire ping publish eval".split(" ");
    const rules = ["on", ">secret", "~calbridge:*", "&calbridge:*", "+@connection", ...allowed.map((c) => `+${c}`)];
    await setUser("deaf", ...rules);
    const w = await world(userUrl("deaf"));
    const daemon = await app(w.config);
    await expect(daemon.start()).rejects.toThrow(
      /^store: Redis refuses SUBSCRIBE on calbridge's channels \(replicas tell each other of accepted webhooks.*\): NOPERM .*'subscribe'.*; let calbridge's Redis user subscribe to its channels: `ACL SETUSER <user> \+subscribe &calbridge:\*`/,
    );
    expect(daemon.lease.isLeader).toBe(false);
    const doctorOf = async (config: Config) =>
      (await runDoctor(await app(config, { oneShot: true, readOnly: true }))).find((c) => c.name === "store");
    expect(await doctorOf(w.config)).toMatchObject({
      status: "fail",
      detail: expect.stringMatching(
        /^Redis answers but refuses SUBSCRIBE on calbridge's channels: NOPERM .*'subscribe'/,
      ),
      fix: expect.stringContaining("+subscribe &calbridge:*"),
    });

    // Allowed only on other channels: refused the same way.
    await setUser("elsewhere", ...rules.map((r) => (r === "&calbridge:*" ? "&other:*" : r)), "+subscribe");
    await expect((await app((await world(userUrl("elsewhere"))).config)).start()).rejects.toThrow(
      /^store: Redis refuses SUBSCRIBE on calbridge's channels .*: NOPERM .*channel/,
    );

    // With SUBSCRIBE, what README lists is enough: doctor's store check passes and the replica leads.
    await setUser("hearing", ...rules, "+subscribe");
    const w2 = await world(userUrl("hearing"));
    expect(await doctorOf(w2.config)).toMatchObject({ status: "ok" });
    const hearing = await app(w2.config);
    await hearing.start();
    await waitFor("the replica to lead", () => hearing.lease.isLeader, 5000);
  });

  it("a refusal that begins at run time is logged at error with the fix and shown in /status until it ends", async () => {
    // Only what README says calbridge needs: these commands on the calbridge:* keys and channels.
    const needed = "get set mget exists del unlink scan multi exec pttl pexpire ping publish subscribe eval".split(" ");
    await setUser(
      "later",
      "on",
      ">secret",
      "~calbridge:*",
      "&calbridge:*",
      "+@connection",
      ...needed.map((c) => `+${c}`),
    );
    const w = await world(userUrl("later"));
    const log = captureLog("info");
    const daemon = await app(w.config, { logger: log.logger });
    await daemon.start();
    await waitFor("the replica to lead", () => daemon.lease.isLeader, 5000);
    expect((await daemon.status()).leaseProblem).toBeUndefined();

    // The ACL is tightened while the daemon runs.
    await setUser("later", "-eval");
    await waitFor("the lease to be refused", async () => (await daemon.status()).leaseProblem !== undefined, 5000);
    await waitFor("leadership to end", () => !daemon.lease.isLeader, 5000);
    const status = await daemon.status();
    expect(status.leaseProblem).toMatch(/^Redis refuses the leader lease: NOPERM .*'eval'.*; .*\+@scripting/);
    const errors = log.lines.filter((l) => l.level === 50 && String(l.msg).includes("refuses the leader lease"));
    expect(errors).toHaveLength(1); // once, not at every attempt
    expect(errors[0]).toMatchObject({ fix: expect.stringContaining("+@scripting") });
    const page = await fetch(`${daemon.admin!.url}/status`, { headers: { accept: "text/html" } });
    expect(await page.text()).toContain("refuses the leader lease");

    // Fixed: the problem goes, and the replica leads again.
    await setUser("later", "+eval");
    await waitFor("leadership again", () => daemon.lease.isLeader, 8000);
    expect((await daemon.status()).leaseProblem).toBeUndefined();
    expect(log.find((l) => l.msg === "Redis runs the leader lease's commands again")).toBeDefined();
  });
});
