// The booking-service simulator over raw HTTP: envelopes, auth, pagination bounds, filters, order, the booking rules,
// availability, rate-limit headers, fault injection, the data API.
import { request } from "undici";
import { afterEach, describe, expect, it } from "vitest";
import { type BookingSimulator, startBookingSimulator } from "../../src/simulator/booking/index.ts";
import { API_KEY, SteppingClock, T0 } from "./support.ts";

const HOUR = 3_600_000;
const DAY = 24 * HOUR;
const at = (h: number) => new Date(T0 + h * HOUR).toISOString();
const customer = { name: "Eva Example", email: "eva@example.com" };

let sim: BookingSimulator | undefined;
let clock: SteppingClock;
afterEach(async () => {
  await sim?.close();
  sim = undefined;
});

async function start(options: Parameters<typeof startBookingSimulator>[0] = {}) {
  clock = new SteppingClock(T0);
  sim = await startBookingSimulator({ apiKey: API_KEY, clock, seed: 3, therapists: ["th_anna", "th_ben"], ...options });
  return sim;
}

// biome-ignore lint/suspicious/noExplicitAny: JSON off the wire; the assertions are the type check.
type Json = Record<string, any>;

async function call(method: string, path: string, body?: unknown, key: string | null = API_KEY) {
  const headers: Record<string, string> = { accept: "application/json" };
  if (key !== null) headers.authorization = `Bearer ${key}`;
  if (body !== undefined) headers["content-type"] = "application/json";
  const res = await request(`${sim!.url}${path}`, {
    method: method as "GET",
    headers,
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  const text = await res.body.text();
  return { status: res.statusCode, headers: res.headers, json: JSON.parse(text) as Json };
}

describe("booking simulator: HTTP", () => {
  it("answers 401 with an error envelope for a missing or wrong key", async () => {
    await start();
    for (const key of [null, "sk_wrong_0000000"]) {
      const r = await call("GET", "/v1/services", undefined, key);
      expect(r.status).toBe(401);
      expect(r.json.error).toMatchObject({ code: "unauthorized", message: expect.any(String), details: {} });
    }
  });

  it("lists with meta, per_page at most 100, in an order unrelated to time", async () => {
    await start();
    sim!.seed({ therapists: ["th_anna", "th_ben"], count: 250, from: T0, to: T0 + 30 * DAY });
    const first = await call("GET", "/v1/appointments");
    expect(first.json.meta).toMatchObject({ page: 1, per_page: 20, total: 250, total_pages: 13 });
    expect(first.json.meta.request_id).toMatch(/^req_/);
    expect(first.headers["x-request-id"]).toBe(first.json.meta.request_id);
    const big = await call("GET", "/v1/appointments?per_page=101");
    expect(big.status).toBe(400);
    expect(big.json.error).toMatchObject({ code: "invalid_request", details: { field: "per_page" } });
    const page = await call("GET", "/v1/appointments?per_page=100&page=3");
    expect(page.json.data.length).toBe(50);
    expect(Object.keys(page.json.data[0]).sort()).toEqual(
      [
        "id",
        "service_id",
        "service_name",
        "customer_id",
        "customer_name",
        "therapist_id",
        "therapist_name",
        "start_time",
        "end_time",
        "status",
        "price",
        "currency",
        "created_at",
      ].sort(),
    );
    const starts = (await call("GET", "/v1/appointments?per_page=100")).json.data.map((a: Json) => a.start_time);
    expect(starts).not.toEqual([...starts].sort());
    const again = (await call("GET", "/v1/appointments?per_page=100")).json.data.map((a: Json) => a.start_time);
    expect(again).toEqual(starts);
    const late = await call("GET", "/v1/appointments?page=99");
    expect(late.json).toMatchObject({ data: [], meta: { page: 99, total: 250 } });
  });

  it("filters on status, therapist, customer and start_time (date_to as a plain date covers that day)", async () => {
    await start();
    sim!.seed({ therapists: ["th_anna", "th_ben"], count: 300, from: T0 - 5 * DAY, to: T0 + 10 * DAY });
    const all = sim!.all();
    const day = new Date(T0 + 2 * DAY).toISOString().slice(0, 10);
    const r = await call("GET", `/v1/appointments?per_page=100&date_from=${day}&date_to=${day}&therapist_id=th_ben`);
    const want = all.filter((a) => String(a.start_time).startsWith(day) && a.therapist_id === "th_ben");
    expect(r.json.data.map((a: Json) => a.id).sort()).toEqual(want.map((a) => a.id).sort());
    const cancelled = await call("GET", "/v1/appointments?per_page=100&status=cancelled");
    expect(cancelled.json.meta.total).toBe(all.filter((a) => a.status === "cancelled").length);
    const bad = await call("GET", "/v1/appointments?date_from=yesterday");
    expect(bad.json.error).toMatchObject({ code: "invalid_request", details: { field: "date_from" } });
  });

  it('takes only plain dates for date_from/date_to (the spec: "start date"), and reads them as it is told', async () => {
    await start();
    // A date-time, a date with an offset, an impossible date: each refused, naming the field.
    for (const [field, value] of [
      ["date_from", new Date(T0).toISOString()],
      ["date_to", "2026-11-22T00:00:00+01:00"],
      ["date_to", "2026-02-30"],
    ] as const) {
      const r = await call("GET", `/v1/appointments?${field}=${encodeURIComponent(value)}`);
      expect(r.status).toBe(400);
      expect(r.json.error).toMatchObject({ code: "invalid_request", details: { field } });
    }
    // Around the end of 2026-11-23 UTC: 23:30 UTC on the 23rd, 00:30 UTC on the 24th.
    const late = sim!.create({ start_time: "2026-11-23T23:30:00Z" }).id as string;
    const early = sim!.create({ start_time: "2026-11-24T00:30:00Z" }).id as string;
    const ids = async (query: string) =>
      (await call("GET", `/v1/appointments?per_page=100&${query}`)).json.data.map((a: Json) => a.id).sort();
    expect(await ids("date_from=2026-11-23&date_to=2026-11-23")).toEqual([late]);
    sim!.dateReading.dateToExclusive = true;
    expect(await ids("date_from=2026-11-23&date_to=2026-11-24")).toEqual([late]);
    expect(await ids("date_from=2026-11-23&date_to=2026-11-23")).toEqual([]);
    // Days of a zone 14 hours ahead: the 24th there runs from 10:00 UTC on the 23rd.
    sim!.dateReading.dateToExclusive = false;
    sim!.dateReading.utcOffsetMinutes = 14 * 60;
    expect(await ids("date_from=2026-11-24&date_to=2026-11-24")).toEqual([late, early].sort());
    sim!.dateReading.utcOffsetMinutes = -12 * 60;
    expect(await ids("date_from=2026-11-23&date_to=2026-11-23")).toEqual([late, early].sort());
  });

  it("creates, and refuses with each of the spec's codes", async () => {
    await start();
    const ok = await call("POST", "/v1/appointments", {
      service_id: "svc_massage_60",
      therapist_id: "th_anna",
      start_time: at(25),
      customer,
      notes: "first visit",
      addons: ["addon_hot_stones"],
    });
    expect(ok.status).toBe(201);
    expect(ok.json.data).toMatchObject({
      status: "confirmed",
      start_time: at(25).replace(".000Z", "Z"),
      end_time: at(26).replace(".000Z", "Z"),
      price: 8000,
      currency: "eur",
      notes: "first visit",
    });
    const full = (await call("GET", `/v1/appointments/${ok.json.data.id}`)).json.data;
    expect(full).toMatchObject({ customer: { name: "Eva Example", email: "eva@example.com" }, payment_status: "paid" });
    expect(full.addons).toEqual([{ id: "addon_hot_stones", name: "Hot stones" }]);

    const base = { service_id: "svc_massage_60", start_time: at(30), customer };
    const refusals: [Json, number, string, string | undefined][] = [
      [{ ...base, service_id: undefined }, 400, "invalid_request", "service_id"],
      [{ ...base, customer: { name: "x" } }, 400, "invalid_request", "customer.email"],
      [{ ...base, start_time: "tomorrow" }, 400, "invalid_request", "start_time"],
      [{ ...base, service_id: "svc_x" }, 404, "service_not_found", "service_id"],
      [{ ...base, therapist_id: "th_anna", start_time: at(15 + 24) }, 409, "therapist_unavailable", "therapist_id"],
      [{ ...base, therapist_id: "th_anna", start_time: at(25.5) }, 409, "slot_unavailable", "start_time"],
      [{ ...base, start_time: at(-1) }, 422, "past_booking", "start_time"],
      [{ ...base, customer: { name: "B", email: "blocked@example.com" } }, 403, "customer_blocked", "customer.email"],
    ];
    for (const [body, status, code, field] of refusals) {
      const r = await call("POST", "/v1/appointments", body);
      expect([r.status, r.json.error.code, r.json.error.details.field]).toEqual([status, code, field]);
    }
    // Without a therapist one is assigned; when nobody is free: slot_unavailable.
    await call("POST", "/v1/appointments", { ...base, start_time: at(25) });
    const none = await call("POST", "/v1/appointments", { ...base, start_time: at(25) });
    expect(none.json.error.code).toBe("slot_unavailable");
    const malformed = await request(`${sim!.url}/v1/appointments`, {
      method: "POST",
      headers: { authorization: `Bearer ${API_KEY}` },
      body: "{not json",
    });
    expect(malformed.statusCode).toBe(400);
    await malformed.body.text();
  });

  it("moves keeping the duration, reassigns, and refuses what cannot be", async () => {
    await start();
    const a = sim!.create({ therapist_id: "th_anna", start_time: at(26), service_id: "svc_massage_90" });
    const b = sim!.create({ therapist_id: "th_ben", start_time: at(30) });
    const moved = await call("PATCH", `/v1/appointments/${a.id}`, { start_time: at(27) });
    expect(moved.status).toBe(200);
    expect(Object.keys(moved.json.data).sort()).toEqual([
      "end_time",
      "id",
      "notes",
      "start_time",
      "status",
      "updated_at",
    ]);
    expect(moved.json.data).toMatchObject({
      start_time: at(27).replace(".000Z", "Z"),
      end_time: at(28.5).replace(".000Z", "Z"),
    });
    expect(moved.json.data.updated_at > String(a.updated_at)).toBe(true);
    const clash = await call("PATCH", `/v1/appointments/${a.id}`, { therapist_id: "th_ben", start_time: at(29.5) });
    expect(clash.json.error).toMatchObject({ code: "therapist_unavailable", details: { field: "therapist_id" } });
    const slot = await call("PATCH", `/v1/appointments/${b.id}`, { start_time: at(26) });
    expect(slot.status).toBe(200);
    const overlap = await call("PATCH", `/v1/appointments/${b.id}`, { therapist_id: "th_anna", start_time: at(27) });
    expect(overlap.json.error.code).toBe("therapist_unavailable");
    const sameTherapist = sim!.create({ therapist_id: "th_anna", start_time: at(33) });
    const slotTaken = await call("PATCH", `/v1/appointments/${sameTherapist.id}`, { start_time: at(28) });
    expect(slotTaken.json.error.code).toBe("slot_unavailable");
    expect((await call("PATCH", `/v1/appointments/${a.id}`, { start_time: at(-3) })).json.error.code).toBe(
      "past_booking",
    );
    expect((await call("PATCH", `/v1/appointments/${a.id}`, {})).json.error.details.field).toBe("body");
    expect((await call("PATCH", `/v1/appointments/${a.id}`, { status: "cancelled" })).json.error.details.field).toBe(
      "status",
    );
    // Only confirmed appointments move: 409 invalid_state.
    await call("POST", `/v1/appointments/${b.id}/cancel`, {});
    const frozen = await call("PATCH", `/v1/appointments/${b.id}`, { start_time: at(40) });
    expect([frozen.status, frozen.json.error.code]).toEqual([409, "invalid_state"]);
    // Setting what is already there changes nothing: no new updated_at, no event.
    const before = sim!.get(a.id as string)!.updated_at;
    const events = sim!.events.length;
    await call("PATCH", `/v1/appointments/${a.id}`, { start_time: at(27) });
    expect(sim!.get(a.id as string)!.updated_at).toBe(before);
    expect(sim!.events.length).toBe(events);
    const missing = await call("PATCH", "/v1/appointments/apt_nope", { notes: "x" });
    expect([missing.status, missing.json.error.code]).toEqual([404, "not_found"]);
  });

  it("cancels with refund fields, and refuses a second cancel with 409 invalid_state", async () => {
    await start();
    const far = sim!.create({ therapist_id: "th_anna", start_time: at(72) });
    const near = sim!.create({ therapist_id: "th_ben", start_time: at(5) });
    const r = await call("POST", `/v1/appointments/${far.id}/cancel`, { reason: "ill", notify_customer: false });
    expect(r.json.data).toMatchObject({
      id: far.id,
      status: "cancelled",
      cancellation_reason: "ill",
      refund_amount: 8000,
      refund_status: "processing",
      cancelled_at: expect.any(String),
    });
    const n = await call("POST", `/v1/appointments/${near.id}/cancel`);
    expect(n.json.data).toMatchObject({ refund_amount: 0, refund_status: "none", cancellation_reason: "" });
    const twice = await call("POST", `/v1/appointments/${far.id}/cancel`, {});
    expect([twice.status, twice.json.error.code, twice.json.error.details]).toEqual([
      409,
      "invalid_state",
      { status: "cancelled" },
    ]);
    const full = (await call("GET", `/v1/appointments/${far.id}`)).json.data;
    expect(full).toMatchObject({ status: "cancelled", cancellation_reason: "ill", refund_status: "processing" });
  });

  it("offers availability of several therapists, not ordered by time", async () => {
    await start();
    sim!.create({ therapist_id: "th_anna", start_time: at(25) });
    const date = new Date(T0 + DAY).toISOString().slice(0, 10);
    const r = await call("GET", `/v1/availability?service_id=svc_massage_60&date=${date}`);
    const slots = r.json.data.slots as Json[];
    expect(r.json.data).toMatchObject({ date, service_id: "svc_massage_60" });
    expect(new Set(slots.map((s) => s.therapist_id))).toEqual(new Set(["th_anna", "th_ben"]));
    const starts = slots.map((s) => s.start_time);
    expect(starts).not.toEqual([...starts].sort());
    // Anna's 10:00 booking blocks her overlapping slots.
    expect(slots.some((s) => s.therapist_id === "th_anna" && s.start_time === at(25).replace(".000Z", "Z"))).toBe(
      false,
    );
    const one = await call(
      "GET",
      `/v1/availability?service_id=svc_massage_60&date=${date}&therapist_id=th_ben&duration=30`,
    );
    expect(one.json.data.slots.every((s: Json) => s.therapist_id === "th_ben")).toBe(true);
    expect((await call("GET", "/v1/availability?date=2026-12-01")).json.error.details.field).toBe("service_id");
    expect((await call("GET", `/v1/availability?service_id=svc_x&date=${date}`)).json.error.code).toBe(
      "service_not_found",
    );
  });

  it("lists services and webhook endpoints (without their secrets)", async () => {
    await start();
    sim!.addWebhookEndpoint({
      url: "http://127.0.0.1:9/hook",
      secret: "whsec_abcdefgh",
      events: ["appointment.created"],
    });
    const services = await call("GET", "/v1/services");
    expect(services.json.data.length).toBe(4);
    expect(services.json.data[0]).toMatchObject({ id: "svc_massage_60", name: expect.any(String) });
    const hooks = await call("GET", "/v1/webhooks");
    expect(hooks.json.data).toEqual([
      {
        id: expect.any(String),
        url: "http://127.0.0.1:9/hook",
        events: ["appointment.created"],
        enabled: true,
        description: "",
      },
    ]);
    expect(JSON.stringify(hooks.json)).not.toContain("whsec_");
  });

  it("limits a fixed window, with the three headers on every response, and 429 rate_limited beyond", async () => {
    await start({ rateLimit: { limit: 3, windowMs: 60_000 } });
    const seen = [];
    for (let i = 0; i < 4; i++) seen.push(await call("GET", "/v1/services"));
    expect(seen.map((r) => r.headers["x-ratelimit-remaining"])).toEqual(["2", "1", "0", "0"]);
    expect(seen[0]!.headers["x-ratelimit-limit"]).toBe("3");
    expect(seen[0]!.headers["x-ratelimit-reset"]).toBe(String((T0 + 60_000) / 1000));
    expect(seen[3]!.status).toBe(429);
    expect(seen[3]!.json.error.code).toBe("rate_limited");
    await clock.advance(60_000);
    expect((await call("GET", "/v1/services")).headers["x-ratelimit-remaining"]).toBe("2");
    expect(sim!.stats()).toMatchObject({ rateLimited: 1, maxPerWindow: 3 });
    sim!.rateLimit.headers = false;
    expect((await call("GET", "/v1/services")).headers["x-ratelimit-limit"]).toBeUndefined();
  });

  it("injects faults: failures, dropped answers (after processing), malformed bodies, random 5xx", async () => {
    await start();
    const a = sim!.create({ therapist_id: "th_anna", start_time: at(30) });
    sim!.faults.failNext(1, 502);
    const f = await call("GET", `/v1/appointments/${a.id}`);
    expect([f.status, f.json.error.code]).toEqual([502, "internal_error"]);
    sim!.faults.dropResponseNext(1, { method: "POST" });
    await expect(call("POST", `/v1/appointments/${a.id}/cancel`, {})).rejects.toThrow();
    expect(sim!.get(a.id as string)!.status).toBe("cancelled");
    sim!.faults.malformedNext(1);
    const m = await request(`${sim!.url}/v1/services`, { headers: { authorization: `Bearer ${API_KEY}` } });
    expect(await m.body.text()).toContain("<html>");
    sim!.faults.errorRate = 0.5;
    const statuses = [];
    for (let i = 0; i < 40; i++) statuses.push((await call("GET", "/v1/services")).status);
    expect(statuses.filter((s) => s === 503).length).toBeGreaterThan(5);
    expect(statuses.filter((s) => s === 200).length).toBeGreaterThan(5);
    expect(sim!.stats()).toMatchObject({ dropped: 1, malformed: 1 });
  });
});

describe("booking simulator: data API", () => {
  it("is deterministic for a seed", async () => {
    const one = await start({ seed: 42 });
    const ids1 = one.seed({ therapists: ["th_anna"], count: 20, from: T0, to: T0 + 5 * DAY });
    const all1 = one.all();
    await one.close();
    const two = await start({ seed: 42 });
    const ids2 = two.seed({ therapists: ["th_anna"], count: 20, from: T0, to: T0 + 5 * DAY });
    expect(ids2).toEqual(ids1);
    expect(two.all()).toEqual(all1);
  });

  it("bumps updated_at strictly on every change, even within one millisecond, and emits the events", async () => {
    await start();
    const a = sim!.create({ therapist_id: "th_anna", start_time: at(30) });
    const id = a.id as string;
    const stamps = [a.updated_at];
    stamps.push(sim!.move(id, at(31)).updated_at);
    stamps.push(sim!.reassign(id, "th_ben").updated_at);
    stamps.push(sim!.setNotes(id, "bring towel").updated_at);
    stamps.push(sim!.complete(id).updated_at);
    const b = sim!.create({ therapist_id: "th_anna", start_time: at(40) });
    stamps.push(b.updated_at, sim!.noShow(b.id as string).updated_at);
    const c = sim!.create({ therapist_id: "th_anna", start_time: at(44) });
    stamps.push(c.updated_at, sim!.cancel(c.id as string, "closed").updated_at);
    for (let i = 1; i < stamps.length; i++) expect(String(stamps[i]) > String(stamps[i - 1])).toBe(true);
    expect(sim!.get(id)).toMatchObject({ status: "completed", therapist_id: "th_ben", notes: "bring towel" });
    expect(sim!.get(b.id as string)!.status).toBe("no_show");
    const cust = sim!.get(id)!.customer as Json;
    sim!.updateCustomer(cust.id, { name: "New Name" });
    expect(sim!.events.map((e) => e.type)).toEqual([
      "appointment.created",
      "appointment.updated",
      "appointment.updated",
      "appointment.updated",
      "appointment.completed",
      "appointment.created",
      "appointment.no_show",
      "appointment.created",
      "appointment.cancelled",
      "customer.updated",
    ]);
    expect(sim!.get(id)!.customer).toMatchObject({ name: "New Name" });
  });
});
