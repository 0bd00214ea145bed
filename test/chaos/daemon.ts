// A calbridge daemon as a child process (`node src/cli.ts run --config FILE`), with the simulators staying in the
// test process: its configuration is the world's, written as YAML with the secrets as ${ENV} references, on a fixed
// free port so restarts keep the address the booking simulator delivers to. It can be killed with SIGKILL and
// started again on the same store.
import { type ChildProcess, spawn } from "node:child_process";
import { writeFileSync } from "node:fs";
import { join } from "node:path";
import { stringify } from "yaml";
import type { Config } from "../../src/config/schema.ts";
import { WORLD_WEBHOOK_SECRET, type World } from "../../src/simulator/world.ts";
import { freePort } from "../support/ports.ts";
import { collectChild, recordWorldSecrets } from "./logs.ts";

export const ROOT = new URL("../../", import.meta.url).pathname;
export const CLI = join(ROOT, "src/cli.ts");

/** The environment a daemon of this world needs: the secrets its YAML refers to, debug logging, no colours. */
export function daemonEnv(world: World): NodeJS.ProcessEnv {
  return {
    PATH: process.env.PATH,
    HOME: process.env.HOME,
    NODE_NO_WARNINGS: "1",
    LOG_LEVEL: "debug",
    BOOKING_API_KEY: world.booking.apiKey,
    BOOKING_WEBHOOK_SECRET: WORLD_WEBHOOK_SECRET,
  };
}

/**
 * Writes the world's config as the YAML an admin would, secrets as ${ENV} references, the public listener on `port`
 * and the admin one on `adminPort`; returns the file's path.
 */
export function writeDaemonConfig(
  world: World,
  port: number,
  edit: (c: Config) => void = () => {},
  adminPort = 0,
): string {
  const config = structuredClone(world.config) as Config;
  config.booking.api_key = "${BOOKING_API_KEY}";
  config.webhooks.signing_secrets = ["${BOOKING_WEBHOOK_SECRET}"];
  config.webhooks.listen = `127.0.0.1:${port}`;
  config.admin.listen = `127.0.0.1:${adminPort}`;
  edit(config);
  const file = join(world.dir, `calbridge-${port}.yaml`);
  writeFileSync(file, stringify(config));
  recordWorldSecrets(world);
  return file;
}

export interface Daemon {
  /** The public listener (webhooks, push, /healthz). */
  readonly url: string;
  /** The admin listener (/status, /metrics, /readyz, /healthz). */
  readonly adminUrl: string;
  readonly webhookUrl: string;
  /** The YAML file the daemon reads (rewrite it and send SIGHUP to reload). */
  readonly configFile: string;
  /** The current process (a new one after each restart). */
  readonly child: ChildProcess;
  /** Times the process was started. */
  readonly starts: number;
  /** Log lines (stdout and stderr) of every process started so far. */
  lines(): string[];
  /** Exits nobody asked for (a crash): code and signal of each. */
  readonly unexpectedExits: readonly string[];
  alive(): boolean;
  start(): Promise<void>;
  /** SIGKILL, and wait for the process to be gone. */
  kill9(): Promise<void>;
  /** SIGTERM (orderly stop); SIGKILL after `graceMs`. Resolves with the exit code. */
  stop(graceMs?: number): Promise<number | null>;
}

export interface DaemonOptions {
  name: string;
  edit?: (c: Config) => void;
  /** How long start() waits for /healthz (default 30 s). */
  readyTimeoutMs?: number;
  /** Added to (or overriding) the daemon's environment (NODE_OPTIONS, LOG_LEVEL, ...). */
  env?: NodeJS.ProcessEnv;
}

export async function daemonFor(world: World, options: DaemonOptions): Promise<Daemon> {
  const port = await freePort();
  const adminPort = await freePort();
  const configFile = writeDaemonConfig(world, port, options.edit, adminPort);
  const url = `http://127.0.0.1:${port}`;
  let child: ChildProcess | undefined;
  let exited: Promise<number | null> = Promise.resolve(null);
  let running = false;
  let starts = 0;
  const unexpectedExits: string[] = [];
  const outputs: string[][] = [];

  const d: Daemon = {
    url,
    adminUrl: `http://127.0.0.1:${adminPort}`,
    webhookUrl: `${url}${world.config.webhooks.path}`,
    configFile,
    get child() {
      if (!child) throw new Error("daemon not started");
      return child;
    },
    get starts() {
      return starts;
    },
    unexpectedExits,
    lines: () => outputs.flat(),
    alive: () => running,
    async start() {
      starts++;
      const proc = spawn(process.execPath, [CLI, "run", "--config", configFile], {
        cwd: ROOT,
        env: { ...daemonEnv(world), ...options.env },
        stdio: ["ignore", "pipe", "pipe"],
      });
      child = proc;
      running = true;
      outputs.push(collectChild(`${options.name} #${starts}`, proc));
      exited = new Promise((resolve) => {
        proc.once("exit", (code, signal) => {
          running = false;
          if (signal !== "SIGKILL" && signal !== "SIGTERM") unexpectedExits.push(`code ${code} signal ${signal}`);
          resolve(code);
        });
      });
      const deadline = Date.now() + (options.readyTimeoutMs ?? 30_000);
      for (;;) {
        if (!running)
          throw new Error(`${options.name}: the daemon exited during start (${unexpectedExits.join("; ")})`);
        try {
          const res = await fetch(`${url}/healthz`, { signal: AbortSignal.timeout(1000) });
          await res.body?.cancel();
          if (res.status === 200) return;
        } catch {
          // not listening yet
        }
        if (Date.now() > deadline) throw new Error(`${options.name}: /healthz did not answer 200 in time`);
        await new Promise((r) => setTimeout(r, 50));
      }
    },
    async kill9() {
      if (!child || !running) return;
      child.kill("SIGKILL");
      await exited;
    },
    async stop(graceMs = 20_000) {
      if (!child || !running) return exited;
      const proc = child;
      proc.kill("SIGTERM");
      const timer = setTimeout(() => proc.kill("SIGKILL"), graceMs);
      const code = await exited;
      clearTimeout(timer);
      return code;
    },
  };
  return d;
}
