// Test support for the command line: runs `main(argv)` in process with stdout and stderr collected, and writes a
// simulated world's configuration out as the YAML file an admin would pass with --config; runCliProcess runs it as a
// real process in a given working folder.
import { spawn } from "node:child_process";
import { writeFileSync } from "node:fs";
import { join } from "node:path";
import { stringify } from "yaml";
import { main } from "../../src/cli.ts";
import type { Config } from "../../src/config/schema.ts";
import { type App, createApp } from "../../src/daemon/app.ts";
import { silentLogger } from "../../src/log.ts";
import type { World } from "../../src/simulator/world.ts";
import { CredentialStore, SecretBox } from "../../src/store/secrets.ts";
import { openStore } from "../../src/store/store.ts";
import { captureLog } from "../support/log-capture.ts";

export interface CliResult {
  code: number;
  stdout: string;
  stderr: string;
}

/** Runs `calbridge <args...>`; output is collected, not shown. One command at a time (it swaps the process streams). */
export function runCli(...args: string[]): Promise<CliResult> {
  return runCliWatching(() => {}, ...args);
}

/** runCli, with each piece of stderr also handed to `onStderr` as it is written (a prompt to act on, say). */
export async function runCliWatching(onStderr: (text: string) => void, ...args: string[]): Promise<CliResult> {
  const out: string[] = [];
  const err: string[] = [];
  const realOut = process.stdout.write;
  const realErr = process.stderr.write;
  const collect =
    (into: string[]) =>
    (chunk: string | Uint8Array, ...rest: unknown[]): boolean => {
      into.push(typeof chunk === "string" ? chunk : Buffer.from(chunk).toString("utf8"));
      const cb = rest.find((r) => typeof r === "function") as (() => void) | undefined;
      cb?.();
      return true;
    };
  process.stdout.write = collect(out) as typeof process.stdout.write;
  const collectErr = collect(err);
  process.stderr.write = ((chunk: string | Uint8Array, ...rest: unknown[]) => {
    const ok = collectErr(chunk, ...rest);
    onStderr(typeof chunk === "string" ? chunk : Buffer.from(chunk).toString("utf8"));
    return ok;
  }) as typeof process.stderr.write;
  try {
    const code = await main(["node", "calbridge", ...args]);
    return { code, stdout: out.join(""), stderr: err.join("") };
  } finally {
    process.stdout.write = realOut;
    process.stderr.write = realErr;
  }
}

/** The world's validated config (changed by `edit`) written as YAML into the world's folder; returns its path. */
export function writeConfig(world: World, edit: (c: Config) => void = () => {}, name = "calbridge.yaml"): string {
  const config = structuredClone(world.config);
  edit(config);
  const file = join(world.dir, name);
  writeFileSync(file, stringify(config));
  return file;
}

const NODE = join(new URL("../../", import.meta.url).pathname, "node_modules/node/bin/node");
const CLI = new URL("../../src/cli.ts", import.meta.url).pathname;

/** Runs `node src/cli.ts <args...>` as a real process in `cwd` (where a relative store.url is resolved). */
export function runCliProcess(args: string[], options: { cwd?: string } = {}): Promise<CliResult> {
  return new Promise((resolve, reject) => {
    const child = spawn(NODE, [CLI, ...args], {
      cwd: options.cwd ?? process.cwd(),
      env: { ...process.env, LOG_LEVEL: "warn" },
      stdio: ["ignore", "pipe", "pipe"],
    });
    let stdout = "";
    let stderr = "";
    child.stdout.on("data", (d: Buffer) => (stdout += d.toString("utf8")));
    child.stderr.on("data", (d: Buffer) => (stderr += d.toString("utf8")));
    const timer = setTimeout(() => child.kill("SIGKILL"), 60_000);
    child.on("error", reject);
    child.on("exit", (code) => {
      clearTimeout(timer);
      resolve({ code: code ?? -1, stdout, stderr });
    });
  });
}

/** A daemon on `config`, started (its own HTTP listeners on free ports); `stopLater` is handed its stop. */
export async function startedDaemon(config: Config, stopLater: (stop: () => Promise<unknown>) => void): Promise<App> {
  const app = await createApp(config, {
    logger: captureLog("warn").logger,
    listen: "127.0.0.1:0",
    adminListen: "127.0.0.1:0",
  });
  let stopped: Promise<void> | undefined;
  stopLater(() => (stopped ??= app.stop(3000)));
  await app.start();
  return app;
}

/** startedDaemon, once it has taken the store's leader lease and run its first reconciliation. */
export async function leadingDaemon(config: Config, stopLater: (stop: () => Promise<unknown>) => void): Promise<App> {
  const app = await startedDaemon(config, stopLater);
  const until = Date.now() + 10_000;
  while (!app.lease.isLeader) {
    if (Date.now() > until) throw new Error("the daemon did not lead");
    await new Promise((r) => setTimeout(r, 20));
  }
  await app.reconcile();
  return app;
}

/**
 * Connects `therapistId` by OAuth in the world: an OAuth client of the emulator in the world's config, and the
 * therapist's refresh token stored sealed under `key`, as `calbridge authorize` leaves it.
 */
export async function connectByOAuth(world: World, therapistId: string, key: string): Promise<void> {
  const client = world.google.registerOAuthClient();
  world.config.google.oauth = client;
  const store = await openStore(world.config.store.url);
  try {
    await new CredentialStore({ store, box: new SecretBox(key) }).saveRefreshToken(
      therapistId,
      world.google.issueRefreshToken(world.calendarOf(therapistId), client.client_id),
    );
  } finally {
    await store.close();
  }
}

/** One reconciliation by a one-shot app, as `calbridge reconcile` runs it: what `config` maps is mirrored. */
export async function reconcileOnce(config: Config): Promise<void> {
  const app = await createApp(structuredClone(config), { logger: silentLogger, oneShot: true, listen: "127.0.0.1:0" });
  try {
    await app.reconcile();
  } finally {
    await app.stop(2000);
  }
}
