// Owns what the benchmarks share: result rows with targets, percentiles, counting the simulators' request logs, and
// running the daemon as a child process (config written as YAML, peak RSS read back through bench/rss-probe.mjs).
import { type ChildProcess, execFileSync, spawn } from "node:child_process";
import { copyFileSync, existsSync, mkdirSync, readFileSync, rmSync, symlinkSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { stringify } from "yaml";
import type { Config } from "../src/config/schema.ts";
import type { RequestLogEntry as BookingLogEntry } from "../src/simulator/booking/index.ts";
import type { RequestLogEntry as GoogleLogEntry } from "../src/simulator/calendar/index.ts";

export const DAY = 86_400_000;
/** The repository root (bench/..): children run from here. */
export const ROOT = join(import.meta.dirname, "..");
const PROBE = join(import.meta.dirname, "rss-probe.mjs");
const BUILD = join(import.meta.dirname, ".build");

let built: string | undefined;
/** NODE_OPTIONS of the image (the Dockerfile's ENV), so the daemon child runs with the runtime flags it ships with. */
export function imageNodeOptions(): string {
  const dockerfile = readFileSync(join(ROOT, "Dockerfile"), "utf8");
  return /NODE_OPTIONS="?([^"\\\n]+)"?/.exec(dockerfile)?.[1]?.trim() ?? "";
}

/**
 * The image's environment for the runtime (the Dockerfile's ENV): its NODE_OPTIONS, and the glibc malloc tunables it
 * sets (MALLOC_ARENA_MAX, MALLOC_MMAP_THRESHOLD_, ...: a line of the ENV instruction each, not a comment).
 */
export function imageRuntimeEnv(): Record<string, string> {
  const dockerfile = readFileSync(join(ROOT, "Dockerfile"), "utf8");
  const malloc = [...dockerfile.matchAll(/^[ \t]*(?:ENV[ \t]+)?(MALLOC_[A-Z_]+)=(\d+)/gm)].map((m) => [m[1]!, m[2]!]);
  return { NODE_OPTIONS: imageNodeOptions(), ...Object.fromEntries(malloc) };
}

/**
 * The daemon as the image runs it: `tsc -p tsconfig.build.json` into bench/.build/dist (once per run), beside a copy
 * of package.json and a link to node_modules. Measuring `node src/cli.ts` would add Node's TypeScript stripper
 * (~30 MB) to every figure, which production does not load.
 */
export function builtCli(): string {
  if (built) return built;
  rmSync(BUILD, { recursive: true, force: true });
  mkdirSync(BUILD, { recursive: true });
  execFileSync(
    process.execPath,
    [
      join(ROOT, "node_modules", "typescript", "bin", "tsc"),
      "-p",
      join(ROOT, "tsconfig.build.json"),
      "--outDir",
      join(BUILD, "dist"),
    ],
    { stdio: "inherit" },
  );
  copyFileSync(join(ROOT, "package.json"), join(BUILD, "package.json"));
  symlinkSync(join(ROOT, "node_modules"), join(BUILD, "node_modules"));
  built = join(BUILD, "dist", "cli.js");
  return built;
}

/** One line of the results table: what was measured, the figure, and its target when there is one. */
export interface Row {
  bench: string;
  what: string;
  value: number | string;
  unit?: string;
  /** Human-readable target, e.g. ">= 90%". */
  target?: string;
  /** Whether the target was met (absent when there is no target). */
  met?: boolean;
}

export const round = (n: number, digits = 2): number => {
  const f = 10 ** digits;
  return Math.round(n * f) / f;
};

export function percentile(sorted: readonly number[], p: number): number {
  return sorted.length === 0 ? Number.NaN : sorted[Math.min(sorted.length - 1, Math.floor((p / 100) * sorted.length))]!;
}

export const pct = (share: number): string => `${round(share * 100, 1)}%`;
export const mb = (kb: number): number => round(kb / 1024, 1);

/** Booking API requests of a slice of the simulator's log, by kind. */
export function bookingCounts(log: readonly BookingLogEntry[]) {
  const byRoute: Record<string, number> = {};
  let rateLimited = 0;
  for (const r of log) {
    byRoute[r.route] = (byRoute[r.route] ?? 0) + 1;
    if (r.status === 429) rateLimited++;
  }
  return {
    total: log.length,
    list: byRoute["GET /v1/appointments"] ?? 0,
    get: byRoute["GET /v1/appointments/:id"] ?? 0,
    writes: log.filter((r) => r.method !== "GET").length,
    rateLimited,
    byRoute,
  };
}

/** Google requests of a slice of the emulator's log: token requests, API reads and API writes. */
export function googleCounts(log: readonly GoogleLogEntry[]) {
  let token = 0;
  let reads = 0;
  let writes = 0;
  let errors = 0;
  for (const r of log) {
    if (r.path === "/token") token++;
    else if (r.method === "GET") reads++;
    else writes++;
    if (r.status >= 400) errors++;
  }
  return { total: log.length, token, reads, writes, errors };
}

/** Writes the validated config as YAML, the file an admin would hand to the daemon; returns its path. */
export function writeConfigYaml(config: Config, dir: string, name = "calbridge.yaml"): string {
  const path = join(dir, name);
  writeFileSync(path, stringify(config), { mode: 0o600 });
  return path;
}

/**
 * A port that nothing listens on, for a child that must listen where the simulator delivers: the tests' own choice,
 * below the range outgoing connections take their ports from (see test/support/ports.ts).
 */
export { freePort } from "../test/support/ports.ts";

/** What bench/rss-probe.mjs wrote when the child exited. */
export interface ProbeReport {
  exitCode: number;
  maxRssKb: number;
  peakHeapUsedKb: number;
  peakExternalKb: number;
  userCpuMs: number;
  systemCpuMs: number;
  wallMs: number;
}

export interface DaemonChild {
  child: ChildProcess;
  /** Resolves when the child exited, with its output (stdout kept whole only when asked) and the probe's report. */
  done: Promise<{ code: number | null; signal: string | null; stdout: string; stderr: string; probe?: ProbeReport }>;
}

/**
 * Runs the compiled daemon (`node dist/cli.js --config <file> <args>`, see builtCli) with the RSS probe preloaded, in the
 * image's runtime environment (imageRuntimeEnv). `keepStdout: false` drops stdout but
 * its last 8 KB (the daemon's log lines), so a long run does not pile up its logs here.
 */
export function spawnCli(
  configFile: string,
  args: string[],
  opts: { keepStdout?: boolean; env?: Record<string, string> } = {},
): DaemonChild {
  const probeFile = `${configFile}.probe-${process.hrtime.bigint()}.json`;
  const child = spawn(process.execPath, ["--import", PROBE, builtCli(), "--config", configFile, ...args], {
    cwd: ROOT,
    env: { ...process.env, ...imageRuntimeEnv(), ...opts.env, CALBRIDGE_BENCH_PROBE: probeFile },
    stdio: ["ignore", "pipe", "pipe"],
  });
  let stdout = "";
  let stderr = "";
  child.stdout!.setEncoding("utf8").on("data", (d: string) => {
    stdout += d;
    if (!opts.keepStdout && stdout.length > 16_384) stdout = stdout.slice(-8192);
  });
  child.stderr!.setEncoding("utf8").on("data", (d: string) => {
    stderr += d;
    if (stderr.length > 16_384) stderr = stderr.slice(-8192);
  });
  const done = new Promise<Awaited<DaemonChild["done"]>>((resolve) => {
    child.on("close", (code, signal) => {
      const probe = existsSync(probeFile) ? (JSON.parse(readFileSync(probeFile, "utf8")) as ProbeReport) : undefined;
      resolve({ code, signal, stdout, stderr, ...(probe ? { probe } : {}) });
    });
  });
  return { child, done };
}

/** Stops a child with SIGTERM, then SIGKILL after `graceMs`. */
export async function stopChild(d: DaemonChild, graceMs = 20_000): Promise<Awaited<DaemonChild["done"]>> {
  if (d.child.exitCode === null && d.child.signalCode === null) d.child.kill("SIGTERM");
  const timer = setTimeout(() => d.child.kill("SIGKILL"), graceMs);
  try {
    return await d.done;
  } finally {
    clearTimeout(timer);
  }
}

/** Polls `fn` every `everyMs` until it returns true or `timeoutMs` passes; returns whether it did. */
export async function waitFor(fn: () => boolean | Promise<boolean>, timeoutMs: number, everyMs = 50): Promise<boolean> {
  const until = performance.now() + timeoutMs;
  while (performance.now() < until) {
    if (await fn()) return true;
    await new Promise((r) => setTimeout(r, everyMs));
  }
  return fn();
}

/** One row of the table; pass `target` and `met` together when the figure has a target. */
export function row(
  bench: string,
  what: string,
  value: number | string,
  extra: { unit?: string; target?: string; met?: boolean } = {},
): Row {
  return { bench, what, value, ...extra };
}
