// HTTP tests of the webhook route on a real server: statuses, durable accept before 2xx, duplicates, dead letters
// for malformed bodies, 503 on store failure, metrics, and no secret in any log line.
import { Readable } from "node:stream";
import { request } from "undici";
import { afterAll, afterEach, describe, expect, it } from "vitest";
import { sign } from "../../src/webhooks/signature.ts";
import { collect, event, type Harness, OLD_SECRET, PATH, SECRET, startHarness } from "./support.ts";

const harnesses: Harness[] = [];
const allLogLines: string[] = [];
afterEach(async () => {
  for (const h of harnesses.splice(0)) {
    await h.close();
    allLogLines.push(...h.log.raw);
  }
});
afterAll(() => {
  // No secret in any captured log line, over every test of this file (the capture does not scrub).
  expect(allLogLines.length).toBeGreaterThan(10);
  for (const line of allLogLines) {
    expect(line).not.toContain(SECRET);
    expect(line).not.toContain(OLD_SECRET);
    expect(line).not.toContain("whsec_");
  }
});

async function harness(...args: Parameters<typeof startHarness>) {
  const h = await startHarness(...args);
  harnesses.push(h);
  return h;
}

const created = (id: string, apt = "apt_1") => event(id, "appointment.created", { id: apt, status: "confirmed" });

describe("webhook route", () => {
  it("accepts a valid delivery: stored in the inbox before the 200, then processed", async () => {
    const h = await harness({ processor: false });
    const res = await h.post(created("evt_1"));
    expect(res).toEqual({ status: 200, json: { received: true } });
    const stored = await h.inbox.get("evt_1");
    expect(stored).toMatchObject({ id: "evt_1", type: "appointment.created", attempts: 0 });
    expect(stored?.event.data.object).toEqual({ id: "apt_1", status: "confirmed" });
    const line = h.log.find((l) => l["msg"] === "webhook accepted");
    expect(line).toMatchObject({ event_id: "evt_1", event_type: "appointment.created", appointment_id: "apt_1" });
  });

  it("rejects a tampered body with 401 and a short reason, logging the event id at warn", async () => {
    const h = await harness();
    const payload = JSON.stringify(created("evt_t"));
    const header = sign(payload, SECRET, h.clock.now() / 1000);
    const res = await h.post(payload.replace("apt_1", "apt_9"), { raw: true, signature: header });
    expect(res.status).toBe(401);
    expect(res.json).toEqual({ error: "mismatch", message: "signature mismatch" });
    expect(JSON.stringify(res.json)).not.toMatch(/[0-9a-f]{64}/);
    const warn = h.log.find((l) => l["reason"] === "mismatch");
    expect(warn).toMatchObject({ level: 40, event_id: "evt_t" });
    expect(String(warn?.["msg"])).toMatch(/raw request body/);
    expect(await h.inbox.get("evt_t")).toBeUndefined();
  });

  it("rejects stale and future timestamps with 401, without reading the body", async () => {
    const h = await harness();
    const now = h.clock.now() / 1000;
    expect((await h.post(created("evt_s"), { timestampSec: now - 301 })).json).toMatchObject({ error: "stale" });
    const future = await h.post(created("evt_f"), { timestampSec: now + 301 });
    expect(future).toMatchObject({ status: 401, json: { error: "future" } });
    const line = h.log.find((l) => l["reason"] === "future");
    expect(line).toMatchObject({ level: 40, body_read: false });
    expect(line).not.toHaveProperty("event_id");
    expect(await h.inbox.get("evt_s")).toBeUndefined();
  });

  it("rejects a missing or malformed signature header with 400", async () => {
    const h = await harness();
    expect(await h.post(created("evt_m"), { signature: null })).toMatchObject({
      status: 400,
      json: { error: "missing" },
    });
    expect(await h.post(created("evt_m"), { signature: "v1=abc" })).toMatchObject({
      status: 400,
      json: { error: "malformed" },
    });
  });

  it("accepts deliveries signed with either secret while rotating, and several v1 entries", async () => {
    const h = await harness({ handler: { secrets: [SECRET, OLD_SECRET] } });
    expect((await h.post(created("evt_a"), { secret: OLD_SECRET })).status).toBe(200);
    expect((await h.post(created("evt_b"), { secret: SECRET })).status).toBe(200);
    const payload = JSON.stringify(created("evt_c"));
    const t = h.clock.now() / 1000;
    const header = `t=${t},v1=${"f".repeat(64)},${sign(payload, OLD_SECRET, t).split(",")[1]}`;
    expect((await h.post(payload, { raw: true, signature: header })).status).toBe(200);
  });

  it("answers duplicates 200 with duplicate:true and processes the event once", async () => {
    const h = await harness();
    const first = await h.post(created("evt_d"));
    const concurrent = await Promise.all([1, 2, 3].map(() => h.post(created("evt_d"))));
    await h.processor!.idle();
    const later = await h.post(created("evt_d"));
    expect(first.json).toEqual({ received: true });
    for (const r of [...concurrent, later])
      expect(r).toEqual({ status: 200, json: { received: true, duplicate: true } });
    expect(h.sink.calls.map((c) => c.eventId)).toEqual(["evt_d"]);
  });

  it("lets concurrent first deliveries of one event race to exactly one acceptance", async () => {
    const h = await harness();
    const results = await Promise.all([1, 2, 3, 4, 5].map(() => h.post(created("evt_race"))));
    expect(results.filter((r) => r.json["duplicate"] !== true)).toHaveLength(1);
    await h.processor!.idle();
    expect(h.sink.calls).toHaveLength(1);
  });

  it("refuses a body over the limit with 413, by Content-Length or while streaming", async () => {
    // Over both limits: a body between them is read to its end and judged by its signature (bounded.test.ts).
    const h = await harness({ handler: { maxBodyBytes: 1000, maxVerifiedBodyBytes: 2000 } });
    const big = JSON.stringify(created("evt_big")).padEnd(5000, " ");
    expect(await h.post(big, { raw: true })).toMatchObject({ status: 413, json: { error: "too_large" } });
    async function* chunks() {
      for (let i = 0; i < 100; i++) yield Buffer.alloc(1000, 0x20);
    }
    const res = await request(h.url + PATH, {
      method: "POST",
      body: Readable.from(chunks()),
      headers: { "content-type": "application/json", "x-service-signature": `t=${h.clock.now() / 1000},v1=00` },
    });
    expect(res.statusCode).toBe(413);
    await res.body.dump();
    expect((await h.post(created("evt_small"))).status).toBe(200);
  });

  it("answers 405 to other methods, takes a signed body whatever its Content-Type, and leaves other paths alone", async () => {
    const h = await harness();
    const get = await request(h.url + PATH, { method: "GET" });
    expect(get.statusCode).toBe(405);
    expect(get.headers["allow"]).toBe("POST");
    await get.body.dump();
    expect((await h.post(created("evt_x"), { method: "PUT" })).status).toBe(405);
    // The spec names no Content-Type for deliveries: the signature and the bytes decide, not the label.
    expect((await h.post(created("evt_x"), { contentType: "text/plain" })).status).toBe(200);
    expect((await h.post(created("evt_w"), { contentType: null })).status).toBe(200);
    expect((await h.post(created("evt_v"), { contentType: "application/json; charset=utf-8" })).status).toBe(200);
    expect((await h.post(created("evt_u"), { contentType: "text/plain", secret: "whsec_wrong" })).status).toBe(401);
    expect((await h.post(created("evt_y"), { path: "/healthz" })).status).toBe(404);
    expect((await h.post(created("evt_z"), { path: `${PATH}?x=1` })).status).toBe(200);
  });

  it("keeps a correctly signed but malformed body in the dead letters and answers 200", async () => {
    const h = await harness();
    for (const body of [
      "not json",
      JSON.stringify({ type: "appointment.created" }),
      JSON.stringify({ id: "evt_nt" }),
    ]) {
      expect(await h.post(body, { raw: true })).toEqual({ status: 200, json: { received: true } });
    }
    expect((await h.post(JSON.stringify(event("evt_noapt", "appointment.updated")), { raw: true })).status).toBe(200);
    const dead = await collect(h.inbox.deadLetters());
    expect(dead).toHaveLength(4);
    expect(dead.map(([, d]) => d.reason).sort()).toEqual([
      "malformed: appointment.updated without data.object.id",
      "malformed: body is not JSON",
      "malformed: not a webhook event: id: Invalid input: expected string, received undefined",
      "malformed: not a webhook event: type: Invalid input: expected string, received undefined",
    ]);
    // Only the size of what came is kept, never the body.
    expect(dead.find(([, d]) => d.reason === "malformed: body is not JSON")?.[1]).toMatchObject({ bytes: 8 });
    expect(dead.every(([, d]) => !("body" in d))).toBe(true);
    expect(h.log.lines.filter((l) => l["level"] === 50 && l["dead_letter"])).toHaveLength(4);
    await h.processor!.idle();
    expect(h.sink.calls).toEqual([]);
  });

  it("takes a signed body that starts with a byte order mark, and a signature header that came twice", async () => {
    const h = await harness();
    // JSON.parse refuses a BOM; RFC 8259 (8.1) lets a parser ignore it. Signed as sent, BOM included.
    const bom = `\uFEFF${JSON.stringify(created("evt_bom"))}`;
    expect(await h.post(bom, { raw: true })).toEqual({ status: 200, json: { received: true } });
    // The header twice (a proxy, one line per secret while rotating) arrives joined by a comma: the same t= again.
    const payload = JSON.stringify(created("evt_twice", "apt_2"));
    const t = Math.floor(h.clock.now() / 1000);
    const twice = `${sign(payload, OLD_SECRET, t)}, ${sign(payload, SECRET, t)}`;
    expect((await h.post(payload, { raw: true, signature: twice })).status).toBe(200);
    // Two different timestamps are not one signature.
    const other = `${sign(payload, SECRET, t)}, ${sign(payload, SECRET, t - 1)}`;
    expect((await h.post(payload, { raw: true, signature: other })).status).toBe(400);
    await h.processor!.idle();
    expect(await collect(h.inbox.deadLetters())).toEqual([]);
    expect(h.sink.calls.map((c) => c.eventId).sort()).toEqual(["evt_bom", "evt_twice"]);
  });

  it("processes a signed event whose hint fields are null or odd, instead of setting it aside", async () => {
    const h = await harness();
    const bodies = [
      event(
        "evt_pa_null",
        "appointment.created",
        { id: "apt_1", status: "confirmed" },
        {
          data: { object: { id: "apt_1", status: "confirmed" }, previous_attributes: null },
        },
      ),
      event("evt_ca_null", "appointment.updated", { id: "apt_2" }, { created_at: null }),
      event(
        "evt_odd",
        "appointment.cancelled",
        { id: "apt_3" },
        {
          created_at: 1795338000,
          data: { object: { id: "apt_3", status: "cancelled" }, previous_attributes: "confirmed" },
        },
      ),
    ];
    for (const body of bodies) expect(await h.post(body)).toEqual({ status: 200, json: { received: true } });
    await h.processor!.idle();
    expect(await collect(h.inbox.deadLetters())).toEqual([]);
    expect(h.sink.calls.map((c) => [c.eventId, c.appointmentId])).toEqual([
      ["evt_pa_null", "apt_1"],
      ["evt_ca_null", "apt_2"],
      ["evt_odd", "apt_3"],
    ]);
  });

  it("answers 503 when the store fails (nothing acknowledged), and 200 once it is back", async () => {
    const h = await harness();
    h.flaky.failing = true;
    const res = await h.post(created("evt_503"));
    expect(res).toMatchObject({ status: 503, json: { error: "unavailable" } });
    expect(h.log.find((l) => l["level"] === 50 && l["event_id"] === "evt_503")?.["msg"]).toMatch(/store failed/);
    expect((await h.post("garbage", { raw: true })).status).toBe(503);
    h.flaky.failing = false;
    expect((await h.post(created("evt_503"))).json).toEqual({ received: true });
    await h.processor!.idle();
    expect(h.sink.calls.map((c) => c.eventId)).toEqual(["evt_503"]);
  });

  it("logs a fix-it hint when a configured secret has stray whitespace", async () => {
    const h = await harness({ handler: { secrets: [`${SECRET}\n`] } });
    expect(h.log.find((l) => String(l["msg"]).includes("whitespace"))).toMatchObject({ level: 40 });
    expect((await h.post(created("evt_ws"))).status).toBe(401);
    expect(h.log.find((l) => l["reason"] === "mismatch")?.["hint"]).toMatch(/#1 has leading or trailing whitespace/);
  });

  it("counts deliveries and processing in prometheus metrics", async () => {
    const h = await harness();
    await h.post(created("evt_1"));
    await h.post(created("evt_1"));
    await h.post(created("evt_2"), { signature: null });
    await h.post(created("evt_3"), { timestampSec: 1 });
    await h.post(event("evt_p", "payment.completed", { id: "pay_1" }));
    await h.processor!.idle();
    const text = await h.registry.metrics();
    expect(text).toContain('calbridge_webhooks_total{result="accepted"} 2');
    expect(text).toContain('calbridge_webhooks_total{result="duplicate"} 1');
    expect(text).toContain('calbridge_webhooks_total{result="rejected_signature"} 1');
    expect(text).toContain('calbridge_webhooks_total{result="rejected_stale"} 1');
    expect(text).toContain('calbridge_webhook_processing_total{type="appointment.created",result="ok"} 1');
    expect(text).toContain('calbridge_webhook_processing_total{type="payment.completed",result="ignored"} 1');
    expect(text).toContain("calbridge_webhook_response_seconds_count 3");
    expect(text).toContain("calbridge_inbox_pending 0");
  });
});
