// The rate gate against a server whose clock is behind calbridge's (review17): X-RateLimit-Reset is whole Unix seconds
// of the server's clock. With a margin of 250 ms a server 600 ms behind (or one whose window ends mid-second and which
// states the second before) got requests the moment the gate thought its window had rolled: 20 of 30 answered 429.
import { Registry } from "prom-client";
import { afterEach, describe, expect, it } from "vitest";
import { BookingClient } from "../../src/booking/client.ts";
import { type GatePermit, RateLimitGate } from "../../src/booking/gate.ts";
import type { Clock } from "../../src/clock.ts";
import { type BookingSimulator, startBookingSimulator } from "../../src/simulator/booking/index.ts";
import { captureLog } from "../support/log-capture.ts";
import { API_KEY, drive, SteppingClock, T0 } from "./support.ts";

const HOUR = 3_600_000;
const flush = () => new Promise((r) => setImmediate(r));

let sim: BookingSimulator | undefined;
afterEach(async () => {
  await sim?.close();
  sim = undefined;
});

/** 30 reads through the client against a simulator limited to 10 a minute whose clock is `behindMs` behind ours. */
async function run(behindMs: number, opts: { ceiling?: number; spentByOthers?: number; dateHeader?: boolean } = {}) {
  const clock = new SteppingClock(T0 + 30_000);
  const serverClock: Clock = { now: () => clock.now() - behindMs, sleep: (ms, s) => clock.sleep(ms, s) };
  sim = await startBookingSimulator({
    apiKey: API_KEY,
    clock: serverClock,
    seed: 7,
    therapists: ["th_anna"],
    rateLimit: { limit: 10, windowMs: 60_000 },
    dateHeader: opts.dateHeader ?? true,
  });
  let seed = 1;
  const client = new BookingClient({
    baseUrl: sim.url,
    apiKey: API_KEY,
    // The client believes in 600/min unless told the plan's limit; the server's headers must win.
    requestsPerMinute: opts.ceiling ?? 600,
    clock,
    registry: new Registry(),
    timeoutMs: 2_000,
    random: () => {
      seed = (seed * 16807) % 2147483647;
      return seed / 2147483647;
    },
  });
  // Another user of the same API key (the clinic's booking widget) spent part of this window.
  for (let i = 0; i < (opts.spentByOthers ?? 0); i++) sim.rateLimit.admit();
  const a = sim.create({ therapist_id: "th_anna", start_time: new Date(T0 + 30 * HOUR).toISOString() });
  const started = clock.now();
  const got = await drive(clock, Promise.all(Array.from({ length: 30 }, () => client.getAppointment(a.id as string))));
  return { got, server: sim.stats(), client: client.stats(), elapsedMs: clock.now() - started };
}

describe("rate gate vs a server clock behind ours", () => {
  it("600 ms behind, Date sent: no 429, and the windows are used as they come", async () => {
    const r = await run(600);
    expect(r.got).toHaveLength(30);
    expect(r.server.rateLimited).toBe(0);
    expect(r.server.maxPerWindow).toBe(10);
    // 10 in the first window (30 s of it left), 10 in each of the next two: the third begins 90.6 s after the start.
    expect(r.elapsedMs).toBeLessThan(93_000);
  });

  it("600 ms behind and no Date header (the spec shows none): the margin alone holds", async () => {
    const r = await run(600, { dateHeader: false });
    expect(r.server.rateLimited).toBe(0);
    expect(r.client.rateLimited).toBe(0);
  });

  it("2.5 s behind, more than the margin: one 429 shows it, and then the Date tells how much later each window ends", async () => {
    const r = await run(2_500);
    // A Date alone may be a proxy's: the lag it shows is waited for once the server refused a request sent after its
    // window's Reset by our clock (review21). One 429, at the first window's end; none after.
    expect(r.server.rateLimited).toBe(1);
    expect(r.got).toHaveLength(30);
    expect(r.elapsedMs).toBeLessThan(95_000);
  });

  it("configured ceiling = plan limit, 8 of the window spent by another user of the key, 600 ms behind: no 429", async () => {
    const r = await run(600, { ceiling: 10, spentByOthers: 8 });
    expect(r.server.rateLimited).toBe(0);
    expect(r.got).toHaveLength(30);
  });
});

function headers(remaining: number, resetMs: number, date?: number) {
  return {
    "x-ratelimit-limit": "10",
    "x-ratelimit-remaining": String(remaining),
    "x-ratelimit-reset": String(Math.floor(resetMs / 1000)),
    ...(date === undefined ? {} : { date: new Date(date).toUTCString() }),
  };
}

function gate() {
  const clock = new SteppingClock(T0);
  const log = captureLog("debug");
  const g = new RateLimitGate({ requestsPerMinute: 600, clock, logger: log.logger, registry: new Registry() });
  return { g, clock, log };
}

async function waitFor(g: RateLimitGate, clock: SteppingClock): Promise<GatePermit> {
  let permit: GatePermit | undefined;
  const p = g.acquire("reconcile").then((x) => {
    permit = x;
    return x;
  });
  for (let i = 0; i < 100 && !permit; i++) {
    await flush();
    const next = clock.nextDeadline();
    if (!permit && next !== undefined) await clock.advance(next - clock.now());
  }
  return p;
}

describe("RateLimitGate: margin and the server's clock", () => {
  it("waits a whole second past Reset by default (its precision): a window ending mid-second is stated a second early", async () => {
    const { g, clock } = gate();
    const p = await g.acquire("reconcile");
    await clock.advance(100);
    p.done({ status: 200, headers: headers(0, T0 + 60_000) });
    const next = await waitFor(g, clock);
    expect(clock.now()).toBe(T0 + 61_000);
    next.done({ status: 200, headers: headers(9, T0 + 120_000) });
  });

  it("learns from Date how far behind the server's clock is, and waits that much longer once a 429 showed it", async () => {
    const { g, clock } = gate();
    // The server's clock is 3.4 s behind: its answers say Date T0 - 4 s (whole seconds) then T0 - 3 s.
    for (let i = 0; i < 4; i++) {
      const p = await g.acquire("reconcile");
      await clock.advance(300);
      p.done({ status: 200, headers: headers(9 - i, T0 + 60_000, Math.floor((clock.now() - 3_400) / 1000) * 1000) });
    }
    // Spent: the window ends at T0 + 60 s of the server's clock, T0 + 63.4 s of ours.
    const last = await g.acquire("reconcile");
    await clock.advance(300);
    last.done({ status: 200, headers: headers(0, T0 + 60_000, Math.floor((clock.now() - 3_400) / 1000) * 1000) });
    // The Date alone is not taken on its word (a proxy's clock, review21): sent at Reset and the margin, refused.
    const early = await waitFor(g, clock);
    expect(clock.now()).toBe(T0 + 61_000);
    await clock.advance(100);
    early.done({ status: 429, headers: headers(0, T0 + 60_000, Math.floor((clock.now() - 3_400) / 1000) * 1000) });
    await waitFor(g, clock);
    expect(clock.now()).toBeGreaterThanOrEqual(T0 + 63_400 + 1_000);
    // The bound it can prove (answers at T0+0.3..1.5 s dated T0-4 s and T0-3 s) is at most a second above.
    expect(clock.now()).toBeLessThanOrEqual(T0 + 63_400 + 2_000);
  });

  it("a 429 whose Reset looks just past waits for Reset plus the margin, not a short backoff", async () => {
    const { g, clock, log } = gate();
    const p = await g.acquire("reconcile");
    await clock.advance(60_300);
    // The server (behind us, or rounding Reset down) still counts the window we think ended 300 ms ago.
    p.done({ status: 429, headers: headers(0, T0 + 60_000) });
    expect(g.snapshot().pausedUntil).toBe(T0 + 61_000);
    expect(log.find((l) => l.msg === "booking API answered 429: pausing every request")).toMatchObject({
      basis: "reset",
    });
  });

  it("a 429 dated by a server clock 2.5 s behind waits for its Reset by the server's clock", async () => {
    const { g, clock } = gate();
    const first = await g.acquire("reconcile");
    await clock.advance(100);
    first.done({ status: 200, headers: headers(5, T0 + 60_000) });
    // Sent at T0 + 61.5 s, after the window's Reset and the margin by ours, and refused: the server's clock is behind.
    await clock.advance(61_400);
    const p = await g.acquire("reconcile");
    await clock.advance(200);
    p.done({ status: 429, headers: headers(0, T0 + 60_000, T0 + 59_000) });
    // Dated T0 + 59 s when ours said T0 + 61.7 s: at least 2.7 s behind.
    expect(g.snapshot().pausedUntil).toBe(T0 + 60_000 + 2_700 + 1_000);
  });

  it("reads a Retry-After date by the server's clock", async () => {
    const { g, clock } = gate();
    const p = await g.acquire("reconcile");
    await clock.advance(200);
    p.done({
      status: 429,
      headers: { date: new Date(T0 - 5_000).toUTCString(), "retry-after": new Date(T0 + 5_000).toUTCString() },
    });
    // The server's clock is at least 5.2 s behind: its T0 + 5 s is our T0 + 10.2 s, plus the margin.
    expect(g.snapshot().pausedUntil).toBe(T0 + 10_200 + 1_000);
  });

  it("ignores a Date hours off (not the clock that counts the window) and a garbled one", async () => {
    for (const date of [new Date(T0 - 3 * HOUR).toUTCString(), "yesterday"]) {
      const { g, clock } = gate();
      const p = await g.acquire("reconcile");
      await clock.advance(100);
      p.done({ status: 200, headers: { ...headers(0, T0 + 60_000), date } });
      await waitFor(g, clock);
      expect(clock.now()).toBe(T0 + 61_000);
    }
  });

  it("starts afresh when the server's clock is set back: a Date the bounds cannot hold is not averaged in", async () => {
    const { g, clock } = gate();
    // In step with ours for a while ...
    for (let i = 0; i < 3; i++) {
      const p = await g.acquire("reconcile");
      await clock.advance(100);
      p.done({ status: 200, headers: headers(5, T0 + 60_000, Math.floor(clock.now() / 1000) * 1000) });
    }
    // ... then set 3.2 s back: a request sent at T0 + 61.1 s (after Reset and the margin by ours) is refused, dated
    // T0 + 58 s. Kept as a bound, the earlier answers would have it at most 160 ms behind: a short backoff, and more.
    await clock.advance(60_800);
    const p = await g.acquire("reconcile");
    await clock.advance(100);
    p.done({ status: 429, headers: headers(0, T0 + 60_000, T0 + 58_000) });
    expect(g.snapshot().pausedUntil).toBe(T0 + 60_000 + 3_200 + 1_000);
  });

  it("a Date from another machine (a gateway's clock 4 minutes behind) holds no window longer while no 429 shows it", async () => {
    const { g, clock } = gate();
    for (let i = 0; i < 10; i++) {
      const p = await g.acquire("reconcile");
      await clock.advance(100);
      p.done({ status: 200, headers: headers(9 - i, T0 + 60_000, Math.floor((clock.now() - 240_000) / 1000) * 1000) });
    }
    await waitFor(g, clock);
    expect(clock.now()).toBe(T0 + 61_000);
  });

  it("a 429 sent inside its window but answered 1.7 s later does not make a gateway's Date hold the gate 4 minutes", async () => {
    const { g, clock } = gate();
    const gatewayDate = () => Math.floor((clock.now() - 240_000) / 1000) * 1000;
    const p1 = await g.acquire("reconcile");
    await clock.advance(100);
    p1.done({ status: 200, headers: headers(5, T0 + 60_000, gatewayDate()) });
    // Sent at T0 + 59.5 s, inside the window; another user of the key spent it: refused, the answer slow (1.7 s).
    await clock.advance(59_400);
    const p2 = await g.acquire("reconcile");
    await clock.advance(1_700);
    p2.done({ status: 429, headers: headers(0, T0 + 60_000, gatewayDate()) });
    const paused = g.snapshot().pausedUntil ?? clock.now();
    // The server's window ended at T0 + 60 s by its clock and ours: at most a short wait is due.
    expect(paused).toBeLessThanOrEqual(T0 + 65_000);
    const next = await waitFor(g, clock);
    expect(clock.now()).toBeLessThanOrEqual(T0 + 65_000);
    next.done({ status: 200, headers: headers(9, T0 + 120_000, gatewayDate()) });
  });

  it("our clock stepped back after a 429 showed the lag: the wait follows the step, not the old lag", async () => {
    // A wall clock 3 minutes fast, put right by NTP; the monotonic clock does not move with the step.
    class Stepped extends SteppingClock {
      #mono = 0;
      override async advance(ms: number): Promise<void> {
        this.#mono += ms;
        await super.advance(ms);
      }
      elapsed(): number {
        return this.#mono;
      }
    }
    const SKEW = 180_000;
    const clock = new Stepped(T0 + SKEW);
    const g = new RateLimitGate({ requestsPerMinute: 600, clock, registry: new Registry() });
    const server = () => Math.floor((clock.now() - SKEW) / 1000) * 1000;
    // Our T0 + 180.1 s is the server's T0 + 0.1 s: its window (ending at T0 + 60 s) looks long past; refused.
    const first = await g.acquire("reconcile");
    await clock.advance(100);
    first.done({ status: 429, headers: headers(0, T0 + 60_000, server()) });
    expect(g.snapshot().pausedUntil).toBeGreaterThanOrEqual(T0 + 60_000 + SKEW);
    // NTP puts our clock right: the server's window still ends at T0 + 60 s, now T0 + 60 s by ours too.
    clock.set(clock.now() - SKEW);
    const next = await waitFor(g, clock);
    expect(clock.now()).toBeLessThanOrEqual(T0 + 62_000);
    next.done({ status: 200, headers: headers(9, T0 + 120_000, server()) });
  });
});
