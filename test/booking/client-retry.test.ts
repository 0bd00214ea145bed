// Retry rules: reads resent on 5xx/network/timeouts (bounded), idempotent PATCH resent, cancel verified by GET
// instead of being sent twice, creates never resent after an ambiguous failure.
import { afterEach, describe, expect, it } from "vitest";
import type { BookingClientOptions } from "../../src/booking/client.ts";
import { BookingApiError } from "../../src/booking/errors.ts";
import { collect, drive, type Pair, startPair, T0 } from "./support.ts";

const HOUR = 3_600_000;
const at = (h: number) => new Date(T0 + h * HOUR).toISOString();

let pair: Pair | undefined;
afterEach(async () => {
  await pair?.close();
  pair = undefined;
});

async function setup(client: Partial<BookingClientOptions> = {}) {
  pair = await startPair({ sim: { therapists: ["th_anna", "th_ben"] }, client });
  const a = pair.sim.create({ therapist_id: "th_anna", start_time: at(50) });
  return { ...pair, id: a.id as string };
}

const count = (p: Pair, route: string) => p.sim.requests.filter((r) => r.route === route).length;

describe("retries", () => {
  it("retries a read on 5xx with backoff on the clock (no real sleeping) and succeeds", async () => {
    const { sim, client, clock, id } = await setup();
    sim.faults.failNext(2, 503);
    const started = Date.now();
    const a = await drive(clock, client.getAppointment(id));
    expect(a.id).toBe(id);
    expect(count(pair!, "GET /v1/appointments/:id")).toBe(3);
    const s = client.stats();
    expect(s).toMatchObject({ retries: 2, byStatusClass: { "5xx": 2, "2xx": 1 } });
    expect(s.backoffMs).toBeGreaterThan(0);
    expect(Date.now() - started).toBeLessThan(s.backoffMs + 1_000);
  });

  it("gives up after maxRetries + 1 attempts with the last transient error", async () => {
    const { sim, client, clock, id } = await setup({ maxRetries: 4 });
    sim.faults.failNext(10, 500);
    const e = (await drive(clock, client.getAppointment(id)).catch((x: unknown) => x)) as BookingApiError;
    expect(e).toBeInstanceOf(BookingApiError);
    expect(e).toMatchObject({ kind: "transient", status: 500, code: "internal_error" });
    expect(count(pair!, "GET /v1/appointments/:id")).toBe(5);
  });

  it("never retries a 4xx other than 429", async () => {
    const { sim, client, clock, id } = await setup();
    sim.faults.failNext(1, 400);
    await expect(drive(clock, client.getAppointment(id))).rejects.toMatchObject({ status: 400 });
    expect(count(pair!, "GET /v1/appointments/:id")).toBe(1);
  });

  it("lists completely through a 30% error rate", async () => {
    const { sim, client, clock } = await setup({ maxRetries: 8 });
    sim.seed({ therapists: ["th_anna"], count: 1_000, from: T0, to: T0 + 60 * 24 * HOUR });
    sim.faults.errorRate = 0.3;
    const items = await drive(clock, collect(client.listAppointments({})));
    expect(new Set(items.map((a) => a.id)).size).toBe(1_001);
    expect(sim.stats().byStatus["503"]).toBeGreaterThan(0);
  });

  it("times out a slow answer, retries reads, and reports code timeout", async () => {
    const { sim, client, clock, id } = await setup({ timeoutMs: 60, maxRetries: 1 });
    sim.faults.latencyMs = 250;
    await expect(drive(clock, client.getAppointment(id))).rejects.toMatchObject({ code: "timeout", kind: "transient" });
    expect(client.stats().byStatusClass.timeout).toBe(2);
  });

  it("resends an idempotent PATCH after a lost answer: one change, one event", async () => {
    const { sim, client, clock, id } = await setup();
    sim.faults.dropResponseNext(1, { method: "PATCH" });
    const a = await drive(clock, client.patchAppointment(id, { start_time: at(52), notes: "moved" }));
    expect(a).toMatchObject({ id, start_time: at(52).replace(".000Z", "Z"), notes: "moved" });
    expect(count(pair!, "PATCH /v1/appointments/:id")).toBe(2);
    expect(sim.get(id)).toMatchObject({
      start_time: at(52).replace(".000Z", "Z"),
      end_time: at(53).replace(".000Z", "Z"),
    });
    expect(sim.events.filter((e) => e.type === "appointment.updated").length).toBe(1);
  });

  it("resends a PATCH after a 503", async () => {
    const { sim, client, clock, id } = await setup();
    sim.faults.failNext(1, 503, { method: "PATCH" });
    await drive(clock, client.patchAppointment(id, { therapist_id: "th_ben" }));
    expect(count(pair!, "PATCH /v1/appointments/:id")).toBe(2);
    expect(sim.get(id)?.therapist_id).toBe("th_ben");
  });

  it("confirms a cancel whose answer was lost with a GET and does not send it twice", async () => {
    const { sim, client, clock, id } = await setup();
    sim.faults.dropResponseNext(1, { method: "POST", path: `/v1/appointments/${id}/cancel` });
    const a = await drive(clock, client.cancelAppointment(id, { reason: "therapist ill" }));
    expect(a).toMatchObject({ id, status: "cancelled", cancellation_reason: "therapist ill" });
    expect(count(pair!, "POST /v1/appointments/:id/cancel")).toBe(1);
    expect(count(pair!, "GET /v1/appointments/:id")).toBe(1);
    expect(sim.events.filter((e) => e.type === "appointment.cancelled").length).toBe(1);
  });

  it("sends the cancel again when the GET shows it was not applied (a 503 before processing)", async () => {
    const { sim, client, clock, id } = await setup();
    sim.faults.failNext(1, 503, { method: "POST" });
    const a = await drive(clock, client.cancelAppointment(id, {}));
    expect(a.status).toBe("cancelled");
    expect(count(pair!, "POST /v1/appointments/:id/cancel")).toBe(2);
    expect(count(pair!, "GET /v1/appointments/:id")).toBe(1);
  });

  it("confirms a cancel answered with a malformed 2xx body by GET instead of failing", async () => {
    const { sim, client, clock, id } = await setup();
    sim.faults.malformedNext(1, { match: { method: "POST" } });
    const a = await drive(clock, client.cancelAppointment(id, {}));
    expect(a.status).toBe("cancelled");
    expect(count(pair!, "POST /v1/appointments/:id/cancel")).toBe(1);
  });

  it("takes no yes for a change the answer contradicts: looks again, and reports not_applied when it is not there", async () => {
    const { sim, client, clock, id } = await setup();
    const before = sim.get(id)!;
    // A cancel answered 200 with the appointment still confirmed, and a PATCH answered 200 with the old start.
    sim.faults.ignoreNext(1, { match: { method: "POST" } });
    const cancel = await drive(clock, client.cancelAppointment(id, {})).catch((e: unknown) => e);
    expect(cancel).toMatchObject({ code: "not_applied", kind: "rejected" });
    sim.faults.ignoreNext(1, { status: 202, match: { method: "PATCH" } });
    const patch = await drive(clock, client.patchAppointment(id, { start_time: at(30) })).catch((e: unknown) => e);
    expect(patch).toMatchObject({ code: "not_applied", kind: "rejected" });
    expect(sim.get(id)).toMatchObject({ status: "confirmed", start_time: before.start_time });
    // Each was sent once and looked at once.
    expect(count(pair!, "POST /v1/appointments/:id/cancel")).toBe(1);
    expect(count(pair!, "PATCH /v1/appointments/:id")).toBe(1);
    expect(count(pair!, "GET /v1/appointments/:id")).toBe(2);
  });

  it("reports a yes it cannot read nor check as unconfirmed_success, never as a failure to apply", async () => {
    const { sim, client, clock, id } = await setup();
    // Processed, answered 204 without a body; every GET that would confirm it fails.
    sim.faults.malformedNext(1, { status: 204, body: "", match: { method: "POST" } });
    sim.faults.failNext(10, 503, { method: "GET" });
    const e = await drive(clock, client.cancelAppointment(id, {})).catch((x: unknown) => x);
    expect(e).toMatchObject({ code: "unconfirmed_success", status: 204 });
    expect((e as BookingApiError).kind).not.toBe("rejected");
    expect(sim.get(id)!.status).toBe("cancelled");
    expect(count(pair!, "POST /v1/appointments/:id/cancel")).toBe(1);
  });

  it("checks a status PATCH with a GET after a lost answer", async () => {
    const { sim, client, clock, id } = await setup();
    sim.faults.dropResponseNext(1, { method: "PATCH" });
    const a = await drive(clock, client.patchAppointment(id, { status: "completed" }));
    expect(a.status).toBe("completed");
    expect(count(pair!, "PATCH /v1/appointments/:id")).toBe(1);
  });

  it("never resends a create after an ambiguous failure", async () => {
    const { sim, client, clock } = await setup();
    sim.faults.dropResponseNext(1, { method: "POST", path: "/v1/appointments" });
    const body = { service_id: "svc_massage_60", start_time: at(28), customer: { name: "A", email: "a@example.com" } };
    await expect(drive(clock, client.createAppointment(body))).rejects.toMatchObject({ code: "network_error" });
    expect(count(pair!, "POST /v1/appointments")).toBe(1);
  });

  it("stops waiting for a retry when the caller aborts", async () => {
    const { sim, client, clock, id } = await setup();
    sim.faults.failNext(10, 503);
    const ac = new AbortController();
    const p = client.getAppointment(id, { signal: ac.signal });
    p.catch(() => {});
    // The clock is not driven: the first retry's backoff sleeps on it until aborted.
    while (clock.nextDeadline() === undefined) await new Promise((r) => setTimeout(r, 2));
    ac.abort(new Error("shutting down"));
    await expect(p).rejects.toThrow("shutting down");
    const sent = count(pair!, "GET /v1/appointments/:id");
    await new Promise((r) => setTimeout(r, 20));
    expect(count(pair!, "GET /v1/appointments/:id")).toBe(sent);
  });
});

/**
 * A booking service where the first write is held past the client's timeout and lands only later: the answer the
 * resend gets (refused, because the first one is applied by then) must not be reported as the outcome.
 */
async function lateWriteServer(opts: { landOn: "get" | "resend" }) {
  const { createServer } = await import("node:http");
  const appt = { id: "apt_late", therapist_id: "th_anna", start_time: at(50), end_time: at(51), status: "confirmed" };
  const held: (() => void)[] = [];
  let pending: (() => void) | undefined;
  const seen: string[] = [];
  const server = createServer((req, res) => {
    let body = "";
    req.on("data", (c: Buffer) => {
      body += c.toString();
    });
    req.on("end", () => {
      const send = (status: number, json: unknown) => {
        res.writeHead(status, { "content-type": "application/json" });
        res.end(JSON.stringify(json));
      };
      const writes = seen.filter((s) => s !== "GET").length;
      seen.push(req.method ?? "");
      if (req.method === "GET") {
        send(200, { data: { ...appt } });
        if (opts.landOn === "get") pending?.();
        return;
      }
      const change =
        req.method === "PATCH" ? () => Object.assign(appt, JSON.parse(body)) : () => (appt.status = "cancelled");
      if (writes === 0) {
        // Held: the client times out; the change lands later.
        pending = () => {
          pending = undefined;
          change();
        };
        held.push(() => res.destroy());
        return;
      }
      if (opts.landOn === "resend") pending?.();
      if (req.method === "POST" && appt.status === "cancelled") {
        return send(409, { error: { code: "invalid_state", message: "appointment is already cancelled" } });
      }
      if (req.method === "PATCH") {
        // The slot is taken: by this very appointment, moved there by the first PATCH.
        return send(409, { error: { code: "slot_unavailable", message: "the slot is not available" } });
      }
      change();
      send(200, { data: { ...appt } });
    });
  });
  await new Promise<void>((r) => server.listen(0, "127.0.0.1", r));
  const port = (server.address() as { port: number }).port;
  return {
    url: `http://127.0.0.1:${port}`,
    appt,
    seen,
    close: async () => {
      for (const h of held) h();
      server.closeAllConnections();
      await new Promise<void>((r) => server.close(() => r()));
    },
  };
}

describe("a write that lands after its timeout", () => {
  async function client(url: string) {
    const { BookingClient } = await import("../../src/booking/client.ts");
    const { SteppingClock } = await import("./support.ts");
    const { Registry } = await import("prom-client");
    const clock = new SteppingClock(T0);
    const c = new BookingClient({
      baseUrl: url,
      apiKey: "sk_test_late_0000",
      requestsPerMinute: 600,
      timeoutMs: 150,
      clock,
      registry: new Registry(),
    });
    return { c, clock };
  }

  it("reports a cancel as done when it landed just after the check, and the resend is refused", async () => {
    const srv = await lateWriteServer({ landOn: "get" });
    try {
      const { c, clock } = await client(srv.url);
      const a = await drive(clock, c.cancelAppointment("apt_late", { reason: "ill" }));
      expect(a.status).toBe("cancelled");
      // timeout, look (still confirmed), resend (refused: already cancelled), look again (cancelled)
      expect(srv.seen).toEqual(["POST", "GET", "POST", "GET"]);
    } finally {
      await srv.close();
    }
  });

  it("reports a move as done when the first PATCH landed and the resend is refused as slot taken", async () => {
    const srv = await lateWriteServer({ landOn: "resend" });
    try {
      const { c, clock } = await client(srv.url);
      const a = await drive(clock, c.patchAppointment("apt_late", { start_time: at(53) }));
      expect(Date.parse(a.start_time!)).toBe(Date.parse(at(53)));
      expect(srv.seen).toEqual(["PATCH", "PATCH", "GET"]);
    } finally {
      await srv.close();
    }
  });

  it("still reports a refusal when the change is not there", async () => {
    const srv = await lateWriteServer({ landOn: "get" });
    try {
      const { c, clock } = await client(srv.url);
      // The held PATCH never lands (nothing triggers it for a PATCH resend refused before it): the refusal stands.
      const e = await drive(clock, c.patchAppointment("apt_late", { start_time: at(55) })).catch((x: unknown) => x);
      expect(e).toBeInstanceOf(BookingApiError);
      expect(e).toMatchObject({ code: "slot_unavailable", kind: "rejected" });
      expect(srv.seen).toEqual(["PATCH", "PATCH", "GET"]);
    } finally {
      await srv.close();
    }
  });
});
