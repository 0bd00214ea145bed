// Owns the reconciliation benchmark: 10,000 appointments across 50 therapists in the simulators (this process), a cold
// and then a warm `calbridge reconcile --json` in a child process (the daemon's own peak RSS), and per run the wall
// time, booking and Google requests by kind, calendar writes and the listing against its floor.
import { rmSync } from "node:fs";
import { startWorld } from "../src/simulator/world.ts";
import { bookingCounts, DAY, googleCounts, mb, type ProbeReport, spawnCli, writeConfigYaml } from "./support.ts";

export interface BenchReconcileOptions {
  /** Appointments seeded over now-5d .. now+80d (default 10,000). */
  n?: number;
  /** Therapists, all mapped (default 50). */
  therapists?: number;
  /** Booking rate limit (default the Standard plan's 60 a minute, the minute scaled to 1 s as in the listing bench). */
  rateLimit?: { limit: number; windowMs: number } | false;
}

interface ReconcileJson {
  ok: boolean;
  durationMs: number;
  appointments: number;
  managedEvents: number;
  counts: Record<string, number>;
  failed: number;
  guard: { tripped: boolean };
}

export async function benchReconcile(opts: BenchReconcileOptions = {}): Promise<Record<string, number | string>> {
  const n = opts.n ?? 10_000;
  const therapists = opts.therapists ?? 50;
  const rateLimit = opts.rateLimit ?? { limit: 60, windowMs: 1_000 };
  const world = await startWorld({ therapists, rateLimit, seed: 11 });
  try {
    const now = Date.now();
    const ids = world.booking.seed({ therapists: world.therapists, count: n, from: now - 5 * DAY, to: now + 80 * DAY });
    const expectedEvents = ids.filter((id) => world.booking.get(id)?.status !== "cancelled").length;
    const configFile = writeConfigYaml(world.config, world.dir);
    const out: Record<string, number | string> = {
      appointments_seeded: n,
      therapists,
      booking_rate_limit: rateLimit
        ? `${rateLimit.limit}/${rateLimit.windowMs} ms: Standard plan, minute scaled`
        : "unlimited",
      expected_events: expectedEvents,
    };

    // What the process costs before it does any work: node plus calbridge's modules (googleapis included).
    const idle = await spawnCli(configFile, ["config-schema"]).done;
    if (idle.probe) out.baseline_rss_mb = mb(idle.probe.maxRssKb);

    for (const run of ["cold", "warm"] as const) {
      const b0 = world.booking.requests.length;
      const g0 = world.google.requestLog.length;
      const w0 = world.google.writes;
      const started = performance.now();
      const result = await spawnCli(configFile, ["reconcile", "--json"], { keepStdout: true }).done;
      const wallMs = Math.round(performance.now() - started);
      let report: ReconcileJson | undefined;
      try {
        report = JSON.parse(result.stdout) as ReconcileJson;
      } catch {
        report = undefined;
      }
      const booking = bookingCounts(world.booking.requests.slice(b0));
      const google = googleCounts(world.google.requestLog.slice(g0));
      const probe: ProbeReport | undefined = result.probe;
      const counts = report
        ? Object.entries(report.counts)
            .map(([k, v]) => `${k} ${v}`)
            .join(", ") || "nothing"
        : "n/a";
      Object.assign(out, {
        [`${run}_exit_code`]: result.code ?? `signal ${result.signal}`,
        [`${run}_ok`]: report ? String(report.ok && report.failed === 0 && !report.guard.tripped) : "no report",
        [`${run}_wall_ms`]: wallMs,
        [`${run}_reconcile_ms`]: report?.durationMs ?? Number.NaN,
        [`${run}_appointments_listed`]: report?.appointments ?? Number.NaN,
        [`${run}_managed_events_before`]: report?.managedEvents ?? Number.NaN,
        [`${run}_plan`]: counts,
        [`${run}_booking_requests`]: booking.total,
        [`${run}_booking_list_requests`]: booking.list,
        [`${run}_booking_other_requests`]: booking.total - booking.list,
        [`${run}_booking_429s`]: booking.rateLimited,
        [`${run}_google_requests`]: google.total,
        [`${run}_google_token_requests`]: google.token,
        [`${run}_google_reads`]: google.reads,
        [`${run}_google_writes`]: google.writes,
        [`${run}_google_errors`]: google.errors,
        [`${run}_calendar_writes`]: world.google.writes - w0,
        [`${run}_peak_rss_mb`]: probe ? mb(probe.maxRssKb) : Number.NaN,
        [`${run}_peak_heap_used_mb`]: probe ? mb(probe.peakHeapUsedKb) : Number.NaN,
        [`${run}_cpu_ms`]: probe ? probe.userCpuMs + probe.systemCpuMs : Number.NaN,
      });
      if (result.code !== 0) out[`${run}_stderr`] = result.stderr.trim().split("\n").slice(-3).join(" | ");
      if (run === "cold") {
        const live = world.therapists.reduce(
          (s, t) => s + world.google.events(world.calendarOf(t)).filter((e) => e.status !== "cancelled").length,
          0,
        );
        out.live_events_after_cold = live;
      }
    }
    const listed = Number(out.cold_appointments_listed);
    out.listing_floor = Number.isFinite(listed) ? Math.ceil(listed / 100) : Number.NaN;
    return out;
  } finally {
    await world.close();
    rmSync(world.dir, { recursive: true, force: true });
  }
}

if (import.meta.main) {
  const n = process.argv[2] ? Number(process.argv[2]) : undefined;
  const therapists = process.argv[3] ? Number(process.argv[3]) : undefined;
  const result = await benchReconcile({
    ...(n === undefined ? {} : { n }),
    ...(therapists === undefined ? {} : { therapists }),
  });
  console.log("reconcile benchmark");
  for (const [k, v] of Object.entries(result)) console.log(`  ${k.padEnd(30)} ${v}`);
}
