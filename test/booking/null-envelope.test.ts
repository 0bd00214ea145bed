// Tests null in the booking API's envelope fields outside `data`. The spec types meta's fields as integers and
// request_id and error.message as strings; a service that sends null there (one that does not count its matches, a
// request without an id) had every listing refused whole as invalid_response, and with it every reconciliation and
// every read. An error whose message was null lost its code: a 409 slot_unavailable was no longer a refusal.
import { createServer, type IncomingMessage, type ServerResponse } from "node:http";
import type { AddressInfo } from "node:net";
import { Registry } from "prom-client";
import { afterEach, describe, expect, it } from "vitest";
import { BookingClient } from "../../src/booking/client.ts";
import { BookingApiError } from "../../src/booking/errors.ts";
import { ManualClock } from "../../src/clock.ts";

const T0 = Date.UTC(2026, 10, 22, 9, 0, 0);
const appt = {
  id: "apt_1",
  therapist_id: "th_1",
  start_time: "2026-11-23T10:00:00Z",
  end_time: "2026-11-23T11:00:00Z",
  status: "confirmed",
};

let close: (() => Promise<void>) | undefined;
afterEach(async () => {
  await close?.();
  close = undefined;
});

async function serve(handler: (req: IncomingMessage, res: ServerResponse) => void): Promise<BookingClient> {
  const server = createServer(handler);
  await new Promise<void>((r) => server.listen(0, "127.0.0.1", r));
  close = async () => {
    server.closeAllConnections();
    await new Promise<void>((r) => server.close(() => r()));
  };
  return new BookingClient({
    baseUrl: `http://127.0.0.1:${(server.address() as AddressInfo).port}`,
    apiKey: "k",
    requestsPerMinute: 600,
    maxRetries: 0,
    clock: new ManualClock(T0),
    registry: new Registry(),
  });
}

const json = (res: ServerResponse, status: number, body: unknown) => {
  res.writeHead(status, { "content-type": "application/json" });
  res.end(JSON.stringify(body));
};

async function settle<T>(p: Promise<T>): Promise<{ ok: true; value: T } | { ok: false; error: unknown }> {
  return p.then(
    (value) => ({ ok: true as const, value }),
    (error: unknown) => ({ ok: false as const, error }),
  );
}

describe("null in envelope fields", () => {
  it("lists appointments when meta.total and meta.total_pages are null", async () => {
    const client = await serve((_req, res) =>
      json(res, 200, { data: [appt], meta: { page: 1, per_page: 100, total: null, total_pages: null } }),
    );
    const out: unknown[] = [];
    const r = await settle(
      (async () => {
        for await (const a of client.listAppointments({})) out.push(a);
      })(),
    );
    expect(r.ok ? "ok" : String(r.error)).toBe("ok");
    expect(out).toHaveLength(1);
  });

  it("reads an appointment whose answer carries meta.request_id null", async () => {
    const client = await serve((_req, res) => json(res, 200, { data: appt, meta: { request_id: null } }));
    const r = await settle(client.getAppointment("apt_1"));
    expect(r.ok ? "ok" : String(r.error)).toBe("ok");
  });

  it("keeps the error code of an error envelope whose message is null (a refusal stays a refusal)", async () => {
    const client = await serve((_req, res) =>
      json(res, 409, { error: { code: "slot_unavailable", message: null, details: { field: "start_time" } } }),
    );
    const r = await settle(client.patchAppointment("apt_1", { start_time: "2026-11-23T12:00:00Z" }));
    expect(r.ok).toBe(false);
    const e = (r as { error: BookingApiError }).error;
    expect(e).toBeInstanceOf(BookingApiError);
    expect({ code: e.code, kind: e.kind }).toEqual({ code: "slot_unavailable", kind: "rejected" });
  });
});
