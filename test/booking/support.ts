// Test helpers for the booking client and simulator: a manual clock that knows its next deadline, driving it while
// real HTTP runs, and a simulator + client pair on 127.0.0.1.
import { Registry } from "prom-client";
import { BookingClient, type BookingClientOptions } from "../../src/booking/client.ts";
import { ManualClock } from "../../src/clock.ts";
import {
  type BookingSimulator,
  type BookingSimulatorOptions,
  startBookingSimulator,
} from "../../src/simulator/booking/index.ts";

/** A ManualClock that can tell when its earliest sleeper is due, so tests jump straight to it. */
export class SteppingClock extends ManualClock {
  readonly #deadlines = new Set<{ until: number }>();

  override sleep(ms: number, signal?: AbortSignal): Promise<void> {
    const entry = { until: this.now() + ms };
    if (ms > 0) this.#deadlines.add(entry);
    const p = super.sleep(ms, signal);
    p.then(
      () => this.#deadlines.delete(entry),
      () => this.#deadlines.delete(entry),
    );
    return p;
  }

  nextDeadline(): number | undefined {
    let min: number | undefined;
    for (const d of this.#deadlines) if (min === undefined || d.until < min) min = d.until;
    return min;
  }
}

const tick = (ms = 2) => new Promise((r) => setTimeout(r, ms));

/**
 * Awaits `work` while moving the clock: whenever someone sleeps on it, time jumps to the earliest deadline.
 * Real I/O gets a couple of real milliseconds between jumps. Never sleeps for the waits themselves.
 */
export async function drive<T>(
  clock: SteppingClock,
  work: Promise<T>,
  options: { maxJumps?: number } = {},
): Promise<T> {
  let settled = false;
  const done = work.then(
    (v) => {
      settled = true;
      return v;
    },
    (e: unknown) => {
      settled = true;
      throw e;
    },
  );
  done.catch(() => {});
  let jumps = 0;
  while (!settled) {
    await tick();
    if (settled) break;
    const next = clock.nextDeadline();
    if (next !== undefined) {
      if (++jumps > (options.maxJumps ?? 10_000)) throw new Error("drive: too many clock jumps");
      await clock.advance(Math.max(0, next - clock.now()));
    }
  }
  return done;
}

export async function collect<T>(it: AsyncIterable<T>): Promise<T[]> {
  const out: T[] = [];
  for await (const x of it) out.push(x);
  return out;
}

export const API_KEY = "sk_test_calbridge_0123456789abcdef";
/** A time the tests start at: 2026-11-22 09:00 UTC, on a whole minute. */
export const T0 = Date.UTC(2026, 10, 22, 9, 0, 0);

export interface Pair {
  sim: BookingSimulator;
  client: BookingClient;
  clock: SteppingClock;
  registry: Registry;
  close(): Promise<void>;
}

export async function startPair(
  options: { sim?: BookingSimulatorOptions; client?: Partial<BookingClientOptions> } = {},
): Promise<Pair> {
  const clock = new SteppingClock(T0);
  const sim = await startBookingSimulator({ apiKey: API_KEY, clock, seed: 7, ...options.sim });
  const registry = new Registry();
  let seed = 1;
  const client = new BookingClient({
    baseUrl: sim.url,
    apiKey: API_KEY,
    requestsPerMinute: 600,
    clock,
    registry,
    timeoutMs: 2_000,
    // Deterministic jitter.
    random: () => {
      seed = (seed * 16807) % 2147483647;
      return seed / 2147483647;
    },
    ...options.client,
  });
  return { sim, client, clock, registry, close: () => sim.close() };
}
