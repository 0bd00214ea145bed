// Unit tests of the rate-limit gate on a manual clock: no HTTP, no sleeping.
import { Registry } from "prom-client";
import { describe, expect, it } from "vitest";
import { type GatePermit, type Priority, RateLimitGate } from "../../src/booking/gate.ts";
import { captureLog } from "../support/log-capture.ts";
import { SteppingClock, T0 } from "./support.ts";

const flush = () => new Promise((r) => setImmediate(r));

function headers(limit: number, remaining: number, resetMs: number) {
  return {
    "x-ratelimit-limit": String(limit),
    "x-ratelimit-remaining": String(remaining),
    "x-ratelimit-reset": String(Math.ceil(resetMs / 1000)),
  };
}

function gate(options: Partial<ConstructorParameters<typeof RateLimitGate>[0]> = {}) {
  const clock = new SteppingClock(T0);
  const log = captureLog("debug");
  const registry = new Registry();
  const g = new RateLimitGate({ requestsPerMinute: 1000, clock, logger: log.logger, registry, ...options });
  return { g, clock, log, registry };
}

/** Tracks which acquisitions have been granted. */
function track(p: Promise<GatePermit>) {
  const t: { permit?: GatePermit; error?: unknown } = {};
  p.then(
    (x) => {
      t.permit = x;
    },
    (e: unknown) => {
      t.error = e;
    },
  );
  return t;
}

describe("RateLimitGate", () => {
  it("lets one probe through before the budget is known, then spends exactly the reported budget", async () => {
    const { g } = gate();
    const a = track(g.acquire("reconcile"));
    const b = track(g.acquire("reconcile"));
    await flush();
    expect(a.permit).toBeDefined();
    expect(b.permit).toBeUndefined();
    expect(g.snapshot().mode).toBe("unknown");
    a.permit!.done({ status: 200, headers: headers(3, 2, T0 + 60_000) });
    await flush();
    expect(b.permit).toBeDefined();
    // remaining 2, one in flight (b): one more may go, not two.
    const c = track(g.acquire("reconcile"));
    const d = track(g.acquire("reconcile"));
    await flush();
    expect(c.permit).toBeDefined();
    expect(d.permit).toBeUndefined();
    expect(g.snapshot().inFlight).toBe(2);
  });

  it("waits while the budget is spent until Reset plus the skew margin, not a moment earlier", async () => {
    const { g, clock, log } = gate({ skewMs: 250 });
    const first = await g.acquire("reconcile");
    first.done({ status: 200, headers: headers(1, 0, T0 + 60_000) });
    const next = track(g.acquire("reconcile"));
    await flush();
    expect(next.permit).toBeUndefined();
    expect(g.snapshot()).toMatchObject({ remaining: 0, resetAt: T0 + 60_000, waiting: { reconcile: 1 } });
    await clock.advance(60_249);
    expect(next.permit).toBeUndefined();
    await clock.advance(1);
    await flush();
    expect(next.permit?.waitedMs).toBe(60_250);
    const line = log.find((l) => l.msg === "booking API rate-limit gate: waited before sending");
    expect(line).toMatchObject({ level: 30, waitedMs: 60_250, reason: "budget_spent", priority: "reconcile" });
  });

  it("counts in-flight requests against the remaining budget so concurrent senders cannot overspend", async () => {
    const { g } = gate();
    const probe = await g.acquire("reconcile");
    probe.done({ status: 200, headers: headers(10, 5, T0 + 60_000) });
    const waits = Array.from({ length: 20 }, () => track(g.acquire("reconcile")));
    await flush();
    expect(waits.filter((w) => w.permit).length).toBe(5);
    // Answers arrive out of order: a stale higher "remaining" must not give budget back.
    waits[1]!.permit!.done({ status: 200, headers: headers(10, 1, T0 + 60_000) });
    waits[0]!.permit!.done({ status: 200, headers: headers(10, 3, T0 + 60_000) });
    await flush();
    // remaining 1, 3 still in flight: nothing more.
    expect(waits.filter((w) => w.permit).length).toBe(5);
    for (const w of waits.slice(2, 5)) w.permit!.done({ status: 200, headers: headers(10, 0, T0 + 60_000) });
    await flush();
    expect(waits.filter((w) => w.permit).length).toBe(5);
    expect(g.snapshot().remaining).toBe(0);
  });

  it("serves waiters by priority: webhook, then writeback, then reconcile", async () => {
    const { g, clock } = gate();
    const probe = await g.acquire("reconcile");
    probe.done({ status: 200, headers: headers(1, 0, T0 + 1_000) });
    const granted: { priority: Priority; permit: GatePermit }[] = [];
    for (const p of ["reconcile", "writeback", "reconcile", "webhook", "writeback", "webhook"] as const) {
      void g.acquire(p).then((permit) => granted.push({ priority: p, permit }));
    }
    await flush();
    expect(g.snapshot().waiting).toEqual({ webhook: 2, writeback: 2, reconcile: 2, enrich: 0 });
    // One request per window: each new window goes to the most urgent waiter.
    for (let i = 0; i < 6; i++) {
      await clock.advance(clock.nextDeadline()! - clock.now());
      await flush();
      expect(granted.length).toBe(i + 1);
      granted[i]!.permit.done({ status: 200, headers: headers(1, 0, clock.now() + 1_000) });
    }
    expect(granted.map((x) => x.priority)).toEqual([
      "webhook",
      "webhook",
      "writeback",
      "writeback",
      "reconcile",
      "reconcile",
    ]);
  });

  it("serves enrichments last, and only from the budget above a reserve left to the others", async () => {
    const { g, clock } = gate();
    const probe = await g.acquire("reconcile");
    // 20 a window, 10 left: enrichments may take all but the reserve (10% of the limit: 2).
    probe.done({ status: 200, headers: headers(20, 10, T0 + 1_000) });
    expect(g.reserve()).toBe(2);
    expect(g.enrichPerMinute()).toBe(18);
    const enrich = Array.from({ length: 12 }, () => track(g.acquire("enrich")));
    await flush();
    expect(enrich.filter((t) => t.permit).length).toBe(8);
    // The reserve is there for a webhook's follow-up, at once.
    const webhook = track(g.acquire("webhook"));
    await flush();
    expect(webhook.permit).toBeDefined();
    for (const t of enrich.filter((x) => x.permit))
      t.permit!.done({ status: 200, headers: headers(20, 1, T0 + 1_000) });
    webhook.permit!.done({ status: 200, headers: headers(20, 1, T0 + 1_000) });
    await flush();
    // One request left in this window: a reconciliation page may have it, an enrichment may not.
    const page = track(g.acquire("reconcile"));
    await flush();
    expect(page.permit).toBeDefined();
    expect(enrich.filter((t) => t.permit).length).toBe(8);
    page.permit!.done({ status: 200, headers: headers(20, 0, T0 + 1_000) });
    // The next window: the waiting enrichments go, after anything more urgent that waits. Its first request goes
    // alone until its answer shows the server's window rolled too (a clock behind ours would refuse a burst).
    const later = track(g.acquire("writeback"));
    await clock.advance(clock.nextDeadline()! - clock.now());
    await flush();
    expect(later.permit).toBeDefined();
    expect(enrich.filter((t) => t.permit).length).toBe(8);
    later.permit!.done({ status: 200, headers: headers(20, 19, T0 + 61_000) });
    await flush();
    expect(enrich.every((t) => t.permit)).toBe(true);
  });

  it("pauses everyone until Reset after a 429 with headers", async () => {
    const { g, clock, log } = gate();
    const probe = await g.acquire("webhook");
    probe.done({ status: 200, headers: headers(100, 50, T0 + 30_000) });
    const a = await g.acquire("webhook");
    a.done({ status: 429, headers: headers(100, 0, T0 + 30_000) });
    const b = track(g.acquire("webhook"));
    await flush();
    expect(b.permit).toBeUndefined();
    // Plus the default margin: a second, Reset's precision.
    expect(g.snapshot().pausedUntil).toBe(T0 + 31_000);
    expect(log.find((l) => l.msg === "booking API answered 429: pausing every request")).toMatchObject({
      basis: "reset",
    });
    await clock.advance(30_999);
    await flush();
    expect(b.permit).toBeUndefined();
    await clock.advance(1);
    await flush();
    expect(b.permit).toBeDefined();
  });

  it("clamps a wait derived from a Reset too far ahead (after a 429, or with the budget spent), warning once", async () => {
    const { g, clock, log } = gate({ windowMs: 60_000, skewMs: 250 });
    const yearAhead = String(Math.ceil((T0 + 365 * 24 * 3_600_000) / 1000));
    const far = { "x-ratelimit-limit": "100", "x-ratelimit-remaining": "0", "x-ratelimit-reset": yearAhead };
    const probe = await g.acquire("webhook");
    probe.done({ status: 429, headers: far });
    // Five windows (5 minutes) at most, plus the skew margin.
    expect(g.snapshot().pausedUntil).toBe(T0 + 300_250);
    const b = track(g.acquire("webhook"));
    await flush();
    expect(b.permit).toBeUndefined();
    await clock.advance(300_250);
    await flush();
    expect(b.permit).toBeDefined();
    // A spent budget whose Reset is as far: held five windows at most too.
    b.permit!.done({ status: 200, headers: far });
    const c = track(g.acquire("reconcile"));
    await flush();
    expect(c.permit).toBeUndefined();
    await clock.advance(clock.nextDeadline()! - clock.now());
    await flush();
    expect(c.permit?.waitedMs).toBe(300_250);
    c.permit!.done({ status: 200, headers: far });
    const warned = log.lines.filter((l) => l.header === "X-RateLimit-Reset");
    expect(warned).toHaveLength(1);
    expect(warned[0]).toMatchObject({ level: 40, value: Number(yearAhead), maxWaitMs: 300_000 });
  });

  it("reads a Reset above 1e11 as epoch milliseconds", async () => {
    const { g } = gate({ skewMs: 250 });
    const p = await g.acquire("webhook");
    p.done({ status: 429, headers: { "x-ratelimit-remaining": "0", "x-ratelimit-reset": String(T0 + 60_000) } });
    expect(g.snapshot()).toMatchObject({ resetAt: T0 + 60_000, pausedUntil: T0 + 60_250 });
  });

  it("backs off exponentially with jitter after 429s without headers", async () => {
    const { g, clock } = gate({ random: () => 1, backoffBaseMs: 1_000 });
    const pauses: number[] = [];
    for (let i = 0; i < 4; i++) {
      const p = await drivenAcquire(g, clock);
      const start = clock.now();
      p.done({ status: 429 });
      pauses.push((g.snapshot().pausedUntil ?? start) - start);
    }
    expect(pauses).toEqual([1_000, 2_000, 4_000, 8_000]);
    const ok = await drivenAcquire(g, clock);
    ok.done({ status: 200 });
    const after = await drivenAcquire(g, clock);
    after.done({ status: 429 });
    expect(g.snapshot().pausedUntil! - clock.now()).toBe(1_000);
  });

  it("enforces the client-side ceiling as a sliding window when the server sends no headers", async () => {
    const { g, clock } = gate({ requestsPerMinute: 3, windowMs: 60_000 });
    const times: number[] = [];
    for (let i = 0; i < 7; i++) {
      const p = await drivenAcquire(g, clock);
      times.push(clock.now() - T0);
      p.done({ status: 200 });
      await clock.advance(10_000);
    }
    // 3 at 0/10/20 s; the 4th when the first leaves the window (60 s), and so on.
    expect(times).toEqual([0, 10_000, 20_000, 60_000, 70_000, 80_000, 120_000]);
    expect(g.snapshot().mode).toBe("no_headers");
  });

  it("does not stall when Remaining comes without Reset: it assumes one window", async () => {
    const { g, clock } = gate({ windowMs: 60_000, skewMs: 250 });
    const p = await g.acquire("reconcile");
    p.done({ status: 200, headers: { "x-ratelimit-limit": "5", "x-ratelimit-remaining": "0" } });
    const next = track(g.acquire("reconcile"));
    await flush();
    expect(next.permit).toBeUndefined();
    await clock.advance(clock.nextDeadline()! - clock.now());
    await flush();
    expect(next.permit?.waitedMs).toBe(60_250);
  });

  it("holds to the server's X-RateLimit-Limit as a sliding window while Remaining is missing or garbled", async () => {
    // Configured for 1,000 a minute; the server states 3 per window and no usable Remaining. It used to get 1,000.
    for (const remaining of [undefined, "n/a"]) {
      const { g, clock } = gate({ windowMs: 60_000, skewMs: 250 });
      const times: number[] = [];
      for (let i = 0; i < 5; i++) {
        const p = await drivenAcquire(g, clock);
        times.push(clock.now() - T0);
        p.done({
          status: 200,
          headers: {
            "x-ratelimit-limit": "3",
            ...(remaining ? { "x-ratelimit-remaining": remaining } : {}),
            "x-ratelimit-reset": String(Math.ceil((clock.now() + 60_000) / 1000)),
          },
        });
        await clock.advance(1_000);
      }
      expect(times).toEqual([0, 1_000, 2_000, 60_000, 61_000]);
    }
  });

  it("forgets an older window's Remaining when a newer Reset comes without one", async () => {
    const { g, clock } = gate({ windowMs: 60_000, skewMs: 250 });
    const first = await g.acquire("reconcile");
    first.done({ status: 200, headers: headers(2, 0, T0 + 1_000) });
    await clock.advance(1_250);
    // The new window's answer states its Limit and Reset only: the count of the last one (0 left) no longer holds,
    // and the Limit does: one more request in this window (two sent in the last 60 s), not an unbounded number.
    const second = await g.acquire("reconcile");
    second.done({
      status: 200,
      headers: { "x-ratelimit-limit": "2", "x-ratelimit-reset": String((T0 + 61_000) / 1000) },
    });
    const third = track(g.acquire("reconcile"));
    await flush();
    expect(third.permit).toBeUndefined();
    expect(g.snapshot().remaining).toBeUndefined();
  });

  it("after a 429 waits for the later of Reset and Retry-After", async () => {
    const { g, clock, log } = gate({ skewMs: 250 });
    const probe = await g.acquire("webhook");
    probe.done({ status: 429, headers: { ...headers(100, 0, T0 + 10_000), "retry-after": "30" } });
    expect(g.snapshot().pausedUntil).toBe(T0 + 30_250);
    expect(log.find((l) => l.msg === "booking API answered 429: pausing every request")).toMatchObject({
      basis: "retry-after",
    });
    const next = track(g.acquire("webhook"));
    await clock.advance(10_250);
    await flush();
    expect(next.permit).toBeUndefined();
    await clock.advance(20_000);
    await flush();
    expect(next.permit).toBeDefined();
  });

  it("rejects a waiter whose signal aborts and keeps serving the others", async () => {
    const { g, clock } = gate();
    const p = await g.acquire("reconcile");
    p.done({ status: 200, headers: headers(1, 0, T0 + 1_000) });
    const ac = new AbortController();
    const a = track(g.acquire("webhook", ac.signal));
    const b = track(g.acquire("reconcile"));
    ac.abort(new Error("stop"));
    await flush();
    expect((a.error as Error).message).toBe("stop");
    await clock.advance(2_000);
    await flush();
    expect(b.permit).toBeDefined();
    expect(g.snapshot().waiting.webhook).toBe(0);
  });

  it("exports waits, waited time and the remaining budget to its registry", async () => {
    const { g, clock, registry } = gate();
    const p = await g.acquire("writeback");
    p.done({ status: 200, headers: headers(5, 0, T0 + 2_000) });
    const w = g.acquire("writeback");
    await clock.advance(3_000);
    (await w).done({ status: 200, headers: headers(5, 4, T0 + 3_000) });
    const text = await registry.metrics();
    expect(text).toContain('calbridge_booking_ratelimit_waits_total{reason="budget_spent",priority="writeback"} 1');
    expect(text).toMatch(/calbridge_booking_ratelimit_wait_seconds_sum\{priority="writeback"\} 3(\s|$)/);
    expect(text).toContain("calbridge_booking_ratelimit_remaining 4");
    expect(text).toContain('calbridge_booking_ratelimit_waiting{priority="webhook"} 0');
  });

  it("a window's first request goes alone only among those sent since its end: a slow one of the old window holds nothing", async () => {
    const { g, clock } = gate();
    const first = await g.acquire("reconcile");
    await clock.advance(100);
    first.done({ status: 200, headers: headers(100, 90, T0 + 60_000) });
    // An enrichment sent at T0 + 59 s, inside the window (89 left), answers slowly (review25).
    await clock.advance(58_900);
    const slow = await g.acquire("enrich");
    // The window has rolled by our clock and the margin: a webhook's follow-up at T0 + 62 s goes at once, alone.
    await clock.advance(3_000);
    const hook = track(g.acquire("webhook"));
    await flush();
    expect(hook.permit).toBeDefined();
    // It is the new window's first request: the next waits for its answer, not for the old window's slow one.
    const next = track(g.acquire("webhook"));
    await flush();
    expect(next.permit).toBeUndefined();
    hook.permit!.done({ status: 200, headers: headers(100, 99, T0 + 120_000) });
    await flush();
    expect(next.permit).toBeDefined();
    slow.done({ status: 200, headers: headers(100, 88, T0 + 60_000) });
    next.permit!.done({ status: 200, headers: headers(100, 98, T0 + 120_000) });
  });
});

async function drivenAcquire(g: RateLimitGate, clock: SteppingClock): Promise<GatePermit> {
  const t = track(g.acquire("reconcile"));
  for (let i = 0; i < 100 && !t.permit; i++) {
    await flush();
    if (t.permit) break;
    const next = clock.nextDeadline();
    if (next !== undefined) await clock.advance(next - clock.now());
  }
  if (!t.permit) throw new Error("never granted");
  return t.permit;
}
