// Tests the daemon's HTTP listeners over real HTTP: the admin routes (readiness reasons, metrics, status and its
// escaping, the bearer token), 404/405, limits on connections and slow requests, draining close().
import { connect } from "node:net";
import { tmpdir } from "node:os";
import { Registry } from "prom-client";
import { afterEach, describe, expect, it } from "vitest";
import { ManualClock } from "../../src/clock.ts";
import { adminRoutes } from "../../src/daemon/admin.ts";
import { createHttpServer, type HttpServer, parseListen, type RouteHandler } from "../../src/daemon/http.ts";
import { createMetrics } from "../../src/daemon/metrics.ts";
import { captureLog } from "../support/log-capture.ts";
import { fakeHealth, therapist } from "./fake-health.ts";

const servers: HttpServer[] = [];
afterEach(async () => {
  for (const s of servers.splice(0)) await s.close(0);
});

interface StartOptions {
  handlers?: RouteHandler[];
  storeTimeoutMs?: number;
  bearerToken?: string;
  minFreeBytes?: number;
}

/** An admin listener (the admin routes after any extra handlers) over a fake HealthSource. */
async function start(options: StartOptions = {}) {
  const clock = new ManualClock();
  const health = fakeHealth(clock.now());
  const metrics = createMetrics(new Registry());
  const log = captureLog();
  const http = await createHttpServer({
    name: "admin",
    listen: "127.0.0.1:0",
    routes: [
      ...(options.handlers ?? []),
      adminRoutes({
        health,
        registry: metrics.registry,
        clock,
        readiness: {
          maxReconcileAgeMs: 45 * 60_000,
          startupGraceMs: 10 * 60_000,
          storeTimeoutMs: options.storeTimeoutMs ?? 200,
          ...(options.minFreeBytes !== undefined ? { minFreeBytes: options.minFreeBytes } : {}),
        },
        ...(options.bearerToken ? { bearerToken: options.bearerToken } : {}),
      }),
    ],
    registry: metrics.registry,
    logger: log.logger,
  });
  servers.push(http);
  return { http, health, clock, metrics, log, get: (path: string, init?: RequestInit) => fetch(http.url + path, init) };
}

async function readiness(get: (p: string) => Promise<Response>) {
  const res = await get("/readyz");
  return {
    status: res.status,
    body: (await res.json()) as { status: string; checks: Record<string, { ok: boolean; detail: string }> },
  };
}

describe("liveness", () => {
  it("answers ok until shutdown begins, then 503", async () => {
    const { http, get } = await start();
    const ok = await get("/healthz");
    expect(ok.status).toBe(200);
    expect(ok.headers.get("content-type")).toMatch(/^application\/json/);
    expect(await ok.json()).toEqual({ status: "ok" });
    http.beginShutdown();
    const down = await get("/healthz");
    expect(down.status).toBe(503);
    expect(await down.json()).toEqual({ status: "shutting_down" });
    expect((await get("/readyz")).status).toBe(503);
  });
});

describe("readiness", () => {
  it("is ready when the store answers, reconciliation is recent and the booking API is reachable", async () => {
    const { get } = await start();
    const { status, body } = await readiness(get);
    expect(status).toBe(200);
    expect(body.status).toBe("ready");
    expect(Object.values(body.checks).every((c) => c.ok)).toBe(true);
    expect(body.checks.reconcile!.detail).toMatch(/300s ago/);
  });

  it("is not ready when the store ping fails, and says why", async () => {
    const { health, get } = await start();
    health.pingError = new Error("ECONNREFUSED 127.0.0.1:6379");
    const { status, body } = await readiness(get);
    expect(status).toBe(503);
    expect(body.status).toBe("not_ready");
    expect(body.checks.store).toEqual({ ok: false, detail: "store unreachable: ECONNREFUSED 127.0.0.1:6379" });
    expect(body.checks.reconcile!.ok).toBe(true);
    expect(body.checks.booking!.ok).toBe(true);
  });

  it("is not ready when the store does not answer in time", async () => {
    const { health, get } = await start({ storeTimeoutMs: 100 });
    health.pingError = "hang";
    const { status, body } = await readiness(get);
    expect(status).toBe(503);
    expect(body.checks.store!.detail).toMatch(/no answer within 100 ms/);
  });

  it("is not ready when the last reconciliation is too old", async () => {
    const { clock, get } = await start();
    await clock.advance(60 * 60_000); // last success now 65 min ago, started 61 min ago (grace 10 min)
    const { status, body } = await readiness(get);
    expect(status).toBe(503);
    expect(body.checks.reconcile).toEqual({
      ok: false,
      detail: "last successful reconciliation 3900s ago, older than 2700s",
    });
  });

  it("is ready inside the startup grace period without any reconciliation, and not after it", async () => {
    const { health, clock, get } = await start();
    health.lastReconcile = undefined;
    const early = await readiness(get);
    expect(early.status).toBe(200);
    expect(early.body.checks.reconcile!.detail).toMatch(/^starting/);
    await clock.advance(10 * 60_000);
    const late = await readiness(get);
    expect(late.status).toBe(503);
    expect(late.body.checks.reconcile!.detail).toMatch(/no successful reconciliation in 660s since start/);
  });

  it("is not ready when the booking API is unreachable", async () => {
    const { health, get } = await start();
    health.booking = { ok: false, detail: "401 unauthorized: check booking.api_key" };
    const { status, body } = await readiness(get);
    expect(status).toBe(503);
    expect(body.checks.booking).toEqual({
      ok: false,
      detail: "booking API unreachable: 401 unauthorized: check booking.api_key",
    });
  });

  it("is not ready when the store answers pings but refuses writes, and says which check fails", async () => {
    const { health, get } = await start();
    health.writeError = new Error("SQLITE_FULL: database or disk is full");
    const { status, body } = await readiness(get);
    expect(status).toBe(503);
    expect(body.checks.store!.ok).toBe(true);
    expect(body.checks.store_write).toEqual({
      ok: false,
      detail: "store refuses writes: SQLITE_FULL: database or disk is full",
    });
  });

  it("is not ready when the store's folder has less free space than the threshold (real statfs)", async () => {
    const { health, get } = await start({ minFreeBytes: 2 ** 60 });
    health.storeFolder = tmpdir();
    const { status, body } = await readiness(get);
    expect(status).toBe(503);
    expect(body.checks.disk!.ok).toBe(false);
    expect(body.checks.disk!.detail).toMatch(
      new RegExp(`^\\d+ MiB free in ${tmpdir()}, below store.min_free_mb \\(\\d+ MiB\\): writes will soon fail$`),
    );
    expect(
      Object.entries(body.checks)
        .filter(([, c]) => !c.ok)
        .map(([name]) => name),
    ).toEqual(["disk"]);
  });

  it("checks the free space against the threshold, and not at all without a store folder or with 0", async () => {
    const room = await start({ minFreeBytes: 1 });
    room.health.storeFolder = tmpdir();
    expect((await readiness(room.get)).body.checks.disk).toMatchObject({ ok: true, detail: /MiB free in/ });
    const off = await start({ minFreeBytes: 0 });
    off.health.storeFolder = tmpdir();
    expect((await readiness(off.get)).body.checks.disk!.detail).toMatch(/not checked/);
    const redis = await start({ minFreeBytes: 2 ** 60 });
    expect((await readiness(redis.get)).body.checks.disk).toEqual({ ok: true, detail: "no local store file" });
  });
});

describe("admin bearer token", () => {
  const TOKEN = "admin-token-0123456789";

  it("answers 401 with WWW-Authenticate without the token or with a wrong one, and serves the route with it", async () => {
    const { get } = await start({ bearerToken: TOKEN });
    for (const path of ["/readyz", "/metrics", "/status", "/status.html"]) {
      for (const authorization of [undefined, "Bearer wrong-token", `Basic ${TOKEN}`, `Bearer ${TOKEN}x`, "Bearer"]) {
        const res = await get(path, authorization ? { headers: { authorization } } : {});
        expect(res.status, `${path} ${authorization}`).toBe(401);
        expect(res.headers.get("www-authenticate")).toBe('Bearer realm="calbridge admin"');
        expect(((await res.json()) as { error: string }).error).toBe("unauthorized");
      }
      const ok = await get(path, { headers: { authorization: `Bearer ${TOKEN}` } });
      expect(ok.status, path).toBe(200);
      await ok.body?.cancel();
    }
    // Refused before anything else: a wrong method without the token learns nothing either.
    expect((await get("/metrics", { method: "POST", body: "{}" })).status).toBe(401);
  });

  it("leaves /healthz open, for liveness probes", async () => {
    const { get } = await start({ bearerToken: TOKEN });
    expect((await get("/healthz")).status).toBe(200);
  });

  it("is not asked for when none is configured", async () => {
    const { get } = await start();
    expect((await get("/metrics")).status).toBe(200);
  });
});

describe("limits", () => {
  it("closes connections beyond maxConnections at once, counts them, and warns once", async () => {
    const registry = new Registry();
    const log = captureLog();
    const http = await createHttpServer({
      name: "public",
      listen: "127.0.0.1:0",
      maxConnections: 2,
      registry,
      logger: log.logger,
    });
    servers.push(http);
    const port = Number(new URL(http.url).port);
    const open = () =>
      new Promise<{ closed: Promise<void> }>((resolve) => {
        const socket = connect(port, "127.0.0.1", () => resolve({ closed }));
        const closed = new Promise<void>((r) => socket.once("close", () => r()));
        socket.on("error", () => {});
        sockets.push(socket);
      });
    const sockets: import("node:net").Socket[] = [];
    try {
      const held = [await open(), await open()];
      await new Promise((r) => setTimeout(r, 50));
      const extra = [await open(), await open()];
      await Promise.all(extra.map((e) => e.closed));
      let stillOpen = true;
      void Promise.race(held.map((h) => h.closed)).then(() => {
        stillOpen = false;
      });
      await new Promise((r) => setTimeout(r, 50));
      expect(stillOpen).toBe(true);
      expect(await registry.metrics()).toContain('calbridge_http_connections_dropped_total{listener="public"} 2');
      expect(log.lines.filter((l) => String(l.msg).includes("maximum open"))).toHaveLength(1);
    } finally {
      for (const s of sockets) s.destroy();
    }
  });

  it("answers 408 and closes a request whose body does not arrive within requestTimeoutMs", async () => {
    const http = await createHttpServer({
      name: "public",
      listen: "127.0.0.1:0",
      requestTimeoutMs: 300,
      headersTimeoutMs: 300,
      routes: [
        async (req, res) => {
          for await (const _ of req) {
            // read the body
          }
          res.writeHead(200).end();
          return true;
        },
      ],
    });
    servers.push(http);
    const answer = await new Promise<string>((resolve) => {
      const socket = connect(Number(new URL(http.url).port), "127.0.0.1", () => {
        socket.write("POST /x HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n{");
      });
      let text = "";
      socket.on("data", (d) => {
        text += String(d);
      });
      socket.on("close", () => resolve(text));
      socket.on("error", () => {});
    });
    expect(answer).toMatch(/^HTTP\/1\.1 408/);
  });
});

describe("metrics", () => {
  it("serves the registry in the Prometheus text format", async () => {
    const { metrics, get } = await start();
    metrics.leader.set(1);
    metrics.syncOperations.inc({ kind: "create", result: "ok" });
    const res = await get("/metrics");
    expect(res.status).toBe(200);
    expect(res.headers.get("content-type")).toBe(metrics.registry.contentType);
    const text = await res.text();
    expect(text).toContain("calbridge_leader 1");
    expect(text).toContain('calbridge_sync_operations_total{kind="create",result="ok"} 1');
    expect(text).toContain("process_cpu_user_seconds_total");
  });
});

describe("status", () => {
  it("answers JSON by default", async () => {
    const { health, get } = await start();
    const res = await get("/status");
    expect(res.status).toBe(200);
    expect(res.headers.get("content-type")).toMatch(/^application\/json/);
    expect(await res.json()).toEqual(health.snapshot);
  });

  it("answers HTML to browsers and on /status.html", async () => {
    const { get } = await start();
    for (const res of [
      await get("/status", { headers: { accept: "text/html,*/*;q=0.8" } }),
      await get("/status.html"),
    ]) {
      expect(res.status).toBe(200);
      expect(res.headers.get("content-type")).toBe("text/html; charset=utf-8");
      expect(res.headers.get("content-security-policy")).toContain("default-src 'none'");
      const html = await res.text();
      expect(html).toContain("<td>anna@clinic.example</td>");
      expect(html).toContain("42 of 60 left");
    }
  });

  it("escapes every value on the HTML page", async () => {
    const { health, get } = await start();
    health.snapshot.instance = `"><b>host</b>`;
    health.snapshot.queues = { "<i>q</i>": 1 };
    health.snapshot.therapists = [
      therapist({
        therapistId: "th_<x>",
        name: "<script>alert('x')</script>",
        calendarId: `cal"><img src=x onerror=alert(1)>`,
        lastError: { at: "2026-11-22T08:00:00.000Z", message: "<svg onload=alert(2)>" },
        credentials: { ok: false, detail: "revoked & <gone>" },
        pausedUntil: "<u>soon</u>",
      }),
    ];
    const html = await (await get("/status.html")).text();
    for (const raw of ["<script>", "<img", "<svg", "<b>host", "<i>q", "<u>", "<x>", "& <gone>"]) {
      expect(html).not.toContain(raw);
    }
    expect(html).toContain("&lt;script&gt;alert(&#39;x&#39;)&lt;/script&gt;");
    expect(html).toContain("cal&quot;&gt;&lt;img src=x onerror=alert(1)&gt;");
    expect(html).toContain("revoked &amp; &lt;gone&gt;");
  });
});

describe("routing", () => {
  it("answers 404 JSON for unknown paths and 405 for wrong methods", async () => {
    const { get } = await start();
    const missing = await get("/nope?x=1");
    expect(missing.status).toBe(404);
    expect(await missing.json()).toEqual({ error: "not_found", message: "no route for GET /nope" });
    for (const path of ["/healthz", "/readyz", "/metrics", "/status"]) {
      const res = await get(path, { method: "POST", body: "{}" });
      expect(res.status, path).toBe(405);
      expect(res.headers.get("allow")).toBe("GET, HEAD");
      expect(((await res.json()) as { error: string }).error).toBe("method_not_allowed");
    }
    const head = await get("/healthz", { method: "HEAD" });
    expect(head.status).toBe(200);
  });

  it("tries the handlers in order and falls through to 404", async () => {
    const seen: string[] = [];
    const declines: RouteHandler = async (req) => {
      seen.push(`declines ${req.url}`);
      return false;
    };
    const webhook: RouteHandler = async (req, res) => {
      if (req.url !== "/webhooks/booking") return false;
      res.writeHead(202).end();
      return true;
    };
    const { get } = await start({ handlers: [declines, webhook] });
    expect((await get("/webhooks/booking", { method: "POST", body: "{}" })).status).toBe(202);
    expect((await get("/webhooks/other", { method: "POST", body: "{}" })).status).toBe(404);
    expect(seen).toEqual(["declines /webhooks/booking", "declines /webhooks/other"]);
    // The built-in /healthz is not offered to the handlers.
    await get("/healthz");
    expect(seen).toHaveLength(2);
  });

  it("answers 500 when a handler throws, and logs it", async () => {
    const boom: RouteHandler = async () => {
      throw new Error("boom");
    };
    const { get, log } = await start({ handlers: [boom] });
    const res = await get("/x");
    expect(res.status).toBe(500);
    expect(((await res.json()) as { error: string }).error).toBe("internal_error");
    expect(log.find((l) => l.msg === "http: handler failed")).toBeDefined();
  });

  it("parses listen addresses", () => {
    expect(parseListen("0.0.0.0:8080")).toEqual({ host: "0.0.0.0", port: 8080 });
    expect(parseListen("[::1]:0")).toEqual({ host: "::1", port: 0 });
    expect(() => parseListen("8080")).toThrow(/not host:port/);
  });

  it("binds localhost as 127.0.0.1, where the image's health check asks, whatever the resolver puts first", async () => {
    expect(parseListen("localhost:9090")).toEqual({ host: "127.0.0.1", port: 9090 });
    expect(parseListen("LocalHost:9090")).toEqual({ host: "127.0.0.1", port: 9090 });
    const http = await createHttpServer({ name: "admin", listen: "localhost:0" });
    servers.push(http);
    expect(http.server.address()).toMatchObject({ address: "127.0.0.1", family: "IPv4" });
    expect(http.url).toMatch(/^http:\/\/127\.0\.0\.1:\d+$/);
    expect((await fetch(`${http.url}/healthz`)).status).toBe(200);
  });

  it("reports a port that is already taken", async () => {
    const { http } = await start();
    const port = new URL(http.url).port;
    const other = createHttpServer({ name: "admin", listen: `127.0.0.1:${port}` });
    await expect(other).rejects.toThrow(`cannot listen on 127.0.0.1:${port}: EADDRINUSE`);
  });
});

describe("close", () => {
  function slowHandler() {
    let entered!: () => void;
    const inside = new Promise<void>((r) => {
      entered = r;
    });
    let release!: () => void;
    const released = new Promise<void>((r) => {
      release = r;
    });
    const handler: RouteHandler = async (req, res) => {
      if (req.url !== "/slow") return false;
      entered();
      await released;
      res.writeHead(200, { "content-type": "text/plain" }).end("done");
      return true;
    };
    return { handler, inside, release };
  }

  it("stops accepting connections and waits for the request in flight", async () => {
    const slow = slowHandler();
    const { http, get } = await start({ handlers: [slow.handler] });
    const pending = get("/slow");
    await slow.inside;
    let closed = false;
    const closing = http.close(10_000).then(() => {
      closed = true;
    });
    await new Promise((r) => setTimeout(r, 100));
    expect(closed).toBe(false);
    await expect(get("/healthz")).rejects.toThrow(); // refused: no longer listening
    slow.release();
    const res = await pending;
    expect(res.status).toBe(200);
    expect(await res.text()).toBe("done");
    // Done as soon as that answer is out: its connection is not kept alive for the next request.
    const t0 = Date.now();
    await closing;
    expect(Date.now() - t0).toBeLessThan(500);
    expect(closed).toBe(true);
  });

  it("cuts requests still running when the grace period ends", async () => {
    const slow = slowHandler();
    const { http, get } = await start({ handlers: [slow.handler] });
    const pending = get("/slow").then(
      () => "answered",
      () => "cut",
    );
    await slow.inside;
    const t0 = Date.now();
    await http.close(150);
    expect(Date.now() - t0).toBeGreaterThanOrEqual(140);
    expect(Date.now() - t0).toBeLessThan(2000);
    expect(await pending).toBe("cut");
    slow.release();
  });

  it("does not wait for idle keep-alive connections", async () => {
    const { http, get } = await start();
    expect((await get("/healthz")).status).toBe(200); // leaves a kept-alive connection behind
    const t0 = Date.now();
    await http.close(10_000);
    expect(Date.now() - t0).toBeLessThan(1000);
  });
});
