// Every way a call can fail, as a BookingApiError with code, kind, status, details and request id; no API key leaks.
import { createServer } from "node:http";
import type { AddressInfo } from "node:net";
import { Registry } from "prom-client";
import { afterEach, describe, expect, it } from "vitest";
import { BookingClient } from "../../src/booking/client.ts";
import { BookingApiError, classify } from "../../src/booking/errors.ts";
import { captureLog } from "../support/log-capture.ts";
import { API_KEY, drive, type Pair, startPair, T0 } from "./support.ts";

const HOUR = 3_600_000;
const at = (hoursFromT0: number) => new Date(T0 + hoursFromT0 * HOUR).toISOString();
const customer = { name: "Eva Example", email: "eva@example.com" };

let pair: Pair | undefined;
afterEach(async () => {
  await pair?.close();
  pair = undefined;
});

async function failure(p: Promise<unknown>): Promise<BookingApiError> {
  const e = await p.then(
    () => undefined,
    (x: unknown) => x,
  );
  expect(e).toBeInstanceOf(BookingApiError);
  return e as BookingApiError;
}

describe("error mapping", () => {
  it("classifies by error.code first, then by HTTP status", () => {
    expect(classify("customer_blocked", 403)).toBe("rejected");
    expect(classify("service_not_found", 404)).toBe("rejected");
    expect(classify("invalid_request", 400)).toBe("invalid_request");
    expect(classify("whatever", 401)).toBe("auth");
    expect(classify("whatever", 403)).toBe("auth");
    expect(classify("not_found", 404)).toBe("not_found");
    expect(classify("appointment_not_found", 404)).toBe("not_found");
    // A 404 whose code names something else (an API version, a route) says nothing of the appointment.
    expect(classify("api_version_not_found", 404)).toBe("unknown");
    expect(classify("whatever", 404)).toBe("unknown");
    // A 404 without the service's envelope (a proxy's page) is no word from the service that anything is gone.
    expect(classify("not_found_unverified", 404)).toBe("transient");
    expect(classify("whatever", 429)).toBe("rate_limited");
    expect(classify("whatever", 503)).toBe("transient");
    expect(classify("network_error", undefined)).toBe("transient");
    expect(classify("timeout", undefined)).toBe("transient");
    expect(classify("invalid_state", 409)).toBe("unknown");
    // A rate limit is said by its code whatever the status (the spec shows neither): never a credentials failure.
    expect(classify("rate_limited", 403)).toBe("rate_limited");
    expect(classify("rate_limited", 401)).toBe("rate_limited");
    expect(classify("rate_limit_exceeded", 400)).toBe("rate_limited");
    expect(classify("rate_limit_exceeded", 503)).toBe("rate_limited");
    expect(classify("rate_limited", undefined)).toBe("rate_limited");
    expect(new BookingApiError({ code: "rate_limited", message: "slow down", status: 403 }).retryable).toBe(true);
    const e = new BookingApiError({ code: "timeout", message: "slow" });
    expect(e.retryable).toBe(true);
    expect(new BookingApiError({ code: "slot_unavailable", message: "x", status: 409 }).retryable).toBe(false);
  });

  it("maps each of the spec's error codes with its details, status and request id", async () => {
    const log = captureLog("debug");
    pair = await startPair({ sim: { therapists: ["th_anna", "th_ben"] }, client: { logger: log.logger } });
    const { client, sim, clock } = pair;
    const booked = await drive(
      clock,
      client.createAppointment({ service_id: "svc_massage_60", therapist_id: "th_anna", start_time: at(25), customer }),
    );
    expect(booked).toMatchObject({ status: "confirmed", therapist_id: "th_anna" });

    const cases: [string, () => Promise<unknown>, number][] = [
      // @ts-expect-error service_id deliberately missing
      ["invalid_request", () => client.createAppointment({ start_time: at(25), customer }), 400],
      [
        "service_not_found",
        () => client.createAppointment({ service_id: "svc_nope", start_time: at(25), customer }),
        404,
      ],
      [
        "therapist_unavailable",
        () =>
          client.createAppointment({
            service_id: "svc_massage_60",
            therapist_id: "th_anna",
            start_time: at(15 + 24),
            customer,
          }),
        409,
      ],
      [
        "slot_unavailable",
        () =>
          client.createAppointment({
            service_id: "svc_massage_60",
            therapist_id: "th_anna",
            start_time: at(25.5),
            customer,
          }),
        409,
      ],
      [
        "past_booking",
        () => client.createAppointment({ service_id: "svc_massage_60", start_time: at(-2), customer }),
        422,
      ],
      [
        "customer_blocked",
        () =>
          client.createAppointment({
            service_id: "svc_massage_60",
            start_time: at(26),
            customer: { name: "B", email: "blocked@example.com" },
          }),
        403,
      ],
    ];
    for (const [code, call, status] of cases) {
      const e = await failure(drive(clock, call()));
      expect(e.code).toBe(code);
      expect(e.status).toBe(status);
      expect(e.kind).toBe(code === "invalid_request" ? "invalid_request" : "rejected");
      expect(e.retryable).toBe(false);
      expect(e.requestId).toMatch(/^req_/);
      expect(sim.requests.some((r) => r.requestId === e.requestId && r.status === status)).toBe(true);
    }
    const invalid = await failure(
      // @ts-expect-error service_id deliberately missing
      drive(clock, client.createAppointment({ start_time: at(25), customer })),
    );
    expect(invalid.details).toEqual({ field: "service_id" });
    // None was retried: 4xx other than 429 are final.
    expect(client.stats().retries).toBe(0);
    expect(log.raw.join("\n")).not.toContain(API_KEY);
  });

  it("maps 401, 404 and unknown codes (message kept)", async () => {
    pair = await startPair({ sim: { therapists: ["th_anna"] } });
    const { sim, clock } = pair;
    const wrong = new BookingClient({
      baseUrl: sim.url,
      apiKey: "sk_wrong_key_000000",
      requestsPerMinute: 100,
      clock,
      registry: new Registry(),
    });
    const auth = await failure(drive(clock, wrong.listServices()));
    expect(auth).toMatchObject({ code: "unauthorized", kind: "auth", status: 401, retryable: false });
    expect(sim.requests.length).toBe(1);
    expect(auth.message).not.toContain("sk_wrong_key_000000");

    const nf = await failure(drive(clock, pair.client.getAppointment("apt_missing")));
    expect(nf).toMatchObject({ code: "not_found", kind: "not_found", status: 404 });

    const a = sim.create({ therapist_id: "th_anna", start_time: at(48) });
    await drive(clock, pair.client.cancelAppointment(a.id as string, { reason: "x" }));
    const again = await failure(drive(clock, pair.client.cancelAppointment(a.id as string, {})));
    expect(again).toMatchObject({ code: "invalid_state", kind: "unknown", status: 409 });
    expect(again.message).toContain("already cancelled");
    expect(again.details).toEqual({ status: "cancelled" });
  });

  it("does not take a 404 without the error envelope (a proxy's HTML page) for a missing appointment", async () => {
    const requests: string[] = [];
    const proxy = createServer((req, res) => {
      requests.push(`${req.method} ${req.url}`);
      res.writeHead(404, { "content-type": "text/html" });
      res.end("<html><body>404 Not Found (default backend)</body></html>");
    });
    await new Promise<void>((r) => proxy.listen(0, "127.0.0.1", r));
    try {
      const { SteppingClock } = await import("./support.ts");
      const clock = new SteppingClock(T0);
      const client = new BookingClient({
        baseUrl: `http://127.0.0.1:${(proxy.address() as AddressInfo).port}`,
        apiKey: API_KEY,
        requestsPerMinute: 100,
        maxRetries: 1,
        clock,
        registry: new Registry(),
      });
      const e = await failure(drive(clock, client.getAppointment("apt_1")));
      expect(e).toMatchObject({ code: "not_found_unverified", kind: "transient", status: 404, retryable: true });
      expect(e.message).toContain("not taken to mean the appointment is gone");
      expect(e.details.body).toContain("default backend");
      // Retried like an outage.
      expect(requests).toEqual(["GET /v1/appointments/apt_1", "GET /v1/appointments/apt_1"]);
    } finally {
      proxy.closeAllConnections();
      await new Promise<void>((r) => proxy.close(() => r()));
    }
  });

  it("believes 'appointment not found' only while the connection test answers (a wrong base address deletes nothing)", async () => {
    pair = await startPair({ sim: { therapists: ["th_anna"] } });
    const { sim, clock } = pair;
    const gone = await failure(drive(clock, pair.client.getAppointment("apt_missing")));
    expect(gone).toMatchObject({ code: "not_found", kind: "not_found" });
    const again = await failure(drive(clock, pair.client.getAppointment("apt_missing_too")));
    expect(again).toMatchObject({ code: "not_found", kind: "not_found" });
    // One connection test for both: a success is trusted for a minute.
    expect(sim.requests.filter((r) => r.route === "GET /v1/services")).toHaveLength(1);

    // Behind a base address the service does not serve, every path answers the service's own 404 envelope.
    const misrouted = new BookingClient({
      baseUrl: `${sim.url}/v0`,
      apiKey: API_KEY,
      requestsPerMinute: 100,
      maxRetries: 1,
      clock,
      registry: new Registry(),
    });
    const lost = await failure(drive(clock, misrouted.getAppointment("apt_1")));
    expect(lost).toMatchObject({ code: "not_found_unverified", kind: "transient", retryable: true });
    expect(lost.message).toContain("an outage, not a deleted appointment");

    // A 404 whose code speaks of something else: not gone either.
    sim.faults.refuseNext(1, "api_version_not_found", { status: 404, match: { method: "GET" } });
    const version = await failure(drive(clock, pair.client.getAppointment("apt_missing")));
    expect(version).toMatchObject({ code: "api_version_not_found", kind: "unknown" });
  });

  it("turns malformed bodies into invalid_response with the status, never a crash", async () => {
    pair = await startPair({ sim: { therapists: ["th_anna"] } });
    const { sim, clock, client } = pair;
    const a = sim.create({ therapist_id: "th_anna", start_time: at(30) });
    sim.faults.malformedNext(1);
    const html = await failure(drive(clock, client.getAppointment(a.id as string)));
    expect(html).toMatchObject({ code: "invalid_response", status: 200, kind: "unknown" });
    expect(String(html.details.body)).toContain("Bad Gateway");

    sim.faults.malformedNext(1, { body: JSON.stringify({ data: { no_id: true } }) });
    const shape = await failure(drive(clock, client.getAppointment(a.id as string)));
    expect(shape).toMatchObject({ code: "invalid_response", status: 200 });
    expect(shape.message).toContain("data.id");

    // A non-JSON 5xx (a proxy's page) is a server_error: transient, so a read retries and then succeeds.
    sim.faults.malformedNext(1, { status: 502 });
    const ok = await drive(clock, client.getAppointment(a.id as string));
    expect(ok.id).toBe(a.id);
    expect(client.stats().retries).toBe(1);
  });

  it("keeps the API key out of messages, details and log lines even when a server echoes it", async () => {
    const server = createServer((req, res) => {
      res.writeHead(400, { "content-type": "application/json" });
      const auth = String(req.headers.authorization);
      res.end(JSON.stringify({ error: { code: "bad_key", message: `rejected ${auth}`, details: { got: auth } } }));
    });
    await new Promise<void>((r) => server.listen(0, "127.0.0.1", r));
    const log = captureLog("debug");
    try {
      const client = new BookingClient({
        baseUrl: `http://127.0.0.1:${(server.address() as AddressInfo).port}/`,
        apiKey: API_KEY,
        requestsPerMinute: 100,
        logger: log.logger,
        registry: new Registry(),
      });
      const e = await failure(client.getAppointment("apt_1"));
      expect(e.code).toBe("bad_key");
      const everything = [e.message, JSON.stringify(e), JSON.stringify(e.details), String(e.stack), ...log.raw].join(
        "\n",
      );
      expect(everything).not.toContain(API_KEY);
      expect(e.message).toContain("[REDACTED]");
      log.logger.error({ err: e }, "call failed");
      expect(log.raw.join("\n")).not.toContain(API_KEY);
    } finally {
      server.closeAllConnections();
      await new Promise((r) => server.close(r));
    }
  });
});
