// The gate in front of real HTTP: the simulator's own counts show it never overspends, and that it recovers from 429s.
import { request } from "undici";
import { afterEach, describe, expect, it } from "vitest";
import type { Priority } from "../../src/booking/gate.ts";
import { captureLog } from "../support/log-capture.ts";
import { API_KEY, collect, drive, type Pair, startPair, T0 } from "./support.ts";

const HOUR = 3_600_000;
const at = (h: number) => new Date(T0 + h * HOUR).toISOString();

let pair: Pair | undefined;
afterEach(async () => {
  await pair?.close();
  pair = undefined;
});

describe("rate limit", () => {
  it("never lets a request through when the budget is spent: zero 429s under heavy concurrency", async () => {
    const log = captureLog("debug");
    pair = await startPair({
      sim: { therapists: ["th_anna", "th_ben"], rateLimit: { limit: 10, windowMs: 60_000 } },
      // The client believes in 600/min; the server's headers must win.
      client: { requestsPerMinute: 600, logger: log.logger },
    });
    const { sim, client, clock } = pair;
    sim.seed({ therapists: ["th_anna"], count: 450, from: T0, to: T0 + 30 * 24 * HOUR });
    const ids = sim.all().map((a) => a.id as string);
    const priorities: Priority[] = ["webhook", "writeback", "reconcile"];
    const work = Promise.all([
      ...ids.slice(0, 45).map((id, i) => client.getAppointment(id, { priority: priorities[i % 3]! })),
      collect(client.listAppointments({})),
      collect(client.listAppointments({ therapistId: "th_anna" })),
    ]);
    const results = await drive(clock, work);
    expect(results.length).toBe(47);
    const stats = sim.stats();
    expect(stats.rateLimited).toBe(0);
    expect(stats.maxPerWindow).toBeLessThanOrEqual(10);
    expect(stats.requests).toBe(45 + 5 + 5);
    expect(client.stats().rateLimited).toBe(0);
    const wait = log.find((l) => l.reason === "budget_spent");
    expect(wait).toMatchObject({ msg: "booking API rate-limit gate: waited before sending" });
    expect(wait!.waitedMs).toBeGreaterThan(0);
    expect(log.raw.join("\n")).not.toContain(API_KEY);
    expect(client.gate.snapshot()).toMatchObject({
      limit: 10,
      inFlight: 0,
      waiting: { webhook: 0, writeback: 0, reconcile: 0 },
    });
  });

  it("stays under the client-side ceiling when the server sends no headers", async () => {
    pair = await startPair({
      sim: { therapists: ["th_anna"], rateLimit: { limit: 5, windowMs: 60_000, headers: false } },
      client: { requestsPerMinute: 5, rateWindowMs: 60_000 },
    });
    const { sim, client, clock } = pair;
    const a = sim.create({ therapist_id: "th_anna", start_time: at(30) });
    await drive(clock, Promise.all(Array.from({ length: 23 }, () => client.getAppointment(a.id as string))));
    expect(sim.stats()).toMatchObject({ rateLimited: 0, requests: 23 });
    expect(sim.stats().maxPerWindow).toBeLessThanOrEqual(5);
  });

  it("pauses everyone until X-RateLimit-Reset after a 429, then succeeds", async () => {
    const log = captureLog("debug");
    pair = await startPair({
      sim: { therapists: ["th_anna"], rateLimit: { limit: 3, windowMs: 60_000 } },
      client: { logger: log.logger },
    });
    const { sim, client, clock } = pair;
    const a = sim.create({ therapist_id: "th_anna", start_time: at(30) });
    // Someone else with the same key spends the window's budget.
    for (let i = 0; i < 3; i++) {
      const r = await request(`${sim.url}/v1/services`, { headers: { authorization: `Bearer ${API_KEY}` } });
      await r.body.text();
    }
    const got = await drive(
      clock,
      Promise.all([client.getAppointment(a.id as string), client.cancelAppointment(a.id as string, {})]),
    );
    expect(got[1].status).toBe("cancelled");
    const stats = sim.stats();
    expect(stats.rateLimited).toBe(1);
    const after429 = sim.requests.filter((r) => r.status !== 429 && r.userAgent?.startsWith("calbridge"));
    // Everything after the 429 was sent in the next window (T0 + 60 s), not before.
    for (const r of after429) expect(r.at).toBeGreaterThanOrEqual(T0 + 60_000);
    expect(client.stats()).toMatchObject({ rateLimited: 1, retries: 1 });
    // The cancel was never ambiguous: no verifying GET beyond the one asked for.
    expect(sim.stats().byRoute["POST /v1/appointments/:id/cancel"]).toBe(1);
    expect(log.find((l) => l.msg === "booking API answered 429: pausing every request")).toMatchObject({
      basis: "reset",
    });
  });

  it("reads an X-RateLimit-Reset in epoch milliseconds as such: after a 429 everyone waits for the next window, not millennia", async () => {
    pair = await startPair({
      sim: { therapists: ["th_anna"], rateLimit: { limit: 3, windowMs: 60_000, resetUnit: "milliseconds" } },
    });
    const { sim, client, clock } = pair;
    const a = sim.create({ therapist_id: "th_anna", start_time: at(30) });
    for (let i = 0; i < 3; i++) {
      const r = await request(`${sim.url}/v1/services`, { headers: { authorization: `Bearer ${API_KEY}` } });
      await r.body.text();
    }
    const got = await drive(clock, client.getAppointment(a.id as string));
    expect(got.id).toBe(a.id);
    const mine = sim.requests.filter((r) => r.userAgent?.startsWith("calbridge"));
    expect(mine.map((r) => r.status)).toEqual([429, 200]);
    // Sent again in the next window (the Reset said T0 + 60 s), the gate's margin (a second) after it began.
    expect(mine[1]!.at).toBeGreaterThanOrEqual(T0 + 60_000);
    expect(mine[1]!.at).toBeLessThan(T0 + 62_000);
  });

  it("reads an X-RateLimit-Reset in epoch milliseconds as such: a spent budget holds the next request until the next window only", async () => {
    pair = await startPair({
      sim: { therapists: ["th_anna"], rateLimit: { limit: 2, windowMs: 60_000, resetUnit: "milliseconds" } },
    });
    const { sim, client, clock } = pair;
    const a = sim.create({ therapist_id: "th_anna", start_time: at(30) });
    for (let i = 0; i < 3; i++) await drive(clock, client.getAppointment(a.id as string));
    const mine = sim.requests.filter((r) => r.userAgent?.startsWith("calbridge"));
    expect(mine.map((r) => r.status)).toEqual([200, 200, 200]);
    expect(mine[2]!.at).toBeGreaterThanOrEqual(T0 + 60_000);
    expect(mine[2]!.at).toBeLessThan(T0 + 62_000);
  });

  it("takes a rate-limit error code at another status (403) for a 429: pauses everyone until the reset, then retries", async () => {
    const log = captureLog("debug");
    pair = await startPair({
      sim: { therapists: ["th_anna"], rateLimit: { limit: 10, windowMs: 60_000 } },
      client: { logger: log.logger },
    });
    const { sim, client, clock } = pair;
    const a = sim.create({ therapist_id: "th_anna", start_time: at(30) });
    sim.faults.refuseNext(1, "rate_limited", { status: 403 });
    const got = await drive(
      clock,
      Promise.all([client.getAppointment(a.id as string), client.getAppointment(a.id as string)]),
    );
    expect(got.map((x) => x.id)).toEqual([a.id, a.id]);
    const mine = sim.requests.filter((r) => r.userAgent?.startsWith("calbridge"));
    expect(mine.map((r) => r.status)).toEqual([403, 200, 200]);
    // The budget said 9 left, but the refusal paused every sender until X-RateLimit-Reset (the next window).
    for (const r of mine.slice(1)) expect(r.at).toBeGreaterThanOrEqual(T0 + 60_000);
    expect(client.stats()).toMatchObject({ rateLimited: 1, retries: 1 });
    expect(
      log.find((l) => l.msg === "booking API answered 403 with a rate-limit error code: pausing every request"),
    ).toMatchObject({ basis: "reset", status: 403 });
  });

  it("pauses on a rate-limit error code without X-RateLimit headers too, backing off before the retry", async () => {
    pair = await startPair({ sim: { therapists: ["th_anna"], rateLimit: false } });
    const { sim, client, clock } = pair;
    const a = sim.create({ therapist_id: "th_anna", start_time: at(30) });
    sim.faults.refuseNext(1, "rate_limit_exceeded", { status: 403 });
    const got = await drive(clock, client.getAppointment(a.id as string));
    expect(got.id).toBe(a.id);
    const mine = sim.requests.filter((r) => r.userAgent?.startsWith("calbridge"));
    expect(mine.map((r) => r.status)).toEqual([403, 200]);
    expect(mine[1]!.at).toBeGreaterThan(mine[0]!.at);
    expect(client.stats()).toMatchObject({ rateLimited: 1, retries: 1 });
  });

  it("waits as long as a Retry-After says when a 429 comes without X-RateLimit headers", async () => {
    pair = await startPair({ sim: { therapists: ["th_anna"], rateLimit: false } });
    const { sim, client, clock } = pair;
    const a = sim.create({ therapist_id: "th_anna", start_time: at(30) });
    sim.faults.refuseNext(1, "rate_limited", { status: 429, retryAfter: 45 });
    const got = await drive(clock, client.getAppointment(a.id as string));
    expect(got.id).toBe(a.id);
    const mine = sim.requests.filter((r) => r.userAgent?.startsWith("calbridge"));
    expect(mine.map((r) => r.status)).toEqual([429, 200]);
    expect(mine[1]!.at - mine[0]!.at).toBeGreaterThanOrEqual(45_000);
    // Not much longer either: the backoff without a Retry-After starts at a second or two.
    expect(mine[1]!.at - mine[0]!.at).toBeLessThan(60_000);
  });

  it("backs off with jitter after 429s without headers until the window rolls", async () => {
    pair = await startPair({
      sim: { therapists: ["th_anna"], rateLimit: { limit: 3, windowMs: 60_000, headers: false } },
      client: { requestsPerMinute: 600 },
    });
    const { sim, client, clock } = pair;
    const a = sim.create({ therapist_id: "th_anna", start_time: at(30) });
    const got = await drive(clock, Promise.all(Array.from({ length: 5 }, () => client.getAppointment(a.id as string))));
    expect(got.length).toBe(5);
    expect(sim.stats().rateLimited).toBeGreaterThan(0);
    expect(sim.stats().maxPerWindow).toBeLessThanOrEqual(3);
    expect(client.gate.snapshot().mode).toBe("no_headers");
  });

  it("serves waiting requests by priority: webhook follow-ups, then write-backs, then reconciliation", async () => {
    pair = await startPair({ sim: { therapists: ["th_anna"], rateLimit: { limit: 1, windowMs: 60_000 } } });
    const { sim, client, clock } = pair;
    const a = sim.create({ therapist_id: "th_anna", start_time: at(30) });
    const id = a.id as string;
    await drive(clock, client.listServices());
    const order: string[] = [];
    const work = [
      collect(client.listAppointments({})).then(() => order.push("reconcile")),
      client.patchAppointment(id, { notes: "x" }).then(() => order.push("writeback")),
      client.getAppointment(id).then(() => order.push("webhook")),
    ];
    await drive(clock, Promise.all(work));
    expect(order).toEqual(["webhook", "writeback", "reconcile"]);
    expect(sim.requests.slice(1).map((r) => r.route)).toEqual([
      "GET /v1/appointments/:id",
      "PATCH /v1/appointments/:id",
      "GET /v1/appointments",
    ]);
    expect(sim.stats().rateLimited).toBe(0);
  });

  it("exposes the budget and waits as metrics", async () => {
    pair = await startPair({ sim: { therapists: ["th_anna"], rateLimit: { limit: 2, windowMs: 60_000 } } });
    const { client, clock, registry } = pair;
    await drive(clock, Promise.all([client.listServices(), client.listServices(), client.listServices()]));
    const text = await registry.metrics();
    expect(text).toMatch(/calbridge_booking_ratelimit_remaining \d+/);
    expect(text).toContain('calbridge_booking_requests_total{method="GET",status_class="2xx"} 3');
    expect(text).toMatch(/calbridge_booking_ratelimit_waits_total\{reason="budget_spent",priority="reconcile"\} 1/);
  });
});
