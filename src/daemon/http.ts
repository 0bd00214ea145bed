// Owns the daemon's HTTP server: pluggable routes (webhooks) tried in order, the built-in /healthz, /readyz,
// /metrics and /status routes, precise 404/405 answers, and a shutdown that drains in-flight requests.
import { createServer, type IncomingMessage, type Server, type ServerResponse } from "node:http";
import type { AddressInfo } from "node:net";
import { performance } from "node:perf_hooks";
import type { Registry } from "prom-client";
import { type Clock, systemClock } from "../clock.ts";
import { type Logger, silentLogger } from "../log.ts";
import { checkReadiness, type HealthSource, type ReadinessOptions } from "./health.ts";
import { renderStatusHtml } from "./status-page.ts";

/** Answers the request and returns true, or returns false (without touching `res`) when it is not its route. */
export type RouteHandler = (req: IncomingMessage, res: ServerResponse) => Promise<boolean>;

export interface HttpServerOptions {
  /** host:port, as in webhooks.listen; port 0 picks a free port. */
  listen: string;
  handlers?: RouteHandler[];
  health: HealthSource;
  registry: Registry;
  logger?: Logger;
  readiness?: ReadinessOptions;
  clock?: Clock;
}

export interface HttpServer {
  server: Server;
  /** Where the server can be reached, e.g. http://127.0.0.1:8080 (a wildcard host becomes loopback). */
  url: string;
  /** /healthz and /readyz answer 503 from now on; requests are still served. close() calls it too. */
  beginShutdown(): void;
  readonly shuttingDown: boolean;
  /** Stops accepting connections, waits up to graceMs for in-flight requests, then cuts the rest. */
  close(graceMs: number): Promise<void>;
}

type Route = (req: IncomingMessage, res: ServerResponse) => Promise<void>;

export function parseListen(listen: string): { host: string; port: number } {
  const i = listen.lastIndexOf(":");
  const host = listen.slice(0, i).replace(/^\[(.*)\]$/, "$1");
  const port = Number(listen.slice(i + 1));
  if (i <= 0 || !host || !Number.isInteger(port) || port < 0 || port > 65535) {
    throw new Error(`http: "${listen}" is not host:port`);
  }
  return { host, port };
}

export function sendJson(res: ServerResponse, status: number, body: unknown, headers: Record<string, string> = {}) {
  const text = JSON.stringify(body);
  res.writeHead(status, {
    "Content-Type": "application/json; charset=utf-8",
    "Content-Length": Buffer.byteLength(text),
    "Cache-Control": "no-store",
    ...headers,
  });
  res.end(text);
}

function send(res: ServerResponse, status: number, type: string, body: string, headers: Record<string, string> = {}) {
  res.writeHead(status, { "Content-Type": type, "Content-Length": Buffer.byteLength(body), ...headers });
  res.end(body);
}

const HTML_HEADERS = {
  "Content-Security-Policy": "default-src 'none'; style-src 'unsafe-inline'",
  "X-Content-Type-Options": "nosniff",
  "Cache-Control": "no-store",
  Vary: "Accept",
};

export async function createHttpServer(options: HttpServerOptions): Promise<HttpServer> {
  const { health, registry } = options;
  const handlers = options.handlers ?? [];
  const clock = options.clock ?? systemClock;
  const log = (options.logger ?? silentLogger).child({ component: "http" });
  const { host, port } = parseListen(options.listen);
  let shuttingDown = false;
  let inFlight = 0;

  const status: Route = async (req, res) => {
    const snapshot = await health.status();
    const path = new URL(req.url ?? "/", "http://x").pathname;
    if (path === "/status.html" || /\btext\/html\b/.test(req.headers.accept ?? "")) {
      send(res, 200, "text/html; charset=utf-8", renderStatusHtml(snapshot), HTML_HEADERS);
    } else sendJson(res, 200, snapshot, { Vary: "Accept" });
  };
  const healthz: Route = async (_req, res) => {
    if (shuttingDown) sendJson(res, 503, { status: "shutting_down" });
    else sendJson(res, 200, { status: "ok" });
  };
  const readyz: Route = async (_req, res) => {
    if (shuttingDown) return sendJson(res, 503, { status: "shutting_down" });
    const r = await checkReadiness(health, options.readiness ?? {}, clock.now());
    sendJson(res, r.ready ? 200 : 503, { status: r.ready ? "ready" : "not_ready", checks: r.checks });
  };
  const metrics: Route = async (_req, res) => {
    send(res, 200, registry.contentType, await registry.metrics(), { "Cache-Control": "no-store" });
  };
  const routes = new Map<string, Route>([
    ["/healthz", healthz],
    ["/readyz", readyz],
    ["/metrics", metrics],
    ["/status", status],
    ["/status.html", status],
  ]);

  const dispatch = async (req: IncomingMessage, res: ServerResponse) => {
    const method = req.method ?? "GET";
    let path: string;
    try {
      path = new URL(req.url ?? "/", "http://x").pathname;
    } catch {
      return sendJson(res, 400, { error: "bad_request", message: "unparseable request target" });
    }
    const route = routes.get(path);
    if (route) {
      if (method === "GET" || method === "HEAD") return route(req, res);
      return sendJson(
        res,
        405,
        { error: "method_not_allowed", message: `${method} is not allowed on ${path}; use GET` },
        { Allow: "GET, HEAD" },
      );
    }
    for (const handler of handlers) if (await handler(req, res)) return;
    sendJson(res, 404, { error: "not_found", message: `no route for ${method} ${path.slice(0, 200)}` });
  };

  const server = createServer({ requestTimeout: 30_000, headersTimeout: 10_000 }, (req, res) => {
    const started = performance.now();
    inFlight++;
    // While draining, every answer closes its connection, so keep-alive clients cannot hold the server open.
    if (shuttingDown) res.setHeader("Connection", "close");
    res.once("close", () => {
      inFlight--;
      if (shuttingDown) server.closeIdleConnections();
      const ms = Math.round(performance.now() - started);
      log.debug({ method: req.method, path: req.url?.slice(0, 200), status: res.statusCode, ms }, "http request");
    });
    dispatch(req, res).catch((err: unknown) => {
      log.error({ err, method: req.method, path: req.url?.slice(0, 200) }, "http: handler failed");
      if (!res.headersSent)
        sendJson(res, 500, { error: "internal_error", message: "the request failed; see the logs" });
      else res.destroy();
    });
  });

  await new Promise<void>((resolve, reject) => {
    server.once("error", (err: NodeJS.ErrnoException) => {
      reject(new Error(`http: cannot listen on ${options.listen}: ${err.code ?? err.message}`, { cause: err }));
    });
    server.listen({ host, port }, () => resolve());
  });
  server.on("error", (err) => log.error({ err }, "http: server error"));
  const actual = (server.address() as AddressInfo).port;
  const shown = host === "0.0.0.0" ? "127.0.0.1" : host === "::" ? "::1" : host;
  const url = `http://${shown.includes(":") ? `[${shown}]` : shown}:${actual}`;
  log.info({ url, listen: options.listen }, "http server listening");

  let closing: Promise<void> | undefined;
  const beginShutdown = () => {
    shuttingDown = true;
  };
  return {
    server,
    url,
    beginShutdown,
    get shuttingDown() {
      return shuttingDown;
    },
    close(graceMs) {
      beginShutdown();
      closing ??= new Promise<void>((resolve) => {
        const timer = setTimeout(() => {
          log.warn({ inFlight, graceMs }, "http: grace period over, closing remaining connections");
          server.closeAllConnections();
        }, graceMs);
        server.close(() => {
          clearTimeout(timer);
          resolve();
        });
        server.closeIdleConnections();
      });
      return closing;
    },
  };
}
