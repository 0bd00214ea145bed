// Owns the onboarding benchmark: a new clinic's 10,000 appointments over 50 therapists mirrored by one
// `calbridge reconcile` (a child process, the compiled daemon) against a Calendar emulator that answers in 150 ms and
// enforces Google's quotas, and the least time those quotas allow for the requests it made.
import { rmSync } from "node:fs";
import { GOOGLE_QUOTAS } from "../src/simulator/calendar/index.ts";
import { startWorld } from "../src/simulator/world.ts";
import { bookingCounts, builtCli, DAY, mb, round, spawnCli, writeConfigYaml } from "./support.ts";

export interface BenchOnboardingOptions {
  appointments?: number;
  therapists?: number;
  googleLatencyMs?: number;
  /** Booking rate limit (default the Standard plan's 60 a minute, the minute scaled to 1 s as in the other benches). */
  rateLimit?: { limit: number; windowMs: number } | false;
}

/**
 * The least time Google's two per-minute quotas allow for `units` in all and `perUser` units per user: each quota
 * lets its budget through per minute, on average (the sliding window's own guide: a burst over it "will result in
 * rate limiting during the next window to ensure that, on average, your usage remains within the quotas").
 */
export function quotaFloorSeconds(units: number, perUser: readonly number[]): number {
  const project = units / GOOGLE_QUOTAS.perProjectPerMinute;
  const user = Math.max(0, ...perUser) / GOOGLE_QUOTAS.perUserPerMinute;
  return Math.max(project, user) * 60;
}

export async function benchOnboarding(opts: BenchOnboardingOptions = {}): Promise<Record<string, number | string>> {
  const appointments = opts.appointments ?? 10_000;
  const therapists = opts.therapists ?? 50;
  const latencyMs = opts.googleLatencyMs ?? 150;
  const rateLimit = opts.rateLimit ?? { limit: 60, windowMs: 1_000 };
  const world = await startWorld({ therapists, rateLimit, seed: 41, google: { latencyMs } });
  try {
    const now = Date.now();
    world.booking.seed({ therapists: world.therapists, count: appointments, from: now + DAY, to: now + 85 * DAY });
    const configFile = writeConfigYaml(world.config, world.dir);
    const b0 = world.booking.requests.length;
    world.google.resetUsage();
    builtCli(); // compiled before the clock starts
    const started = performance.now();
    const result = await spawnCli(configFile, ["reconcile", "--json"], { keepStdout: true }).done;
    const wallS = (performance.now() - started) / 1000;
    let report: { ok?: boolean; counts?: Record<string, number>; failed?: number } = {};
    try {
      report = JSON.parse(result.stdout) as typeof report;
    } catch {
      report = {};
    }
    const usage = world.google.usage;
    const floor = quotaFloorSeconds(usage.units, Object.values(usage.byUser));
    const live = world.therapists.reduce(
      (n, t) => n + world.google.events(world.calendarOf(t)).filter((e) => e.status !== "cancelled").length,
      0,
    );
    const expected = world.booking.all().filter((a) => a.status !== "cancelled").length;
    const booking = bookingCounts(world.booking.requests.slice(b0));
    return {
      appointments,
      therapists,
      google_latency_ms: latencyMs,
      wall_s: round(wallS, 1),
      quota_floor_s: round(floor, 1),
      wall_to_floor: round(wallS / floor, 2),
      usage_limit_answers: usage.usageLimitAnswers,
      google_requests: usage.requests,
      google_units: usage.units,
      google_max_user_requests: Math.max(0, ...Object.values(usage.byUser)),
      google_by_method: Object.entries(usage.byMethod)
        .map(([k, v]) => `${k} ${v}`)
        .join(", "),
      live_events: live,
      expected_events: expected,
      booking_requests: booking.total,
      booking_429s: booking.rateLimited,
      exit_code: result.code ?? `signal ${result.signal}`,
      ok: String(report.ok === true && (report.failed ?? 0) === 0),
      plan: Object.entries(report.counts ?? {})
        .map(([k, v]) => `${k} ${v}`)
        .join(", "),
      peak_rss_mb: result.probe ? mb(result.probe.maxRssKb) : Number.NaN,
      cpu_s: result.probe ? round((result.probe.userCpuMs + result.probe.systemCpuMs) / 1000, 1) : Number.NaN,
      ...(result.code !== 0 ? { stderr: result.stderr.trim().split("\n").slice(-3).join(" | ") } : {}),
    };
  } finally {
    await world.close();
    rmSync(world.dir, { recursive: true, force: true });
  }
}

if (import.meta.main) {
  console.log(JSON.stringify(await benchOnboarding(), null, 2));
}
