// Tests `calbridge run` as a real process around its start: a start that fails ends the process (exit 1) with what it
// opened closed, signals are handled from the process's first moment (a SIGHUP while the modules load is a reload
// once started, not the end of the daemon; a SIGTERM then exits 0), and an unknown LOG_LEVEL is a configuration
// error (exit 2 naming it) for every command that logs.
import { type ChildProcess, spawn } from "node:child_process";
import { createServer, type Server } from "node:net";
import { join } from "node:path";
import { afterEach, describe, expect, it } from "vitest";
import { commandOf } from "../../src/cli/early-signals.ts";
import { createApp } from "../../src/daemon/app.ts";
import { silentLogger } from "../../src/log.ts";
import { startWorld, type World } from "../../src/simulator/world.ts";
import { freePort } from "../support/ports.ts";
import { runCli, writeConfig } from "./support.ts";

const ROOT = new URL("../../", import.meta.url).pathname;
const NODE = join(ROOT, "node_modules/node/bin/node");
const SLOW_LOAD = join(ROOT, "test/cli/slow-load.ts");

const cleanups: (() => Promise<void>)[] = [];
afterEach(async () => {
  for (const c of cleanups.splice(0).reverse()) await c().catch(() => {});
});

async function world(): Promise<World> {
  const w = await startWorld({ therapists: ["th_anna"] });
  cleanups.push(() => w.close());
  return w;
}

/** A TCP server holding a port of 127.0.0.1 (another program on the admin port: a Prometheus, say). */
async function squat(): Promise<number> {
  const server: Server = createServer();
  await new Promise<void>((r) => server.listen(0, "127.0.0.1", () => r()));
  cleanups.push(() => new Promise<void>((r) => server.close(() => r())));
  return (server.address() as { port: number }).port;
}

interface Daemon {
  child: ChildProcess;
  /** stdout and stderr so far. */
  output(): string;
  exited: Promise<{ code: number | null; signal: NodeJS.Signals | null }>;
  /** Resolves once the output contains `text` (rejects after `ms`). */
  waitFor(text: string, ms?: number): Promise<void>;
}

/** `node [--import slow-load.ts] src/cli.ts <args>`, LOG_LEVEL info; killed after the test. */
function spawnCli(args: string[], options: { env?: Record<string, string>; slowLoad?: boolean } = {}): Daemon {
  const child = spawn(NODE, [...(options.slowLoad ? ["--import", SLOW_LOAD] : []), join(ROOT, "src/cli.ts"), ...args], {
    cwd: ROOT,
    env: { ...process.env, LOG_LEVEL: "info", ...options.env },
    stdio: ["ignore", "pipe", "pipe"],
  });
  let out = "";
  const waiting = new Set<() => void>();
  const take = (d: Buffer) => {
    out += d.toString("utf8");
    for (const w of waiting) w();
  };
  child.stdout?.on("data", take);
  child.stderr?.on("data", take);
  const exited = new Promise<{ code: number | null; signal: NodeJS.Signals | null }>((r) =>
    child.on("exit", (code, signal) => r({ code, signal })),
  );
  cleanups.push(async () => {
    if (child.exitCode === null && child.signalCode === null) child.kill("SIGKILL");
  });
  return {
    child,
    output: () => out,
    exited,
    waitFor: (text, ms = 20_000) =>
      new Promise<void>((resolve, reject) => {
        const check = () => {
          if (!out.includes(text)) return;
          waiting.delete(check);
          clearTimeout(timer);
          resolve();
        };
        const timer = setTimeout(() => {
          waiting.delete(check);
          reject(new Error(`no "${text}" within ${ms} ms; output:\n${out}`));
        }, ms);
        waiting.add(check);
        check();
      }),
  };
}

const within = <T>(p: Promise<T>, ms: number): Promise<T | "still running"> =>
  Promise.race([p, new Promise<"still running">((r) => setTimeout(() => r("still running"), ms))]);

describe("a start that fails", () => {
  it("closes the listener it had opened and the store: start() rejects with nothing left open", async () => {
    const w = await world();
    const adminPort = await squat();
    const app = await createApp(w.config, {
      logger: silentLogger,
      listen: "127.0.0.1:0",
      adminListen: `127.0.0.1:${adminPort}`,
    });
    await expect(app.start()).rejects.toThrow(`cannot listen on 127.0.0.1:${adminPort}: EADDRINUSE`);
    const publicUrl = app.http?.url;
    expect(publicUrl).toBeDefined();
    // The public listener answered /healthz 200 and took webhooks nothing would process.
    const healthz = await fetch(`${publicUrl}/healthz`).then(
      (r) => r.status,
      (err: Error) => (err.cause as NodeJS.ErrnoException | undefined)?.code,
    );
    expect(healthz).toBe("ECONNREFUSED");
    await expect(app.store.ping()).rejects.toThrow();
  });

  it("`calbridge run` exits 1 with the reason when the admin port is taken, instead of running half-started", async () => {
    const w = await world();
    const adminPort = await squat();
    const publicPort = await freePort();
    const file = writeConfig(w, (c) => {
      c.webhooks.listen = `127.0.0.1:${publicPort}`;
      c.admin.listen = `127.0.0.1:${adminPort}`;
    });
    const daemon = spawnCli(["run", "--config", file]);
    const end = await within(daemon.exited, 20_000);
    expect(end).toEqual({ code: 1, signal: null });
    expect(daemon.output()).toContain(`calbridge: http: cannot listen on 127.0.0.1:${adminPort}: EADDRINUSE`);
    expect(daemon.output()).toContain("calbridge did not start: closing what it opened");
  }, 30_000);
});

describe("signals while `calbridge run` starts", () => {
  it("a SIGHUP while the modules load does not end the daemon: it reloads once started", async () => {
    const w = await world();
    const file = writeConfig(w, (c) => {
      c.webhooks.listen = "127.0.0.1:0";
      c.admin.listen = "127.0.0.1:0";
    });
    // The modules take 1.5 s more to load: the SIGHUP lands while they do (Node's default for it ends the process).
    const daemon = spawnCli(["run", "--config", file], { slowLoad: true });
    await daemon.waitFor("slow-load: store.ts");
    daemon.child.kill("SIGHUP");
    expect(await within(daemon.exited, 1000)).toBe("still running");
    await daemon.waitFor("reloading the configuration (SIGHUP)");
    await daemon.waitFor("configuration reloaded");
    const out = daemon.output();
    expect(out.indexOf("calbridge started")).toBeGreaterThan(-1);
    expect(out.indexOf("calbridge started")).toBeLessThan(out.indexOf("reloading the configuration (SIGHUP)"));
    daemon.child.kill("SIGTERM");
    expect(await within(daemon.exited, 15_000)).toEqual({ code: 0, signal: null });
    expect(daemon.output()).toContain("calbridge stopped");
  }, 40_000);

  it("a SIGTERM while the modules load exits 0 without starting", async () => {
    const w = await world();
    const file = writeConfig(w, (c) => {
      c.webhooks.listen = "127.0.0.1:0";
      c.admin.listen = "127.0.0.1:0";
    });
    const daemon = spawnCli(["run", "--config", file], { slowLoad: true });
    await daemon.waitFor("slow-load: store.ts");
    daemon.child.kill("SIGTERM");
    expect(await within(daemon.exited, 10_000)).toEqual({ code: 0, signal: null });
    // Held by the entry ("SIGTERM before the start: stopped"), or by `run` itself when the loading went on before the
    // signal was taken ("stopping before the start"): either way nothing started.
    expect(daemon.output()).toMatch(
      /SIGTERM before the start: stopped|"signal":"SIGTERM","msg":"stopping before the start"/,
    );
    expect(daemon.output()).not.toContain("calbridge started");
  }, 30_000);

  it("a SIGTERM during the start stops the daemon in order once the start is over", async () => {
    const w = await world();
    const file = writeConfig(w, (c) => {
      c.webhooks.listen = "127.0.0.1:0";
      c.admin.listen = "127.0.0.1:0";
    });
    const daemon = spawnCli(["run", "--config", file]);
    // The public listener is open: the start is under way.
    await daemon.waitFor('"listener":"public"');
    daemon.child.kill("SIGTERM");
    expect(await within(daemon.exited, 15_000)).toEqual({ code: 0, signal: null });
    expect(daemon.output()).toContain("calbridge stopped");
  }, 30_000);

  it("only `run` holds the signals early; the command is the first word that is no option", () => {
    expect(commandOf(["node", "cli.ts", "run"])).toBe("run");
    expect(commandOf(["node", "cli.ts", "--config", "run", "reconcile"])).toBe("reconcile");
    expect(commandOf(["node", "cli.ts", "-c", "x.yaml", "run"])).toBe("run");
    expect(commandOf(["node", "cli.ts", "--config=x.yaml", "run"])).toBe("run");
    expect(commandOf(["node", "cli.ts", "--help"])).toBeUndefined();
  });
});

describe("LOG_LEVEL", () => {
  const LINE = /^calbridge: LOG_LEVEL "warning": expected one of trace, debug, info, warn, error, fatal, silent$/;

  it("an unknown level stops `calbridge run` with exit 2 and one line naming LOG_LEVEL and the levels", async () => {
    const w = await world();
    const file = writeConfig(w, (c) => {
      c.webhooks.listen = "127.0.0.1:0";
      c.admin.listen = "127.0.0.1:0";
    });
    const daemon = spawnCli(["run", "--config", file], { env: { LOG_LEVEL: "warning" } });
    expect(await within(daemon.exited, 20_000)).toEqual({ code: 2, signal: null });
    expect(daemon.output().trimEnd()).toMatch(LINE);
  }, 30_000);

  it("the one-shot commands too; a known level in another case is taken", async () => {
    const w = await world();
    const file = writeConfig(w);
    const before = process.env.LOG_LEVEL;
    try {
      // A known level in another case first: that run also creates the store, which `writeback held` and the dry run
      // want to find.
      process.env.LOG_LEVEL = "WARN";
      expect((await runCli("reconcile", "--config", file)).code).toBe(0);
      process.env.LOG_LEVEL = "warning";
      for (const command of [["reconcile", "--dry-run"], ["doctor"], ["writeback", "held"]]) {
        const r = await runCli(...command, "--config", file);
        expect({ command, code: r.code, stderr: r.stderr.trimEnd() }).toEqual({
          command,
          code: 2,
          stderr: expect.stringMatching(LINE),
        });
      }
    } finally {
      if (before === undefined) delete process.env.LOG_LEVEL;
      else process.env.LOG_LEVEL = before;
    }
  }, 30_000);
  it("every command checks it before it runs, also those that log nothing (history, config-schema, authorize)", async () => {
    const w = await world();
    const file = writeConfig(w);
    const before = process.env.LOG_LEVEL;
    try {
      process.env.LOG_LEVEL = "warning";
      const commands = [
        ["history", "x", "--config", file],
        ["config-schema"],
        ["authorize", "--therapist", w.config.therapists[0]!.therapist_id, "--config", file],
      ];
      const results = [];
      for (const command of commands) {
        const r = await runCli(...command);
        results.push({ command, code: r.code, stdout: r.stdout.slice(0, 80), stderr: r.stderr.trimEnd() });
      }
      expect(results).toEqual(
        commands.map((command) => ({ command, code: 2, stdout: "", stderr: expect.stringMatching(LINE) })),
      );
    } finally {
      if (before === undefined) delete process.env.LOG_LEVEL;
      else process.env.LOG_LEVEL = before;
    }
  }, 30_000);
});
