// Runs `calbridge run` as a real process (src/cli.ts with Node 24 from node_modules: the code the image compiles)
// against a simulated world, optionally as another user and group (the container's unprivileged user), and collects
// its stdout JSON lines.
import { type ChildProcess, spawn, spawnSync } from "node:child_process";
import { writeFileSync } from "node:fs";
import { join } from "node:path";
import { stringify } from "yaml";
import type { Config } from "../../src/config/schema.ts";
import type { World } from "../../src/simulator/world.ts";

export const ROOT = new URL("../../", import.meta.url).pathname;
export const NODE = join(ROOT, "node_modules/node/bin/node");

export function writeConfig(
  world: World,
  edit: (c: Config) => void = () => {},
  file = join(world.dir, "calbridge.yaml"),
): string {
  const config = structuredClone(world.config);
  edit(config);
  writeFileSync(file, stringify(config));
  return file;
}

export interface Daemon {
  child: ChildProcess;
  stdout: () => string;
  stderr: () => string;
  lines: () => Record<string, unknown>[];
  waitFor: (msg: string | RegExp, timeoutMs?: number) => Promise<Record<string, unknown>>;
  exited: Promise<{ code: number | null; signal: NodeJS.Signals | null }>;
}

export function startDaemon(
  args: string[],
  opts: { env?: Record<string, string>; cwd?: string; uid?: number; gid?: number } = {},
): Daemon {
  const child = spawn(NODE, [join(ROOT, "src/cli.ts"), ...args], {
    cwd: opts.cwd ?? ROOT,
    env: { PATH: process.env.PATH ?? "", HOME: process.env.HOME ?? "/tmp", LOG_LEVEL: "info", ...opts.env },
    stdio: ["ignore", "pipe", "pipe"],
    ...(opts.uid !== undefined ? { uid: opts.uid } : {}),
    ...(opts.gid !== undefined ? { gid: opts.gid } : {}),
  });
  let out = "";
  let err = "";
  child.stdout!.on("data", (d) => {
    out += String(d);
  });
  child.stderr!.on("data", (d) => {
    err += String(d);
  });
  // A process that could not be started at all (node not executable by that uid) emits "error" and never "exit".
  const exited = new Promise<{ code: number | null; signal: NodeJS.Signals | null }>((resolve) => {
    child.once("exit", (code, signal) => resolve({ code, signal }));
    child.once("error", (e) => {
      err += `could not start: ${e.message}\n`;
      resolve({ code: null, signal: null });
    });
  });
  let done = false;
  void exited.then(() => {
    done = true;
  });
  const lines = () =>
    out
      .split("\n")
      .filter(Boolean)
      .map((l) => {
        try {
          return JSON.parse(l) as Record<string, unknown>;
        } catch {
          return { unparsed: l } as Record<string, unknown>;
        }
      });
  const waitFor = async (msg: string | RegExp, timeoutMs = 20_000) => {
    const until = Date.now() + timeoutMs;
    for (;;) {
      const hit = lines().find((l) => (typeof msg === "string" ? l.msg === msg : msg.test(String(l.msg))));
      if (hit) return hit;
      if (done) throw new Error(`exited before "${msg}":\n${out}\n${err}`);
      if (Date.now() > until) throw new Error(`no "${msg}" in ${timeoutMs} ms:\n${out}\n${err}`);
      await new Promise((r) => setTimeout(r, 25));
    }
  };
  return { child, stdout: () => out, stderr: () => err, lines, waitFor, exited };
}

/**
 * Why `uid:gid` cannot run the checkout's daemon (node and src/cli.ts must be reachable: every folder above the
 * checkout traversable by others, which a `mktemp -d` checkout is not); undefined when it can.
 */
export function unreachableFor(uid: number, gid: number): string | undefined {
  const cli = join(ROOT, "src/cli.ts");
  const probe = spawnSync(NODE, ["-e", `require("node:fs").accessSync(${JSON.stringify(cli)})`], {
    uid,
    gid,
    encoding: "utf8",
    timeout: 30_000,
  });
  if (probe.status === 0) return undefined;
  const why = probe.error?.message ?? probe.stderr.trim().split("\n")[0] ?? `exit ${probe.status}`;
  return `uid ${uid} cannot run ${NODE} on ${cli} (${why}): make the folders above the checkout traversable (chmod o+x; .ci/run does)`;
}
