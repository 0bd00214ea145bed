// A small X-RateLimit-Reset is read as seconds from now (a variant some servers send). Each answer's window end,
// computed as now + whole seconds, differs from the last by up to a second; the gate told "same window" from "older
// window" by exact equality, so an answer computing a few hundred ms earlier was taken for an older window and its
// lower Remaining dropped: the gate spent a stale 9 while the server went 8..0, and met 4 x 429 (review17).
import { Registry } from "prom-client";
import { describe, expect, it } from "vitest";
import { type GatePermit, RateLimitGate } from "../../src/booking/gate.ts";
import { SteppingClock, T0 } from "./support.ts";

const flush = () => new Promise((r) => setImmediate(r));

/** A fixed-window server (limit per 60 s window, aligned), sending Reset as seconds until the window ends. */
function server(limit: number, round: (x: number) => number) {
  const used = new Map<number, number>();
  return {
    admit(now: number) {
      const w = Math.floor(now / 60_000) * 60_000;
      const n = used.get(w) ?? 0;
      const ok = n < limit;
      if (ok) used.set(w, n + 1);
      return {
        ok,
        headers: {
          "x-ratelimit-limit": String(limit),
          "x-ratelimit-remaining": String(Math.max(0, limit - (ok ? n + 1 : n))),
          "x-ratelimit-reset": String(round((w + 60_000 - now) / 1000)),
        },
      };
    },
  };
}

async function acquire(g: RateLimitGate, clock: SteppingClock): Promise<GatePermit> {
  let permit: GatePermit | undefined;
  const p = g.acquire("reconcile").then((x) => {
    permit = x;
    return x;
  });
  await flush();
  for (let k = 0; !permit && k < 10_000; k++) {
    await clock.advance(50);
    await flush();
  }
  return p;
}

/** 25 requests one after another, each answered 137 ms after its send; returns the server's 429s and send times. */
async function oneAfterAnother(round: (x: number) => number) {
  const clock = new SteppingClock(T0 + 5_000);
  const g = new RateLimitGate({ requestsPerMinute: 600, clock, registry: new Registry() });
  const srv = server(10, round);
  let refused = 0;
  const sent: number[] = [];
  for (let i = 0; i < 25; i++) {
    const permit = await acquire(g, clock);
    sent.push(clock.now() - T0);
    const a = srv.admit(clock.now());
    if (!a.ok) refused++;
    await clock.advance(137);
    permit.done({ status: a.ok ? 200 : 429, headers: a.headers });
  }
  return { refused, sent };
}

describe("X-RateLimit-Reset as seconds until the window ends", () => {
  for (const [name, round] of [
    ["rounded up", Math.ceil],
    ["rounded down", Math.floor],
  ] as const) {
    it(`${name}: the gate spends no more than Remaining says, and the next window when it comes`, async () => {
      const { refused, sent } = await oneAfterAnother(round);
      expect(refused).toBe(0);
      // 10 in the first window, 10 in the second, 5 in the third: each window's first request within ~2 s of it.
      expect(sent[10]).toBeGreaterThanOrEqual(60_000);
      expect(sent[10]).toBeLessThan(62_500);
      expect(sent[20]).toBeGreaterThanOrEqual(120_000);
      expect(sent[20]).toBeLessThan(122_500);
    });
  }

  it("takes an answer whose window end is clearly later for a new window, its Remaining as it is", async () => {
    const clock = new SteppingClock(T0);
    const g = new RateLimitGate({ requestsPerMinute: 600, clock, registry: new Registry() });
    const h = (remaining: number, reset: number) => ({
      "x-ratelimit-limit": "10",
      "x-ratelimit-remaining": String(remaining),
      "x-ratelimit-reset": String(reset),
    });
    const a = await acquire(g, clock);
    a.done({ status: 200, headers: h(3, 2) });
    expect(g.snapshot().remaining).toBe(3);
    // 400 ms later the same window says 1 s: computed 600 ms earlier, still the same window; its lower count holds.
    await clock.advance(400);
    const b = await acquire(g, clock);
    b.done({ status: 200, headers: h(2, 1) });
    expect(g.snapshot().remaining).toBe(2);
    // An answer arriving late with a higher count in that window changes nothing.
    const c = await acquire(g, clock);
    c.done({ status: 200, headers: h(3, 2) });
    expect(g.snapshot().remaining).toBe(2);
    // A window end 60 s later is a new window.
    const d = await acquire(g, clock);
    d.done({ status: 200, headers: h(9, 61) });
    expect(g.snapshot().remaining).toBe(9);
  });
});
