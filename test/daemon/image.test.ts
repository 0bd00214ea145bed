// Reproduces what the container image does, without a Docker engine: the build stage (`npm run build` into dist/),
// then a clean folder with package.json + package-lock.json, `npm ci --omit=dev`, the built output and the reference
// config; the daemon started from there with Node 24 against the simulators; /healthz answered on both listeners,
// /readyz and /metrics on the admin one only (the public one answers 404);
// SIGTERM ends it with exit code 0. The install runs once; sqlite3's native addon comes from a local prebuild of the
// repository's own (localPrebuilds), as an image build with network access takes GitHub's release.
import { type ChildProcess, spawn, spawnSync } from "node:child_process";
import { cpSync, existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, symlinkSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { stringify } from "yaml";
import { imageRuntimeEnv } from "../../bench/support.ts";
import { eventIdFor } from "../../src/calendar/ids.ts";
import { ConfigSchema } from "../../src/config/schema.ts";
import { startWorld, WORLD_WEBHOOK_SECRET, type World } from "../../src/simulator/world.ts";
import { freePort } from "../support/ports.ts";

const ROOT = fileURLToPath(new URL("../..", import.meta.url));
/** Node 24: the devDependency's binary first on PATH under npm scripts, as in the image's node:24-bookworm-slim base. */
const NODE = process.execPath;
const PATH = `${dirname(NODE)}:${process.env.PATH ?? ""}`;
const INSTALL_TIMEOUT_MS = 6 * 60_000;
const DAY = 86_400_000;

interface Ran {
  code: number | null;
  output: string;
}

/** Runs a command to its end (or the timeout), keeping the tail of its output for the failure message. */
function run(
  command: string,
  args: string[],
  cwd: string,
  timeoutMs: number,
  env: NodeJS.ProcessEnv = {},
): Promise<Ran> {
  return new Promise((resolve, reject) => {
    const child = spawn(command, args, {
      cwd,
      env: { ...process.env, PATH, ...env },
      stdio: ["ignore", "pipe", "pipe"],
    });
    let output = "";
    const keep = (d: Buffer) => {
      output = (output + String(d)).slice(-20_000);
    };
    child.stdout.on("data", keep);
    child.stderr.on("data", keep);
    const timer = setTimeout(() => child.kill("SIGKILL"), timeoutMs);
    child.once("error", reject);
    child.once("close", (code) => {
      clearTimeout(timer);
      resolve({ code, output });
    });
  });
}

function must(ran: Ran, what: string): void {
  if (ran.code !== 0) throw new Error(`${what} failed (exit ${ran.code}):\n${ran.output}`);
}

/**
 * sqlite3's install takes a prebuilt addon where it finds one (prebuild-install: GitHub's releases, which this machine
 * cannot reach, or a folder of local prebuilds) and compiles it from source otherwise, about two minutes of one core.
 * The repository's own install compiled it already: offered here as the prebuilt archive that release would be, so
 * the clean install takes it as an image build with network access takes GitHub's. A name that does not match (another
 * sqlite3 version, N-API level or platform) only means the install compiles it again, as before.
 */
function localPrebuilds(tmp: string): string {
  const dir = join(tmp, "prebuilds");
  mkdirSync(dir, { recursive: true });
  const sqlite3 = join(ROOT, "node_modules/sqlite3");
  const addon = "build/Release/node_sqlite3.node";
  if (!existsSync(join(sqlite3, addon))) return dir;
  const { version, binary } = JSON.parse(readFileSync(join(sqlite3, "package.json"), "utf8")) as {
    version: string;
    binary?: { napi_versions?: number[] };
  };
  for (const napi of binary?.napi_versions ?? []) {
    const name = `sqlite3-v${version}-napi-v${napi}-${process.platform}-${process.arch}.tar.gz`;
    spawnSync("tar", ["-czf", join(dir, name), "-C", sqlite3, addon]);
  }
  return dir;
}

describe("the container image, reproduced in a clean folder", () => {
  let tmp: string;
  let app: string;

  beforeAll(
    async () => {
      tmp = mkdtempSync(join(tmpdir(), "calbridge-image-"));
      // --- build stage: sources and the full toolchain (the repository's node_modules), `npm run build`.
      const build = join(tmp, "build");
      mkdirSync(build);
      for (const f of ["package.json", "package-lock.json", "tsconfig.json", "tsconfig.build.json"]) {
        cpSync(join(ROOT, f), join(build, f));
      }
      cpSync(join(ROOT, "src"), join(build, "src"), { recursive: true });
      symlinkSync(join(ROOT, "node_modules"), join(build, "node_modules"), "dir");
      must(await run("npm", ["run", "build"], build, 3 * 60_000), "npm run build");

      // --- runtime stage: a clean folder, production dependencies only, the compiled output and the reference config.
      app = join(tmp, "app");
      mkdirSync(app);
      for (const f of ["package.json", "package-lock.json"]) cpSync(join(ROOT, f), join(app, f));
      must(
        await run("npm", ["ci", "--omit=dev", "--no-audit", "--no-fund"], app, INSTALL_TIMEOUT_MS, {
          npm_config_sqlite3_local_prebuilds: localPrebuilds(tmp),
        }),
        "npm ci --omit=dev",
      );
      cpSync(join(build, "dist"), join(app, "dist"), { recursive: true });
      mkdirSync(join(app, "config"));
      cpSync(join(ROOT, "config/example.yaml"), join(app, "config/example.yaml"));
    },
    INSTALL_TIMEOUT_MS + 4 * 60_000,
  );

  afterAll(() => {
    if (tmp) rmSync(tmp, { recursive: true, force: true });
  });

  it("holds production dependencies only", () => {
    const modules = join(app, "node_modules");
    expect(existsSync(join(modules, "sqlite3"))).toBe(true);
    expect(existsSync(join(modules, "pino"))).toBe(true);
    for (const dev of ["vitest", "typescript", "@biomejs", "@types/node", "node"]) {
      expect(existsSync(join(modules, dev)), `${dev} in the production node_modules`).toBe(false);
    }
    expect(existsSync(join(app, "dist/cli.js"))).toBe(true);
    expect(existsSync(join(app, "dist/cli.js.map"))).toBe(true);
    expect(existsSync(join(app, "src"))).toBe(false);
  });

  it("runs the daemon from dist/ against the simulators: healthy, ready, metrics, and SIGTERM exits 0", async () => {
    const world: World = await startWorld({ therapists: ["th_anna", "th_ben"] });
    let child: ChildProcess | undefined;
    try {
      const now = Date.now();
      world.booking.seed({ therapists: world.therapists, count: 6, from: now + DAY, to: now + 10 * DAY });
      // The world's config as an admin would write it: secrets as ${ENV} references, the store relative to the
      // working directory (the image's ./data, a volume), a fixed port instead of the world's 127.0.0.1:0.
      const port = await freePort();
      const adminPort = await freePort();
      const config = {
        ...world.config,
        booking: { ...world.config.booking, api_key: "${BOOKING_API_KEY}" },
        webhooks: {
          ...world.config.webhooks,
          listen: `127.0.0.1:${port}`,
          signing_secrets: ["${BOOKING_WEBHOOK_SECRET}"],
        },
        admin: { listen: `127.0.0.1:${adminPort}` },
        store: { ...world.config.store, url: "sqlite://./data/calbridge.sqlite" },
      };
      const configFile = join(tmp, "calbridge.yaml");
      writeFileSync(configFile, stringify(config));
      expect(readFileSync(configFile, "utf8")).not.toContain(world.config.booking.api_key);

      child = spawn(NODE, ["dist/cli.js", "run", "--config", configFile], {
        cwd: app,
        env: {
          PATH,
          HOME: process.env.HOME ?? tmp,
          NODE_ENV: "production",
          // The image's own runtime flags and malloc tunables: a flag Node refuses in NODE_OPTIONS would stop the
          // container at start.
          ...imageRuntimeEnv(),
          BOOKING_API_KEY: world.config.booking.api_key,
          BOOKING_WEBHOOK_SECRET: WORLD_WEBHOOK_SECRET,
        },
        stdio: ["ignore", "pipe", "pipe"],
      });
      let stdout = "";
      let stderr = "";
      child.stdout?.on("data", (d) => {
        stdout += String(d);
      });
      child.stderr?.on("data", (d) => {
        stderr += String(d);
      });
      const exited = new Promise<{ code: number | null; signal: NodeJS.Signals | null }>((resolve) =>
        child!.once("exit", (code, signal) => resolve({ code, signal })),
      );
      let exit: { code: number | null; signal: NodeJS.Signals | null } | undefined;
      void exited.then((e) => {
        exit = e;
      });
      const logs = () => stdout.split("\n").filter(Boolean);
      const base = `http://127.0.0.1:${port}`;
      const admin = `http://127.0.0.1:${adminPort}`;

      // --- liveness: polled until the daemon answers (or fails early if it died)
      const deadline = Date.now() + 30_000;
      let healthz: Response | undefined;
      while (!healthz) {
        if (exit)
          throw new Error(`the daemon exited (${JSON.stringify(exit)}) before answering:\n${stdout}\n${stderr}`);
        if (Date.now() > deadline) throw new Error(`no answer on ${base}/healthz in 30 s:\n${stdout}\n${stderr}`);
        healthz = await fetch(`${base}/healthz`).catch(() => undefined);
        if (!healthz) await new Promise((r) => setTimeout(r, 100));
      }
      expect(healthz.status).toBe(200);
      expect(await healthz.json()).toEqual({ status: "ok" });

      // The port it reports is the one configured; its store is on the ./data "volume". /healthz answers once the
      // public listener is up, a little before the line is written (and the pipe delivers it): waited for.
      const startedLine = () =>
        logs()
          .map((l) => JSON.parse(l) as Record<string, unknown>)
          .find((l) => l.msg === "calbridge started");
      for (let i = 0; i < 100 && !startedLine(); i++) await new Promise((r) => setTimeout(r, 50));
      const started = startedLine();
      expect(started).toMatchObject({ url: base, admin_url: admin, store: "sqlite", therapists: 2 });
      expect(existsSync(join(app, "data/calbridge.sqlite"))).toBe(true);

      // --- the compiled daemon does its job: the start-up reconciliation mirrors the seeded bookings
      const confirmed = world.booking.all().filter((a) => a.status === "confirmed");
      const mirrored = () =>
        confirmed.every(
          (a) => world.google.event(world.calendarOf(String(a.therapist_id)), eventIdFor(String(a.id))) !== undefined,
        );
      const until = Date.now() + 15_000;
      while (!mirrored() && Date.now() < until) await new Promise((r) => setTimeout(r, 100));
      expect(mirrored()).toBe(true);

      // --- readiness and metrics, on the admin listener only
      for (const path of ["/readyz", "/metrics", "/status"]) expect((await fetch(`${base}${path}`)).status).toBe(404);
      expect((await fetch(`${admin}/healthz`)).status).toBe(200);
      const readyz = await fetch(`${admin}/readyz`);
      const ready = (await readyz.json()) as { status: string; checks: Record<string, { ok: boolean }> };
      expect(readyz.status, JSON.stringify(ready)).toBe(200);
      expect(Object.values(ready.checks).every((c) => c.ok)).toBe(true);
      // The image's HEALTHCHECK command, as Docker runs it inside the container: the admin listener's /healthz, at
      // the admin listener's default address unless CALBRIDGE_HEALTHCHECK_URL says otherwise.
      const healthcheck = JSON.parse(
        /^HEALTHCHECK [^\n]*\\\n\s*CMD (\[.*\])$/m.exec(readFileSync(join(ROOT, "Dockerfile"), "utf8"))![1]!,
      ) as string[];
      expect(healthcheck.slice(0, 2)).toEqual(["node", "-e"]);
      expect(healthcheck[2]).toContain(`'http://${ConfigSchema.shape.admin.parse({}).listen}/healthz'`);
      const probe = (url: string) =>
        spawnSync(NODE, ["-e", healthcheck[2]!], { env: { PATH, CALBRIDGE_HEALTHCHECK_URL: url }, timeout: 10_000 });
      expect(probe(`${admin}/healthz`).status).toBe(0);
      expect(probe(`http://127.0.0.1:${await freePort()}/healthz`).status).toBe(1);
      const metrics = await fetch(`${admin}/metrics`);
      expect(metrics.status).toBe(200);
      expect(metrics.headers.get("content-type")).toMatch(/^text\/plain/);
      const text = await metrics.text();
      expect(text).toMatch(/^calbridge_leader 1$/m);
      expect(text).toMatch(/^process_cpu_user_seconds_total /m);

      // --- SIGTERM: an orderly stop, exit code 0, before `docker stop` would SIGKILL it (10 s by default)
      const sentAt = Date.now();
      child.kill("SIGTERM");
      const timeout = new Promise<"timeout">((r) => setTimeout(() => r("timeout"), 10_000));
      const result = await Promise.race([exited, timeout]);
      expect(result, `${stdout}\n${stderr}`).toEqual({ code: 0, signal: null });
      expect(Date.now() - sentAt).toBeLessThan(10_000);
      const messages = logs().map((l) => (JSON.parse(l) as { msg: string }).msg); // JSON lines, no pretty output
      expect(messages).toContain("stopping");
      expect(messages.at(-1)).toBe("calbridge stopped");
      expect(stdout + stderr).not.toContain(world.config.booking.api_key);
      expect(stderr).not.toMatch(/Error|Warning/);
    } finally {
      if (child && child.exitCode === null && child.signalCode === null) child.kill("SIGKILL");
      await world.close();
    }
  }, 90_000);
});
