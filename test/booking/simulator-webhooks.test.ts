// The simulator's webhook deliveries: signature, payload shapes, subscriptions, the retry schedule on a manual clock,
// disabling after 7 failed attempts, timeouts, test events, shutdown.
import { createHmac, timingSafeEqual } from "node:crypto";
import { createServer, type Server } from "node:http";
import type { AddressInfo } from "node:net";
import { Registry } from "prom-client";
import { afterEach, describe, expect, it } from "vitest";
import { BookingClient } from "../../src/booking/client.ts";
import { WebhookEvent } from "../../src/booking/schemas.ts";
import { type BookingSimulator, RETRY_DELAYS_MS, startBookingSimulator } from "../../src/simulator/booking/index.ts";
import { API_KEY, drive, SteppingClock, T0 } from "./support.ts";

const HOUR = 3_600_000;
const at = (h: number) => new Date(T0 + h * HOUR).toISOString();
const SECRET = "whsec_test_0123456789";

interface Received {
  body: string;
  signature: string;
}

let sim: BookingSimulator | undefined;
let receiver: Server | undefined;
afterEach(async () => {
  await sim?.close();
  sim = undefined;
  receiver?.closeAllConnections();
  await new Promise((r) => (receiver ? receiver.close(r) : r(undefined)));
  receiver = undefined;
});

/** A webhook receiver answering with the statuses in `plan` (then 200); "hang" never answers. */
async function listen(plan: (number | "hang")[] = []) {
  const received: Received[] = [];
  receiver = createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on("data", (c: Buffer) => chunks.push(c));
    req.on("end", () => {
      received.push({
        body: Buffer.concat(chunks).toString("utf8"),
        signature: String(req.headers["x-service-signature"]),
      });
      const next = plan.shift() ?? 200;
      if (next === "hang") return;
      res.writeHead(next, { "content-type": "text/plain" });
      res.end(next < 300 ? "ok" : "nope");
    });
  });
  await new Promise<void>((r) => receiver!.listen(0, "127.0.0.1", r));
  return { url: `http://127.0.0.1:${(receiver.address() as AddressInfo).port}/hooks`, received };
}

async function start(options: Parameters<typeof startBookingSimulator>[0] = {}) {
  const clock = new SteppingClock(T0);
  sim = await startBookingSimulator({ apiKey: API_KEY, clock, seed: 5, therapists: ["th_anna", "th_ben"], ...options });
  return { sim, clock };
}

/** Lets every scheduled retry happen by jumping the manual clock to each next one. */
async function runSchedule(s: BookingSimulator, clock: SteppingClock) {
  for (let i = 0; i < 20; i++) {
    await s.webhooksIdle();
    const next = clock.nextDeadline();
    if (next === undefined) return;
    await clock.advance(next - clock.now());
  }
}

function verify(r: Received, secret: string, nowSeconds: number): boolean {
  const m = /^t=(\d+),v1=([0-9a-f]{64})$/.exec(r.signature);
  if (!m) return false;
  const expected = createHmac("sha256", secret).update(`${m[1]}.${r.body}`).digest();
  const given = Buffer.from(m[2]!, "hex");
  return given.length === expected.length && timingSafeEqual(given, expected) && nowSeconds - Number(m[1]) <= 300;
}

describe("booking simulator: webhooks", () => {
  it("signs deliveries verifiably and sends the spec's payload shapes to subscribed endpoints", async () => {
    const { url, received } = await listen();
    const only = await listen();
    const { sim: s, clock } = await start();
    s.addWebhookEndpoint({ url, secret: SECRET, events: ["*"] });
    s.addWebhookEndpoint({ url: only.url, secret: "whsec_other_secret", events: ["appointment.cancelled"] });
    const a = s.create({
      therapist_id: "th_anna",
      start_time: at(30),
      customer: { name: "Eva", email: "eva@example.com" },
    });
    s.move(a.id as string, at(31));
    s.cancel(a.id as string, "ill");
    await runSchedule(s, clock);
    expect(received.length).toBe(4);
    for (const r of received) {
      expect(verify(r, SECRET, Math.floor(clock.now() / 1000))).toBe(true);
      expect(verify(r, "whsec_wrong_secret", Math.floor(clock.now() / 1000))).toBe(false);
      expect(WebhookEvent.safeParse(JSON.parse(r.body)).success).toBe(true);
    }
    const events = received.map((r) => JSON.parse(r.body));
    expect(events.map((e) => e.type).sort()).toEqual([
      "appointment.cancelled",
      "appointment.created",
      "appointment.updated",
      "customer.created",
    ]);
    const created = events.find((e) => e.type === "appointment.created");
    expect(Object.keys(created.data.object).sort()).toEqual(
      [
        "id",
        "service_id",
        "service_name",
        "customer_id",
        "customer_name",
        "customer_email",
        "therapist_id",
        "therapist_name",
        "start_time",
        "end_time",
        "status",
        "price",
        "currency",
      ].sort(),
    );
    expect(created.data.object.customer_email).toBe("eva@example.com");
    const cancelled = events.find((e) => e.type === "appointment.cancelled");
    expect(Object.keys(cancelled.data.object).sort()).toEqual(
      ["cancellation_reason", "cancelled_at", "id", "refund_amount", "status"].sort(),
    );
    expect(cancelled.data.previous_attributes).toEqual({ status: "confirmed" });
    expect(events.find((e) => e.type === "appointment.updated").data.object).toMatchObject({
      id: a.id,
      updated_at: expect.any(String),
    });
    // The second endpoint only subscribed to cancellations, signed with its own secret.
    expect(only.received.map((r) => JSON.parse(r.body).type)).toEqual(["appointment.cancelled"]);
    expect(verify(only.received[0]!, "whsec_other_secret", Math.floor(clock.now() / 1000))).toBe(true);
  });

  it("retries on the spec's schedule, scaled, and disables the endpoint after 7 failed attempts", async () => {
    const { url, received } = await listen([500, 500, 500, 500, 500, 500, 500]);
    const { sim: s, clock } = await start({ webhookTimeScale: 1 / 60_000 });
    const ep = s.addWebhookEndpoint({ url, secret: SECRET, events: ["appointment.created"], description: "calbridge" });
    s.create({ therapist_id: "th_anna", start_time: at(30) });
    await runSchedule(s, clock);
    expect(received.length).toBe(7);
    const d = s.deliveries[0]!;
    expect(d.state).toBe("failed");
    const offsets = d.attempts.map((x) => Date.parse(x.at) - T0);
    let sum = 0;
    expect(offsets).toEqual(RETRY_DELAYS_MS.map((ms) => (sum += ms / 60_000)));
    expect(d.attempts.every((x) => x.status === 500 && x.responseBody === "nope")).toBe(true);
    // Same event id every time: receivers dedupe on it.
    expect(new Set(received.map((r) => JSON.parse(r.body).id)).size).toBe(1);
    expect(s.webhookEndpoints()[0]!.enabled).toBe(false);
    const client = new BookingClient({
      baseUrl: s.url,
      apiKey: API_KEY,
      requestsPerMinute: 60,
      clock,
      registry: new Registry(),
    });
    const hooks = await drive(clock, client.listWebhooks());
    expect(hooks).toEqual([
      { id: ep.id, url, events: ["appointment.created"], enabled: false, description: "calbridge" },
    ]);
    // Disabled: nothing more is sent, until re-enabled in the "dashboard".
    s.create({ therapist_id: "th_anna", start_time: at(40) });
    await runSchedule(s, clock);
    expect(received.length).toBe(7);
    s.setWebhookEndpointEnabled(ep.id, true);
    s.create({ therapist_id: "th_anna", start_time: at(44) });
    await runSchedule(s, clock);
    expect(received.length).toBe(8);
    expect(s.deliveries.at(-1)!.state).toBe("delivered");
  });

  it("counts unanswered deliveries (timeout) and refused connections as failures, and delivers once it recovers", async () => {
    const { url, received } = await listen(["hang", 503]);
    const { sim: s, clock } = await start({ webhookTimeoutMs: 50 });
    s.addWebhookEndpoint({ url, secret: SECRET, events: ["*"] });
    s.addWebhookEndpoint({ url: "http://127.0.0.1:1/closed", secret: SECRET, events: ["*"] });
    s.create({ therapist_id: "th_anna", start_time: at(30) });
    await s.webhooksIdle();
    await clock.advance(60_000);
    await s.webhooksIdle();
    await clock.advance(300_000);
    await s.webhooksIdle();
    const [ok, closed] = s.deliveries;
    expect(ok!.attempts.map((x) => x.error ?? x.status)).toEqual(["timeout", 503, 200]);
    expect(ok!.state).toBe("delivered");
    expect(received.length).toBe(3);
    expect(closed!.attempts.length).toBe(3);
    expect(closed!.attempts.every((x) => x.status === undefined && x.error)).toBe(true);
    expect(closed!.state).toBe("pending");
  });

  it("sends signed test events, objects or raw strings", async () => {
    const { url, received } = await listen();
    const { sim: s, clock } = await start();
    const ep = s.addWebhookEndpoint({ url, secret: SECRET, events: ["appointment.no_show"] });
    s.sendEvent({ type: "appointment.no_show", data: { object: { id: "apt_x", status: "no_show" } } });
    s.sendEvent('{"id":"evt_raw","type":"payment.failed","data":{"object":{}}}', { endpointId: ep.id });
    await s.webhooksIdle();
    expect(received.length).toBe(2);
    const first = JSON.parse(received[0]!.body);
    expect(first).toMatchObject({
      id: expect.stringMatching(/^evt_test_/),
      type: "appointment.no_show",
      created_at: expect.any(String),
    });
    expect(received[1]!.body).toBe('{"id":"evt_raw","type":"payment.failed","data":{"object":{}}}');
    for (const r of received) expect(verify(r, SECRET, Math.floor(clock.now() / 1000))).toBe(true);
  });

  it("stops pending retries on close", async () => {
    const { url } = await listen([500]);
    const { sim: s, clock } = await start();
    s.addWebhookEndpoint({ url, secret: SECRET, events: ["*"] });
    s.create({ therapist_id: "th_anna", start_time: at(30) });
    await s.webhooksIdle();
    expect(clock.waiting).toBe(1);
    await s.close();
    sim = undefined;
    expect(clock.waiting).toBe(0);
    expect(s.deliveries[0]!.state).toBe("stopped");
  });
});
