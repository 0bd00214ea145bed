// Two `calbridge run` processes on one SQLite store file: one leads, the other says it stands by (naming the holder's
// host and pid). A leader that is frozen (SIGSTOP: there, but not renewing) is taken over once its lease lapses, and
// when it runs again it does not lead; a leader killed with SIGKILL on this host is taken over at once (its pid is
// gone, so nothing can still be leading), not a whole lease later.
import { type ChildProcess, spawn } from "node:child_process";
import { hostname } from "node:os";
import { join } from "node:path";
import { afterEach, describe, expect, it } from "vitest";
import { startWorld, type World } from "../../src/simulator/world.ts";
import { writeConfig } from "../cli/support.ts";
import { freePort } from "../support/ports.ts";

const ROOT = new URL("../../", import.meta.url).pathname;
const NODE = join(ROOT, "node_modules/node/bin/node");
const LEASE_SECONDS = 6;
const STANDBY = "this one is a standby";
const LEADS = "leader: processing the inbox";

const cleanups: (() => Promise<unknown>)[] = [];
afterEach(async () => {
  for (const c of cleanups.splice(0).reverse()) await c().catch(() => {});
});

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
    if (child.exitCode === null && child.signalCode === null) {
      child.kill("SIGCONT");
      child.kill("SIGKILL");
    }
  });
  const count = (text: string) => out.split("\n").filter((l) => l.includes(text)).length;
  const waitFor = async (text: string, ms = 20_000, times = 1) => {
    const until = performance.now() + ms;
    while (count(text) < times) {
      if (performance.now() > until) throw new Error(`no "${text}" within ${ms} ms; output:\n${out}`);
      await new Promise((r) => setTimeout(r, 20));
    }
  };
  return { child, output: () => out, count, exited, waitFor };
}

async function configFile(w: World, name: string): Promise<string> {
  const [pub, admin] = [await freePort(), await freePort()];
  return writeConfig(
    w,
    (c) => {
      c.webhooks.listen = `127.0.0.1:${pub}`;
      c.admin.listen = `127.0.0.1:${admin}`;
      c.store.lease_seconds = LEASE_SECONDS;
    },
    name,
  );
}

describe("two calbridge processes on one SQLite store file", () => {
  it("one leads; a frozen leader is taken over when its lease lapses, a killed one at once", async () => {
    const w = await startWorld({ therapists: ["th_anna"] });
    cleanups.push(() => w.close());
    const a = run(await configFile(w, "a.yaml"));
    await a.waitFor(LEADS);
    const b = run(await configFile(w, "b.yaml"));
    await b.waitFor(STANDBY);
    await b.waitFor("calbridge started");
    const said = JSON.parse(
      b
        .output()
        .split("\n")
        .find((l) => l.includes(STANDBY))!,
    ) as Record<string, unknown>;
    expect(said).toMatchObject({ other_pid: a.child.pid, other_host: hostname() });
    expect(b.count(LEADS)).toBe(0);

    // --- frozen: its last renewal was at most L/3 ago, so the lease lapses between 2L/3 and L from now
    a.child.kill("SIGSTOP");
    const frozenAt = performance.now();
    await b.waitFor(LEADS, LEASE_SECONDS * 1000 + 3000);
    const takeover = performance.now() - frozenAt;
    expect(takeover).toBeGreaterThan((LEASE_SECONDS * 1000 * 2) / 3 - 100);
    a.child.kill("SIGCONT");
    // Running again, it finds its deadline passed and the row another's: it stops leading and stands by.
    await a.waitFor("no longer the leader", 5000);
    await a.waitFor(STANDBY, 5000);
    expect(a.count(LEADS)).toBe(1);

    // --- killed: the holder's pid is gone on this host, so the standby takes the row at its next read
    b.child.kill("SIGKILL");
    const killedAt = performance.now();
    await a.waitFor(LEADS, 5000, 2);
    expect(performance.now() - killedAt).toBeLessThan(2500);
    expect(a.output()).toContain("took over the leader lease of a daemon that is gone");

    a.child.kill("SIGTERM");
    expect(await a.exited).toBe(0);
  }, 60_000);
});
