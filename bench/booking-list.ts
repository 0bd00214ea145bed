// Benchmark: list 10,000 appointments from the simulator through the client's rate-limit gate at 60 requests per
// (scaled) minute, and report how well the budget was spent: requests vs the floor, 429s, budget share, wall time.
import { Registry } from "prom-client";
import { BookingClient } from "../src/booking/client.ts";
import { startBookingSimulator } from "../src/simulator/booking/index.ts";

const DAY = 86_400_000;

export interface BenchBookingListOptions {
  /** Appointments to list (default 10,000). */
  n?: number;
  /** Requests per window, on both sides (default 60). */
  limit?: number;
  /** The scaled minute (default 1,000 ms). */
  windowMs?: number;
}

export async function benchBookingList(opts: BenchBookingListOptions = {}): Promise<Record<string, number | string>> {
  const n = opts.n ?? 10_000;
  const limit = opts.limit ?? 60;
  const windowMs = opts.windowMs ?? 1_000;
  const apiKey = "sk_bench_0123456789abcdef";
  const sim = await startBookingSimulator({ apiKey, seed: 1, rateLimit: { limit, windowMs } });
  try {
    const now = Date.now();
    sim.seed({
      therapists: ["th_anna", "th_ben", "th_carla", "th_dora", "th_emil"],
      count: n,
      from: now - 30 * DAY,
      to: now + 90 * DAY,
    });
    const client = new BookingClient({
      baseUrl: sim.url,
      apiKey,
      requestsPerMinute: limit,
      rateWindowMs: windowMs,
      registry: new Registry(),
    });
    // Start on a window boundary so that every window but the last is one the work waited through entirely.
    await new Promise((r) => setTimeout(r, windowMs - (Date.now() % windowMs) + 5));
    const started = performance.now();
    let yielded = 0;
    for await (const _ of client.listAppointments({})) yielded++;
    const wallMs = performance.now() - started;

    const stats = sim.stats();
    const windows = stats.windows;
    // The last window is where the work ran out; every earlier one had work waiting the whole time.
    const waitedThrough = windows.slice(0, -1);
    const used = waitedThrough.reduce((s, w) => s + w.accepted, 0);
    const share = waitedThrough.length > 0 ? used / (limit * waitedThrough.length) : Number.NaN;
    const floor = Math.ceil(n / 100);
    const c = client.stats();
    return {
      appointments: yielded,
      requests: stats.requests,
      requestsFloor: floor,
      rateLimited429s: stats.rateLimited,
      budgetUsedShare: Number.isNaN(share) ? "n/a (fit in one window)" : Number(share.toFixed(3)),
      windows: windows.length,
      maxPerWindow: stats.maxPerWindow,
      acceptedPerWindow: windows.map((w) => w.accepted).join(", "),
      limitPerWindow: limit,
      windowMs,
      wallMs: Math.round(wallMs),
      idealWallMs: Math.max(0, Math.ceil(floor / limit) - 1) * windowMs,
      gateWaitedMs: Math.round(c.gateWaitedMs),
      // Pages are fetched one after another: time per page when not waiting for the budget.
      msPerRequestNotWaiting: Math.round(((wallMs - c.gateWaitedMs) / Math.max(1, stats.requests)) * 10) / 10,
      retries: c.retries,
    };
  } finally {
    await sim.close();
  }
}

if (import.meta.filename === process.argv[1]) {
  const n = process.argv[2] ? Number(process.argv[2]) : undefined;
  const result = await benchBookingList(n === undefined ? {} : { n });
  console.log("booking-list benchmark");
  for (const [k, v] of Object.entries(result)) console.log(`  ${k.padEnd(16)} ${v}`);
}
