// A SQLite store is one replica's, always its leader: two `calbridge run` on one store file (a rolling update on a
// shared volume, a second run started by hand) would both process, reconcile, poll and notify. Each daemon keeps a
// heartbeat in the store, and one that finds another live daemon's heartbeat says so as an error naming its host and
// pid. An entry an earlier daemon of this host left (this process started again, or a process that is gone) is no
// other daemon, and an orderly stop removes its own.
import { type ChildProcess, spawn } from "node:child_process";
import { hostname } from "node:os";
import { join } from "node:path";
import { afterEach, describe, expect, it } from "vitest";
import { createApp } from "../../src/daemon/app.ts";
import { startWorld, type World } from "../../src/simulator/world.ts";
import { RUNNER_KEY, type Runner } from "../../src/store/sqlite-runners.ts";
import { openStore } from "../../src/store/store.ts";
import { writeConfig } from "../cli/support.ts";
import { captureLog } from "../support/log-capture.ts";
import { freePort } from "../support/ports.ts";

const ROOT = new URL("../../", import.meta.url).pathname;
const NODE = join(ROOT, "node_modules/node/bin/node");
const WARNING = "another calbridge daemon uses this SQLite store file";

const cleanups: (() => Promise<unknown>)[] = [];
afterEach(async () => {
  for (const c of cleanups.splice(0).reverse()) await c().catch(() => {});
});

async function world(): Promise<World> {
  const w = await startWorld({ therapists: ["th_anna"] });
  cleanups.push(() => w.close());
  return w;
}

/** `calbridge run --config <file>` as a process of its own; its output so far, and a wait for a text in it. */
function run(file: string) {
  const child: ChildProcess = spawn(NODE, [join(ROOT, "src/cli.ts"), "run", "--config", file], {
    cwd: ROOT,
    env: { ...process.env, LOG_LEVEL: "info" },
    stdio: ["ignore", "pipe", "pipe"],
  });
  let out = "";
  child.stdout?.on("data", (d: Buffer) => {
    out += d.toString("utf8");
  });
  child.stderr?.on("data", (d: Buffer) => {
    out += d.toString("utf8");
  });
  const exited = new Promise<number | null>((r) => child.on("exit", (code) => r(code)));
  cleanups.push(async () => {
    if (child.exitCode === null && child.signalCode === null) child.kill("SIGKILL");
  });
  const waitFor = async (text: string, ms = 20_000) => {
    const until = performance.now() + ms;
    while (!out.includes(text)) {
      if (performance.now() > until) throw new Error(`no "${text}" within ${ms} ms; output:\n${out}`);
      await new Promise((r) => setTimeout(r, 50));
    }
  };
  return { child, output: () => out, exited, waitFor };
}

/** A config file of its own (own ports) on the world's store, heartbeats every second. */
async function configFile(w: World, name: string): Promise<string> {
  const [pub, admin] = [await freePort(), await freePort()];
  return writeConfig(
    w,
    (c) => {
      c.webhooks.listen = `127.0.0.1:${pub}`;
      c.admin.listen = `127.0.0.1:${admin}`;
      c.store.lease_seconds = 3;
    },
    name,
  );
}

describe("two daemons on one SQLite store file", () => {
  it("each says so as an error naming the other's pid; an orderly stop leaves no heartbeat behind", async () => {
    const w = await world();
    const a = run(await configFile(w, "a.yaml"));
    await a.waitFor("calbridge started");
    const b = run(await configFile(w, "b.yaml"));
    await b.waitFor("calbridge started");
    // The second finds the first's heartbeat at its start; the first finds the second's at its next beat.
    await b.waitFor(WARNING);
    await a.waitFor(WARNING, 5000);
    const warned = (out: string) =>
      JSON.parse(out.split("\n").find((l) => l.includes(WARNING))!) as Record<string, unknown>;
    expect(warned(b.output())).toMatchObject({ level: 50, other_pid: a.child.pid, other_host: hostname() });
    expect(warned(a.output())).toMatchObject({ level: 50, other_pid: b.child.pid });

    a.child.kill("SIGTERM");
    b.child.kill("SIGTERM");
    expect(await a.exited).toBe(0);
    expect(await b.exited).toBe(0);
    const store = await openStore(w.config.store.url);
    try {
      expect(await store.table<Runner>("meta").get(RUNNER_KEY)).toBeUndefined();
    } finally {
      await store.close();
    }
  }, 60_000);

  it("an entry left by an earlier daemon of this host (this process, or one that is gone) is no other daemon", async () => {
    const w = await world();
    const config = { ...w.config, store: { ...w.config.store, lease_seconds: 3 } };
    for (const pid of [process.pid, 2 ** 22 + 17]) {
      // As a daemon killed a moment ago left it (its ttl not over).
      const store = await openStore(config.store.url);
      await store
        .table<Runner>("meta")
        .set(RUNNER_KEY, { holder: `${hostname()}:${pid}:dead`, host: hostname(), pid, at: Date.now() }, 3000);
      await store.close();
      const log = captureLog("info");
      const app = await createApp(config, { logger: log.logger, listen: "127.0.0.1:0", adminListen: "127.0.0.1:0" });
      await app.start();
      await app.stop(2000);
      expect(log.lines.filter((l) => String(l["msg"]).startsWith(WARNING))).toEqual([]);
    }
  });
});
