// Owns the idle-daemon benchmark: `calbridge run` (the compiled daemon, a child process) with 1,000 mapped therapists
// and push channels reaching it, measured once it has settled (channels confirmed, the first reconciliation and polls
// done): its share of one core and its resident memory over an idle interval, read from /proc.
import { execFileSync } from "node:child_process";
import { readFileSync, rmSync } from "node:fs";
import { startWorld } from "../src/simulator/world.ts";
import { builtCli, DAY, freePort, round, spawnCli, stopChild, waitFor, writeConfigYaml } from "./support.ts";

export interface BenchThousandOptions {
  therapists?: number;
  /** Appointments per therapist, mirrored at start. */
  appointments?: number;
  /** Length of the measured idle interval, ms (default 60 s). */
  measureMs?: number;
}

/** User plus system CPU time of a process in ms, from /proc/<pid>/stat (Linux). */
function cpuMs(pid: number, tick: number): number {
  const stat = readFileSync(`/proc/${pid}/stat`, "utf8");
  const fields = stat.slice(stat.lastIndexOf(")") + 2).split(" ");
  return ((Number(fields[11]) + Number(fields[12])) * 1000) / tick;
}

function statusKb(pid: number, field: "VmRSS" | "VmHWM"): number {
  const m = new RegExp(`^${field}:\\s+(\\d+)\\s+kB`, "m").exec(readFileSync(`/proc/${pid}/status`, "utf8"));
  return m ? Number(m[1]) : Number.NaN;
}

export async function benchThousand(opts: BenchThousandOptions = {}): Promise<Record<string, number | string>> {
  const therapists = opts.therapists ?? 1_000;
  const perTherapist = opts.appointments ?? 2;
  const measureMs = opts.measureMs ?? 60_000;
  const tick = Number(execFileSync("getconf", ["CLK_TCK"], { encoding: "utf8" }).trim()) || 100;
  const world = await startWorld({ therapists, rateLimit: false, seed: 53 });
  const port = await freePort();
  const adminPort = await freePort();
  const config = {
    ...world.config,
    webhooks: { ...world.config.webhooks, listen: `127.0.0.1:${port}` },
    admin: { ...world.config.admin, listen: `127.0.0.1:${adminPort}` },
    google: {
      ...world.config.google,
      push: { public_url: `http://127.0.0.1:${port}/webhooks/google`, ttl_seconds: 604_800 },
    },
  };
  const now = Date.now();
  world.booking.seed({
    therapists: world.therapists,
    count: therapists * perTherapist,
    from: now + DAY,
    to: now + 30 * DAY,
  });
  const configFile = writeConfigYaml(config, world.dir);
  builtCli(); // compiled before the clock starts
  const started = performance.now();
  const daemon = spawnCli(configFile, ["run"]);
  try {
    const confirmed = () =>
      world.google.deliveries.filter((d) => d.state === "sync" && d.status === 200).length >= therapists;
    const ready = await waitFor(
      async () => {
        if (daemon.child.exitCode !== null) throw new Error(`daemon exited with ${daemon.child.exitCode}`);
        if (!confirmed()) return false;
        try {
          return (await fetch(`http://127.0.0.1:${adminPort}/readyz`)).ok;
        } catch {
          return false;
        }
      },
      300_000,
      250,
    );
    if (!ready) throw new Error("the daemon did not settle within 5 minutes");
    // Settled: nothing sent to Google for two seconds (the start's polls and listings are over).
    let last = world.google.requestLog.length;
    let quietSince = performance.now();
    await waitFor(
      () => {
        const n = world.google.requestLog.length;
        if (n !== last) {
          last = n;
          quietSince = performance.now();
        }
        return performance.now() - quietSince >= 2_000;
      },
      120_000,
      100,
    );
    const settledS = (performance.now() - started) / 1000;
    const pid = daemon.child.pid!;
    const g0 = world.google.usage.requests;
    const c0 = cpuMs(pid, tick);
    const t0 = performance.now();
    await new Promise((r) => setTimeout(r, measureMs));
    const cpu = cpuMs(pid, tick) - c0;
    const wall = performance.now() - t0;
    const requests = world.google.usage.requests - g0;
    return {
      therapists,
      appointments: therapists * perTherapist,
      settled_after_s: round(settledS, 1),
      measured_s: round(wall / 1000, 1),
      cpu_share: round(cpu / wall, 4),
      rss_mb: round(statusKb(pid, "VmRSS") / 1024, 1),
      peak_rss_mb: round(statusKb(pid, "VmHWM") / 1024, 1),
      google_requests_in_interval: requests,
      google_requests_per_therapist_day: round((requests / therapists) * (DAY / wall), 1),
    };
  } finally {
    await stopChild(daemon);
    await world.close();
    rmSync(world.dir, { recursive: true, force: true });
  }
}

if (import.meta.main) {
  console.log(JSON.stringify(await benchThousand({ measureMs: Number(process.env.MEASURE_MS ?? 60_000) }), null, 2));
}
