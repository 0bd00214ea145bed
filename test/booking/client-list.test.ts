// The client's list walking against the simulator: page counts, filters, drifting pages, missing meta.
import { createServer } from "node:http";
import type { AddressInfo } from "node:net";
import { Registry } from "prom-client";
import { afterEach, describe, expect, it } from "vitest";
import { BookingClient } from "../../src/booking/client.ts";
import { captureLog } from "../support/log-capture.ts";
import { API_KEY, collect, drive, type Pair, startPair, T0 } from "./support.ts";

const DAY = 86_400_000;
let pair: Pair | undefined;
afterEach(async () => {
  await pair?.close();
  pair = undefined;
});

/**
 * What the window keeps (as Google's timeMin/timeMax listing keeps an event): an appointment that starts by the
 * window's end and ends after its start.
 */
function overlaps(a: Record<string, unknown>, from: number, to: number): boolean {
  const start = Date.parse(a.start_time as string);
  const end = Date.parse((a.end_time ?? a.start_time) as string);
  return start <= to && (end > from || start >= from);
}

describe("listAppointments", () => {
  it("walks 1,234 appointments in exactly ceil(N/100) requests and yields every id once", async () => {
    pair = await startPair();
    const ids = pair.sim.seed({
      therapists: ["th_anna", "th_ben", "th_carla"],
      count: 1_234,
      from: T0,
      to: T0 + 60 * DAY,
    });
    const items = await drive(pair.clock, collect(pair.client.listAppointments({})));
    expect(items.length).toBe(1_234);
    expect(new Set(items.map((a) => a.id))).toEqual(new Set(ids));
    const lists = pair.sim.requests.filter((r) => r.route === "GET /v1/appointments");
    expect(lists.length).toBe(13);
    for (const r of lists) expect(new URLSearchParams(r.query).get("per_page")).toBe("100");
    expect(pair.client.stats()).toMatchObject({ requests: 13, retries: 0, rateLimited: 0 });
  });

  it("sends the filters as query parameters and gets exactly the matching appointments", async () => {
    pair = await startPair();
    pair.sim.seed({ therapists: ["th_anna", "th_ben"], count: 400, from: T0 - 10 * DAY, to: T0 + 20 * DAY });
    const all = pair.sim.all();
    const from = new Date(T0).toISOString();
    const to = new Date(T0 + 7 * DAY).toISOString();
    const got = await drive(
      pair.clock,
      collect(
        pair.client.listAppointments({ therapistId: "th_anna", status: "confirmed", dateFrom: from, dateTo: to }),
      ),
    );
    const want = all.filter(
      (a) => a.therapist_id === "th_anna" && a.status === "confirmed" && overlaps(a, T0, T0 + 7 * DAY),
    );
    expect(want.length).toBeGreaterThan(10);
    expect(got.map((a) => a.id).sort()).toEqual(want.map((a) => a.id as string).sort());
    const q = new URLSearchParams(pair.sim.requests.at(-1)!.query);
    // The window goes out as plain dates, two days wider on each side; the client narrows the answer back.
    expect(Object.fromEntries(q)).toMatchObject({
      therapist_id: "th_anna",
      status: "confirmed",
      date_from: new Date(T0 - 2 * DAY).toISOString().slice(0, 10),
      date_to: new Date(T0 + 9 * DAY).toISOString().slice(0, 10),
    });

    const customer = all[0]!.customer_id as string;
    const mine = await drive(pair.clock, collect(pair.client.listAppointments({ customerId: customer })));
    expect(mine.map((a) => a.id).sort()).toEqual(
      all
        .filter((a) => a.customer_id === customer)
        .map((a) => a.id)
        .sort(),
    );
  });

  it("yields exactly the window's appointments however the service reads its dates (zone, date_to excluded)", async () => {
    pair = await startPair({ sim: { therapists: ["th_anna"] } });
    const p = pair;
    // The window: 09:00 UTC on T0's day to 07:30 UTC six days later; appointments on both edges, just outside
    // them (the one that starts a minute before the window is in progress at its start: kept, as Google keeps its
    // event), and spread over the days around.
    const from = T0;
    const to = T0 + 6 * DAY - 90 * 60_000;
    const starts = [from - 60_000, from, from + 60_000, to - 60_000, to, to + 60_000];
    for (let h = -72; h <= 9 * 24; h += 5) starts.push(T0 + h * 3_600_000);
    for (const start of starts) p.sim.create({ start_time: new Date(start).toISOString() });
    const want = p.sim
      .all()
      .filter((a) => overlaps(a, from, to))
      .map((a) => a.id as string)
      .sort();
    expect(want.length).toBeGreaterThan(20);
    const readings = [
      { utcOffsetMinutes: 0, dateToExclusive: false },
      { utcOffsetMinutes: 0, dateToExclusive: true },
      { utcOffsetMinutes: 14 * 60, dateToExclusive: true },
      { utcOffsetMinutes: 14 * 60, dateToExclusive: false },
      { utcOffsetMinutes: -12 * 60, dateToExclusive: true },
      { utcOffsetMinutes: -12 * 60, dateToExclusive: false },
    ];
    for (const reading of readings) {
      Object.assign(p.sim.dateReading, reading);
      const window = { dateFrom: new Date(from).toISOString(), dateTo: new Date(to).toISOString() };
      const got = await drive(p.clock, collect(p.client.listAppointments(window)));
      expect({ reading, ids: got.map((a) => a.id).sort() }).toEqual({ reading, ids: want });
    }
  });

  it("lists a window wider than the service takes in narrower pieces, learns the width once, and says so", async () => {
    const log = captureLog("warn");
    pair = await startPair({ sim: { therapists: ["th_anna", "th_ben"] }, client: { logger: log.logger } });
    const p = pair;
    p.sim.seed({ therapists: ["th_anna", "th_ben"], count: 600, from: T0 - 10 * DAY, to: T0 + 100 * DAY });
    p.sim.dateReading.maxRangeDays = 31;
    const from = T0 - 7 * DAY;
    const to = T0 + 90 * DAY;
    const window = { dateFrom: new Date(from).toISOString(), dateTo: new Date(to).toISOString() };
    const want = p.sim
      .all()
      .filter((a) => overlaps(a, from, to))
      .map((a) => a.id as string)
      .sort();
    const refused = () => p.sim.requests.filter((r) => r.route === "GET /v1/appointments" && r.status === 400).length;

    const first = await drive(p.clock, collect(p.client.listAppointments(window)));
    expect(first.map((a) => a.id).sort()).toEqual(want);
    // 97 days refused, then 48.5; 24.25-day pieces (28.25 days with the slack) are taken.
    expect(refused()).toBe(2);
    expect(log.lines.filter((l) => String(l["msg"]).includes("refused the date range"))).toHaveLength(2);
    for (const r of p.sim.requests.filter((x) => x.status === 200)) {
      const q = new URLSearchParams(r.query);
      expect((Date.parse(q.get("date_to")!) - Date.parse(q.get("date_from")!)) / DAY + 1).toBeLessThanOrEqual(31);
    }

    // Learned: the next list is split from the start, and refused nothing.
    const again = await drive(p.clock, collect(p.client.listAppointments(window)));
    expect(again.map((a) => a.id).sort()).toEqual(want);
    expect(refused()).toBe(2);
  });

  it("gives up on dates refused even one day wide, and never splits over a refusal that is not about dates", async () => {
    pair = await startPair();
    const p = pair;
    const window = { dateFrom: new Date(T0).toISOString(), dateTo: new Date(T0 + 20 * DAY).toISOString() };
    p.sim.dateReading.maxRangeDays = 0;
    const error = await drive(p.clock, collect(p.client.listAppointments(window))).catch((e: unknown) => e);
    expect(error).toMatchObject({ code: "invalid_request", details: { field: "date_to" } });
    // 20 days, 10, 5, 2.5, 1.25, then a day: six refusals, then the error.
    const lists = () => p.sim.requests.filter((r) => r.route === "GET /v1/appointments");
    expect(lists()).toHaveLength(6);

    p.sim.dateReading.maxRangeDays = undefined;
    p.sim.requests.length = 0;
    p.sim.faults.refuseNext(1, "invalid_request", { status: 400, match: { path: "/v1/appointments" } });
    const other = await drive(p.clock, collect(p.client.listAppointments(window))).catch((e: unknown) => e);
    expect(other).toMatchObject({ code: "invalid_request", details: {} });
    expect(lists()).toHaveLength(1);
  });

  it("dedupes ids when pages drift while the data changes (new bookings shift later pages)", async () => {
    pair = await startPair();
    const original = pair.sim.seed({ therapists: ["th_anna", "th_ben"], count: 300, from: T0, to: T0 + 30 * DAY });
    const seen: string[] = [];
    let pages = 0;
    const run = async () => {
      for await (const page of pair!.client.listAppointmentPages({})) {
        pages++;
        seen.push(...page.items.map((a) => a.id));
        if (pages === 1) {
          for (let i = 0; i < 60; i++)
            pair!.sim.create({ start_time: new Date(T0 + (i + 1) * 3_600_000).toISOString() });
        }
      }
    };
    await drive(pair.clock, run());
    // The raw pages repeat some ids (shifted across a page boundary)...
    expect(seen.length).toBeGreaterThan(new Set(seen).size);
    expect(pages).toBe(4);
    // ...listAppointments yields each once, and nothing that existed before the walk is lost.
    pair.sim.requests.length = 0;
    const items = await drive(pair.clock, collect(pair.client.listAppointments({})));
    expect(new Set(items.map((a) => a.id)).size).toBe(items.length);
    const ids = new Set(seen);
    for (const id of original) expect(ids.has(id)).toBe(true);
  });

  it("yields an appointment again, the later copy, when a later page of the walk shows it changed", async () => {
    pair = await startPair();
    const p = pair;
    p.sim.seed({ therapists: ["th_anna", "th_ben"], count: 300, from: T0 + DAY, to: T0 + 30 * DAY });
    let victim: string | undefined;
    const walk = async () => {
      const items: { id: string; status: string | undefined }[] = [];
      for await (const a of p.client.listAppointments({})) {
        items.push({ id: a.id, status: a.status });
        if (items.length === 100) {
          // Page 1 is in: its last confirmed appointment is cancelled, and earlier bookings push it onto page 2.
          victim = [...items].reverse().find((x) => x.status === "confirmed")!.id;
          p.sim.cancel(victim, "cancelled meanwhile");
          for (let i = 0; i < 80; i++)
            p.sim.create({ start_time: new Date(T0 + DAY + (i + 1) * 3_600_000).toISOString() });
        }
      }
      return items;
    };
    const items = await drive(p.clock, walk());
    expect(p.sim.get(victim!)?.status).toBe("cancelled");
    // The victim came twice, and the copy yielded last is the fresher one...
    expect(items.filter((a) => a.id === victim).map((a) => a.status)).toEqual(["confirmed", "cancelled"]);
    const last = new Map(items.map((a) => [a.id, a.status]));
    expect(last.get(victim!)).toBe("cancelled");
    // ...while the other appointments the shift repeated on page 2, unchanged, were not yielded again.
    expect(items.length).toBe(last.size + 1);
  });

  it("takes an item whose display fields have odd values: those are dropped, the page and the sync's fields kept", async () => {
    pair = await startPair();
    const start = new Date(T0 + DAY).toISOString();
    const end = new Date(T0 + DAY + 3_600_000).toISOString();
    const odd = {
      id: "apt_odd",
      therapist_id: "th_anna",
      start_time: start,
      end_time: end,
      status: "confirmed",
      service_name: null,
      price: "80.00",
      payment_status: null,
      updated_at: null,
      customer: null,
      notes: null,
      addons: {},
    };
    const plain = { id: "apt_plain", therapist_id: "th_anna", start_time: start, end_time: end, status: "confirmed" };
    pair.sim.faults.malformedNext(1, {
      body: JSON.stringify({ data: [odd, plain], meta: { page: 1, per_page: 100, total: 2, total_pages: 1 } }),
    });
    const items = await drive(pair.clock, collect(pair.client.listAppointments({})));
    expect(items.map((a) => a.id)).toEqual(["apt_odd", "apt_plain"]);
    const got = items[0]!;
    expect(got).toMatchObject({ therapist_id: "th_anna", start_time: start, end_time: end, status: "confirmed" });
    expect(got.notes).toBeNull(); // "no notes", as the spec shows it
    for (const dropped of ["service_name", "price", "payment_status", "updated_at", "customer", "addons"] as const) {
      expect(got[dropped]).toBeUndefined();
    }
  });

  it("fetches pages ahead when asked, with the same result", async () => {
    pair = await startPair({ client: { pageConcurrency: 4 } });
    pair.sim.seed({ therapists: ["th_anna"], count: 950, from: T0, to: T0 + 90 * DAY });
    const items = await drive(pair.clock, collect(pair.client.listAppointments({})));
    expect(new Set(items.map((a) => a.id)).size).toBe(950);
    expect(pair.sim.stats().byRoute["GET /v1/appointments"]).toBe(10);
  });

  it("tolerates missing meta: stops on a short or empty page", async () => {
    const total = { n: 250 };
    const pagesServed: number[] = [];
    const server = createServer((req, res) => {
      const url = new URL(req.url!, "http://x");
      const page = Number(url.searchParams.get("page"));
      pagesServed.push(page);
      const ids = Array.from({ length: total.n }, (_, i) => ({ id: `apt_${i}` })).slice((page - 1) * 100, page * 100);
      res.writeHead(200, { "content-type": "application/json" });
      res.end(JSON.stringify({ data: ids }));
    });
    await new Promise<void>((r) => server.listen(0, "127.0.0.1", r));
    try {
      const client = new BookingClient({
        baseUrl: `http://127.0.0.1:${(server.address() as AddressInfo).port}`,
        apiKey: API_KEY,
        requestsPerMinute: 1_000,
        registry: new Registry(),
      });
      expect((await collect(client.listAppointments({}))).length).toBe(250);
      expect(pagesServed).toEqual([1, 2, 3]);
      total.n = 200;
      pagesServed.length = 0;
      expect((await collect(client.listAppointments({}))).length).toBe(200);
      expect(pagesServed).toEqual([1, 2, 3]);
    } finally {
      server.closeAllConnections();
      await new Promise((r) => server.close(r));
    }
  });

  it("reads availability and services, also with a base address ending in /v1", async () => {
    pair = await startPair({ sim: { therapists: ["th_anna", "th_ben"] } });
    const client = new BookingClient({
      baseUrl: `${pair.sim.url}/v1/`,
      apiKey: API_KEY,
      requestsPerMinute: 100,
      clock: pair.clock,
      registry: new Registry(),
    });
    const date = new Date(T0 + DAY).toISOString().slice(0, 10);
    const slots = await drive(pair.clock, client.getAvailability({ serviceId: "svc_physio_30", date, duration: 30 }));
    expect(slots).toMatchObject({ date, service_id: "svc_physio_30" });
    expect(new Set(slots.slots.map((x) => x.therapist_id))).toEqual(new Set(["th_anna", "th_ben"]));
    const services = await drive(pair.clock, client.listServices());
    expect(services.length).toBe(4);
    expect(pair.sim.requests.map((r) => r.path)).toEqual(["/v1/availability", "/v1/services"]);
  });

  it("identifies itself and authenticates on every request", async () => {
    pair = await startPair();
    pair.sim.seed({ therapists: ["th_anna"], count: 3, from: T0, to: T0 + DAY });
    await drive(pair.clock, collect(pair.client.listAppointments({})));
    const r = pair.sim.requests[0]!;
    expect(r.authorized).toBe(true);
    expect(r.userAgent).toMatch(/^calbridge\/\d+\.\d+\.\d+/);
    expect(r.accept).toBe("application/json");
  });
});
