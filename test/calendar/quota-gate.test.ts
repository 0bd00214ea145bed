// Google's quotas on the client side: requests wait before sending while a window is full (the project's, or one
// therapist's without holding up the others), a PATCH counts three units, a usageLimits answer pauses its scope and
// lowers its ceiling until quiet windows restore it; and gateways paced by the gate get no usageLimits answer from
// the emulator's quotas. On the manual clock.
import { Registry } from "prom-client";
import { describe, expect, it } from "vitest";
import { GoogleQuotaGate, type QuotaPermit, unitsOf } from "../../src/calendar/quota-gate.ts";
import { ManualClock } from "../../src/clock.ts";
import { waitFor } from "../support/wait-for.ts";
import { body, setup } from "./helpers.ts";

const flush = async () => {
  for (let i = 0; i < 3; i++) await new Promise((r) => setImmediate(r));
};

function track(p: Promise<QuotaPermit>) {
  const t: { permit?: QuotaPermit } = {};
  void p.then((x) => {
    t.permit = x;
  });
  return t;
}

/**
 * Moves the clock in `step`s until `until()`, only while someone sleeps on it and no request is in flight: an HTTP
 * round trip takes real time (under load, hundreds of ms), during which the clock stands still instead of running on.
 */
async function drive(clock: ManualClock, quota: GoogleQuotaGate, step: number, until: () => boolean): Promise<void> {
  const end = Date.now() + 20_000;
  while (!until()) {
    if (Date.now() > end) throw new Error("timed out driving the clock");
    if (clock.waiting > 0 && quota.snapshot().inFlight === 0) await clock.advance(step);
    await new Promise((r) => setTimeout(r, 2));
  }
}

function gate(options: Partial<ConstructorParameters<typeof GoogleQuotaGate>[0]> = {}) {
  const clock = new ManualClock();
  const registry = new Registry();
  const g = new GoogleQuotaGate({
    projectPerMinute: 100,
    userPerMinute: 3,
    clock,
    registry,
    random: () => 0,
    ...options,
  });
  return { g, clock, registry };
}

describe("GoogleQuotaGate", () => {
  it("holds a therapist's request once their minute is spent, while another therapist's goes at once", async () => {
    const { g, clock, registry } = gate();
    for (let i = 0; i < 3; i++) (await g.acquire("th_a")).done();
    const a = track(g.acquire("th_a"));
    const b = track(g.acquire("th_b"));
    await flush();
    expect(a.permit).toBeUndefined();
    expect(b.permit).toBeDefined();
    // The window slides: the first answer leaves it 60 s after it came, not a moment earlier.
    await clock.advance(59_999);
    await flush();
    expect(a.permit).toBeUndefined();
    await clock.advance(1);
    await flush();
    expect(a.permit?.waitedMs).toBe(60_000);
    expect(await registry.getSingleMetricAsString("calbridge_google_quota_waits_total")).toContain(
      'calbridge_google_quota_waits_total{scope="user"} 1',
    );
  });

  it("holds everyone, in order, once the project's minute is spent; requests in flight count", async () => {
    const { g, clock } = gate({ projectPerMinute: 4, userPerMinute: 100 });
    const inFlight = await g.acquire("th_a");
    for (let i = 0; i < 3; i++) (await g.acquire(`th_${i}`)).done();
    const big = track(g.acquire("th_x", 3));
    const small = track(g.acquire("th_y", 1));
    await flush();
    expect(big.permit).toBeUndefined();
    expect(small.permit).toBeUndefined(); // not past the bigger one: it would never get its turn
    expect(g.snapshot()).toMatchObject({ waiting: 2, inFlight: 1, project: { used: 4, ceiling: 4 } });
    await clock.advance(60_000);
    await flush();
    expect(big.permit).toBeDefined(); // three answered requests left the window; the one in flight still counts
    expect(small.permit).toBeUndefined();
    inFlight.done();
    await clock.advance(60_000);
    await flush();
    expect(small.permit).toBeDefined();
  });

  it("gives up a waiting request when its signal aborts: rejected with the reason, its place and budget left to the others", async () => {
    const { g, clock } = gate({ projectPerMinute: 3, userPerMinute: 100 });
    for (let i = 0; i < 3; i++) (await g.acquire(`th_${i}`)).done();
    const stop = new AbortController();
    const big = g.acquire("th_x", 3, stop.signal);
    const rejected = big.then(
      () => "granted",
      (err: unknown) => err,
    );
    const after = track(g.acquire("th_y", 1));
    await flush();
    expect(g.snapshot().waiting).toBe(2);
    const reason = new Error("stopping");
    stop.abort(reason);
    expect(await rejected).toBe(reason);
    await flush();
    expect(g.snapshot()).toMatchObject({ waiting: 1, inFlight: 0 });
    await clock.advance(60_000);
    await flush();
    // The one behind it goes once the window frees, and the one given up counted nothing: two more fit at once.
    expect(after.permit).toBeDefined();
    const two = [track(g.acquire("th_z")), track(g.acquire("th_z"))];
    await flush();
    expect(two.every((t) => t.permit)).toBe(true);
    expect(g.snapshot()).toMatchObject({ waiting: 0, inFlight: 3, project: { used: 3 } });
  });

  it("an aborted signal gives up only a wait: a permit free at once is still taken", async () => {
    const { g } = gate({ projectPerMinute: 100, userPerMinute: 1 });
    const stopped = AbortSignal.abort(new Error("stopping"));
    const free = await g.acquire("th_a", 1, stopped);
    expect(free.waitedMs).toBe(0);
    await expect(g.acquire("th_a", 1, stopped)).rejects.toThrow("stopping");
    expect(g.snapshot()).toMatchObject({ waiting: 0, inFlight: 1 });
  });

  it("charges an events.patch three units, as Google does", () => {
    expect(unitsOf("events.patch")).toBe(3);
    expect(unitsOf("events.insert")).toBe(1);
    expect(unitsOf("events.list")).toBe(1);
  });

  it("pauses the scope a usageLimits answer names, with growing jittered pauses, and lowers its ceiling until quiet windows restore it", async () => {
    const { g, clock, registry } = gate({ projectPerMinute: 100, userPerMinute: 40, random: () => 1 });
    g.limited("user", "th_a");
    const a = track(g.acquire("th_a"));
    const b = track(g.acquire("th_b"));
    await flush();
    expect(a.permit).toBeUndefined();
    expect(b.permit).toBeDefined();
    await clock.advance(1_000);
    await flush();
    expect(a.permit).toBeDefined();
    a.permit!.done();
    // A second answer in a row: twice the pause. The ceiling fell to 75% and then 56% of the budget (40: 30, then 22).
    await clock.advance(2_000);
    g.limited("user", "th_a");
    const c = track(g.acquire("th_a"));
    await clock.advance(1_999);
    await flush();
    expect(c.permit).toBeUndefined();
    await clock.advance(1);
    await flush();
    expect(c.permit).toBeDefined();
    c.permit!.done();
    for (let i = 0; i < 20; i++) (await g.acquire("th_a")).done();
    const over = track(g.acquire("th_a"));
    await flush();
    expect(over.permit).toBeUndefined(); // 22 spent: the lowered ceiling, not the budget of 40
    await clock.advance(60_000);
    await flush();
    expect(over.permit).toBeDefined();
    // The project's own scope: everyone waits.
    g.limited("project", "th_a");
    const d = track(g.acquire("th_c"));
    await flush();
    expect(d.permit).toBeUndefined();
    await clock.advance(1_000);
    await flush();
    expect(d.permit).toBeDefined();
    const text = await registry.getSingleMetricAsString("calbridge_google_usage_limited_total");
    expect(text).toContain('{scope="user"} 2');
    expect(text).toContain('{scope="project"} 1');
    // Quiet windows bring the ceiling back.
    await clock.advance(10 * 60_000);
    expect(g.snapshot().project.ceiling).toBe(100);
  });
});

describe("gateways paced by the gate", () => {
  it("get no usageLimits answer from Google's per-user quota however many calls they make", async () => {
    const clock = new ManualClock(Date.now());
    const quota = new GoogleQuotaGate({ projectPerMinute: 1000, userPerMinute: 10, clock });
    const f = await setup({ quota, clock }, { clock, limits: { perUserPerMinute: 10 } });
    try {
      const calls = Array.from({ length: 25 }, (_, i) =>
        f.gateway.upsert(`paced${String(i).padStart(3, "0")}`, body(`event ${i}`)),
      );
      let done = false;
      const all = Promise.all(calls).finally(() => {
        done = true;
      });
      await drive(clock, quota, 1_000, () => done);
      await all;
      const usage = f.emulator.usage;
      expect(usage.usageLimitAnswers).toBe(0);
      expect(usage.byMethod["events.insert"]).toBe(25);
      // 25 inserts at 10 a minute: the last ones waited for two windows to slide.
      expect(clock.now()).toBeGreaterThanOrEqual(f.emulator.requestLog[0]!.at + 120_000);
    } finally {
      await f.close();
    }
  });

  it("a 403 rateLimitExceeded naming the per-user limit pauses that therapist alone; one naming the project's pauses everyone", async () => {
    const clock = new ManualClock(Date.now());
    const quota = new GoogleQuotaGate({ projectPerMinute: 10_000, userPerMinute: 600, clock, random: () => 0.5 });
    const f = await setup({ quota, clock }, { clock });
    const settle = (until: () => boolean) => drive(clock, quota, 100, until);
    // What another client of the project spending th_anna's budget, then the project's, makes Google answer.
    const quotaText = (limit: string) =>
      `Quota exceeded for quota metric 'Queries' and limit '${limit}' of service 'calendar-json.googleapis.com' for consumer 'project_number:1'.`;
    try {
      f.emulator.faults.next(1, {
        status: 403,
        reason: "rateLimitExceeded",
        message: quotaText("Queries per minute per user"),
      });
      let done = false;
      const call = f.gateway.upsert("limited002", body("limited")).finally(() => {
        done = true;
      });
      // Until Google's refusal has been read (the retry then waits at the gate).
      await waitFor("the retry to wait at the gate", () => quota.snapshot().waiting === 1, 10_000);
      const userLimited = quota.snapshot();
      expect(userLimited.project.pausedUntil).toBeUndefined();
      expect(userLimited.project.ceiling).toBe(10_000);
      // Another therapist's request goes at once while th_anna's retry waits for her pause.
      const ben = await quota.acquire("th_ben");
      ben.done();
      expect(done).toBe(false);
      await settle(() => done);
      expect((await call).action).toBe("inserted");

      f.emulator.faults.next(1, { status: 429, reason: "rateLimitExceeded", message: quotaText("Queries per minute") });
      done = false;
      const second = f.gateway.upsert("limited003", body("limited")).finally(() => {
        done = true;
      });
      await waitFor("the project's pause", () => quota.snapshot().project.pausedUntil !== undefined, 10_000);
      expect(quota.snapshot().project.pausedUntil).toBeGreaterThan(clock.now());
      expect(quota.snapshot().project.ceiling).toBeLessThan(10_000);
      await settle(() => done);
      expect((await second).action).toBe("inserted");
    } finally {
      await f.close();
    }
  });

  it("a plain 'Rate Limit Exceeded' (writes to one calendar in quick succession) pauses that therapist alone", async () => {
    const clock = new ManualClock(Date.now());
    const registry = new Registry();
    const quota = new GoogleQuotaGate({
      projectPerMinute: 10_000,
      userPerMinute: 600,
      clock,
      random: () => 0.5,
      registry,
    });
    const f = await setup({ quota, clock }, { clock, limits: { perCalendarWritesPerSecond: 2 } });
    try {
      let done = 0;
      const calls = ["burst001", "burst002", "burst003"].map((id) =>
        f.gateway.upsert(id, body(id)).finally(() => done++),
      );
      // Until two are answered and the refused one's retry waits at the gate (the clock stands still meanwhile).
      await waitFor("two answers and a retry at the gate", () => done === 2 && quota.snapshot().waiting === 1, 10_000);
      expect(f.emulator.usage.usageLimitAnswers).toBe(1);
      // Not the project's budget: nobody else waits, and the project's pace is not cut.
      expect(quota.snapshot().project).toMatchObject({ ceiling: 10_000 });
      expect(quota.snapshot().project.pausedUntil).toBeUndefined();
      (await quota.acquire("th_ben")).done();
      expect(done).toBe(2);
      await drive(clock, quota, 100, () => done === 3);
      expect((await Promise.all(calls)).map((c) => c.action)).toEqual(["inserted", "inserted", "inserted"]);
      const text = await registry.getSingleMetricAsString("calbridge_google_usage_limited_total");
      expect(text).toMatch(/\{scope="user"\} [1-9]/);
      expect(text).not.toContain('scope="project"');
    } finally {
      await f.close();
    }
  });

  it("a usageLimits answer (another client spends the same budget) is retried after the gate's pause, without a sleep of the gateway's own", async () => {
    const clock = new ManualClock(Date.now());
    const quota = new GoogleQuotaGate({ projectPerMinute: 1000, userPerMinute: 100, clock, random: () => 0.5 });
    const f = await setup({ quota, clock }, { clock });
    try {
      f.emulator.faults.next(2, { status: 403, reason: "userRateLimitExceeded" });
      let done = false;
      const call = f.gateway.upsert("limited001", body("limited")).finally(() => {
        done = true;
      });
      const started = clock.now();
      await drive(clock, quota, 100, () => done);
      expect((await call).action).toBe("inserted");
      // Pauses of 750 ms and then 1.5 s (half the doubling cap plus jitter): about 2.3 s, no more.
      expect(clock.now() - started).toBeGreaterThanOrEqual(2_200);
      expect(clock.now() - started).toBeLessThan(3_000);
    } finally {
      await f.close();
    }
  });
});
