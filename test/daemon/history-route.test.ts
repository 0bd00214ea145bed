// The admin listener's appointment history over real HTTP: GET /history/ID as JSON and as a page, behind the bearer
// token, every value escaped (appointment ids come from the booking service), 404 for an unknown id, 400 for a broken
// path, and the recent histories on /status.html as escaped links.
import { Registry } from "prom-client";
import { afterEach, describe, expect, it } from "vitest";
import { ManualClock } from "../../src/clock.ts";
import { adminRoutes } from "../../src/daemon/admin.ts";
import { historyHref } from "../../src/daemon/history-page.ts";
import { createHttpServer, type HttpServer } from "../../src/daemon/http.ts";
import type { HistoryEntry } from "../../src/sync/history-entry.ts";
import type { StoredHistory } from "../../src/sync/history-log.ts";
import { captureLog } from "../support/log-capture.ts";
import { fakeHealth } from "./fake-health.ts";

const servers: HttpServer[] = [];
afterEach(async () => {
  for (const s of servers.splice(0)) await s.close(0);
});

const TOKEN = "admin-token-0123456789";
const ODD_ID = `apt_"><img src=x onerror=alert(1)>`;

const entry = (over: Partial<HistoryEntry> = {}): HistoryEntry => ({
  at: "2026-11-22T08:00:00.000Z",
  origin: "calendar",
  trigger: "calendar change",
  kind: "writeback",
  writeback: "cancel",
  result: "refused",
  side: "booking",
  code: "past_booking",
  httpStatus: 422,
  therapistId: "th_<x>",
  reason: "<svg onload=alert(2)>",
  ...over,
});

async function start(options: { bearerToken?: string; withHistory?: boolean } = {}) {
  const clock = new ManualClock();
  const health = fakeHealth(clock.now());
  const histories = new Map<string, StoredHistory>([[ODD_ID, { entries: [entry()], dropped: 2 }]]);
  const registry = new Registry();
  const http = await createHttpServer({
    name: "admin",
    listen: "127.0.0.1:0",
    routes: [
      adminRoutes({
        health,
        registry,
        clock,
        ...(options.bearerToken ? { bearerToken: options.bearerToken } : {}),
        ...(options.withHistory === false
          ? {}
          : { history: { read: async (id) => histories.get(id) ?? { entries: [] }, retentionDays: 90 } }),
      }),
    ],
    registry,
    logger: captureLog().logger,
  });
  servers.push(http);
  return { health, get: (path: string, init?: RequestInit) => fetch(http.url + path, init) };
}

describe("GET /history/APPOINTMENT_ID", () => {
  it("answers the history as JSON, and as a page for browsers, with every value escaped", async () => {
    const { get } = await start();
    const path = historyHref(ODD_ID);
    expect(path).toBe("/history/apt_%22%3E%3Cimg%20src%3Dx%20onerror%3Dalert(1)%3E");
    const json = await get(path);
    expect(json.status).toBe(200);
    expect(await json.json()).toEqual({ appointmentId: ODD_ID, retentionDays: 90, entries: [entry()], dropped: 2 });
    const page = await get(path, { headers: { accept: "text/html" } });
    expect(page.status).toBe(200);
    expect(page.headers.get("content-type")).toBe("text/html; charset=utf-8");
    expect(page.headers.get("content-security-policy")).toBe("default-src 'none'; style-src 'unsafe-inline'");
    const html = await page.text();
    for (const raw of ["<img", "<svg", "<x>"]) expect(html).not.toContain(raw);
    expect(html).toContain("apt_&quot;&gt;&lt;img src=x onerror=alert(1)&gt;");
    expect(html).toContain(
      "cancellation refused by the booking service (booking 422 past_booking); the event is put back as booked (&lt;svg onload=alert(2)&gt;)",
    );
    expect(html).toContain("2 earlier entries were dropped");
  });

  it("answers 404 for an appointment without a history, and 400 for a path that is not percent-encoding", async () => {
    const { get } = await start();
    const none = await get("/history/apt_unknown");
    expect(none.status).toBe(404);
    expect(await none.json()).toEqual({ appointmentId: "apt_unknown", retentionDays: 90, entries: [] });
    const page = await get("/history/apt_unknown", { headers: { accept: "text/html" } });
    expect(page.status).toBe(404);
    expect(await page.text()).toContain("No history recorded for this appointment in the last 90 days.");
    expect((await get("/history/%E0%A4%A")).status).toBe(400);
  });

  it("needs the bearer token like every admin route", async () => {
    const { get } = await start({ bearerToken: TOKEN });
    const path = historyHref(ODD_ID);
    expect((await get(path)).status).toBe(401);
    expect((await get(path, { headers: { authorization: "Bearer wrong" } })).status).toBe(401);
    expect((await get(path, { headers: { authorization: `Bearer ${TOKEN}` } })).status).toBe(200);
  });

  it("is not a route when no history is wired", async () => {
    const { get } = await start({ withHistory: false });
    expect((await get("/history/apt_1")).status).toBe(404);
  });
});

describe("recent histories on /status", () => {
  it("are listed as escaped links to their history", async () => {
    const { health, get } = await start();
    health.snapshot.history = {
      retentionDays: 90,
      recent: [
        {
          appointmentId: ODD_ID,
          at: "2026-11-22T08:00:00.000Z",
          kind: "writeback",
          origin: "calendar",
          href: historyHref(ODD_ID),
        },
      ],
    };
    const html = await (await get("/status.html")).text();
    expect(html).not.toContain("<img");
    expect(html).toContain(
      `<a href="/history/apt_%22%3E%3Cimg%20src%3Dx%20onerror%3Dalert(1)%3E">apt_&quot;&gt;&lt;img src=x onerror=alert(1)&gt;</a>`,
    );
    health.snapshot.history.recent = [];
    expect(await (await get("/status.html")).text()).toContain("No appointment history recorded yet.");
  });
});
