// Owns one HTTP listener of the daemon (the public one or the admin one): routes tried in order, the built-in
// /healthz, precise 404/405 answers, limits on connections and on slow requests, and a shutdown that drains in-flight
// requests.
import { createServer, type IncomingMessage, type Server, type ServerResponse } from "node:http";
import type { AddressInfo } from "node:net";
import { performance } from "node:perf_hooks";
import { Counter, type Registry } from "prom-client";
import { type Logger, silentLogger } from "../log.ts";

/** What a route may know of the listener serving it. */
export interface Listener {
  /** Set once shutdown began: /healthz and /readyz answer 503 from then on. */
  readonly shuttingDown: boolean;
}

/** Answers the request and returns true, or returns false (without touching `res`) when it is not its route. */
export type RouteHandler = (req: IncomingMessage, res: ServerResponse, listener: Listener) => Promise<boolean>;

export interface HttpServerOptions {
  /** Names the listener in logs and metrics, e.g. "public" or "admin". */
  name: string;
  /** host:port, as in webhooks.listen; port 0 picks a free port. */
  listen: string;
  routes?: RouteHandler[];
  logger?: Logger;
  /** Counts connections refused over maxConnections (calbridge_http_connections_dropped_total{listener}). */
  registry?: Registry;
  /** Open connections at most; a connection beyond it is closed at once (node's server.maxConnections). */
  maxConnections?: number;
  /** A request must be received whole within this time (node's requestTimeout). Default 30 s. */
  requestTimeoutMs?: number;
  /** Its headers within this time (node's headersTimeout; a slowloris). Default 10 s. */
  headersTimeoutMs?: number;
}

export interface HttpServer extends Listener {
  server: Server;
  /** Where the server can be reached, e.g. http://127.0.0.1:8080 (a wildcard host becomes loopback). */
  url: string;
  /** /healthz and /readyz answer 503 from now on; requests are still served. close() calls it too. */
  beginShutdown(): void;
  /** Stops accepting connections, waits up to graceMs for in-flight requests, then cuts the rest. */
  close(graceMs: number): Promise<void>;
}

/**
 * Host and port of a listen address. `localhost` is bound as 127.0.0.1: node binds the first address the resolver
 * gives, which is ::1 where /etc/hosts also lists `::1 localhost` (a Docker container's does, and RFC 6724 puts ::1
 * first), so `admin.listen: localhost:9090` answered on ::1 only while the image's HEALTHCHECK asks 127.0.0.1, and
 * where IPv6 is turned off the listener could not start at all (EADDRNOTAVAIL). `[::1]` asks for IPv6 explicitly.
 */
export function parseListen(listen: string): { host: string; port: number } {
  const i = listen.lastIndexOf(":");
  const named = listen.slice(0, i).replace(/^\[(.*)\]$/, "$1");
  const host = named.toLowerCase() === "localhost" ? "127.0.0.1" : named;
  const port = Number(listen.slice(i + 1));
  if (i <= 0 || !named || !Number.isInteger(port) || port < 0 || port > 65535) {
    throw new Error(`http: "${listen}" is not host:port`);
  }
  return { host, port };
}

/** Whether a listen address can only be reached from this machine. */
export function isLoopback(listen: string): boolean {
  const { host } = parseListen(listen);
  return host === "::1" || /^127\./.test(host);
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

/** Whether the request announces a body (a length above 0, or chunks). */
export function hasBody(req: IncomingMessage): boolean {
  const length = req.headers["content-length"];
  return req.headers["transfer-encoding"] !== undefined || (length !== undefined && length.trim() !== "0");
}

/** A GET/HEAD-only route: 405 for other methods. */
export function methodNotAllowed(res: ServerResponse, method: string, path: string): void {
  sendJson(
    res,
    405,
    { error: "method_not_allowed", message: `${method} is not allowed on ${path}; use GET` },
    { Allow: "GET, HEAD" },
  );
}

/** Lazily, once per registry: prom-client refuses a second metric of one name. */
const dropped = new WeakMap<Registry, Counter<"listener">>();
function droppedCounter(registry: Registry): Counter<"listener"> {
  let counter = dropped.get(registry);
  if (!counter) {
    counter = new Counter({
      name: "calbridge_http_connections_dropped_total",
      help: "Connections closed at once because the listener had its maximum of open connections",
      labelNames: ["listener"] as const,
      registers: [registry],
    });
    dropped.set(registry, counter);
  }
  return counter;
}

export async function createHttpServer(options: HttpServerOptions): Promise<HttpServer> {
  const routes = options.routes ?? [];
  const log = (options.logger ?? silentLogger).child({ component: "http", listener: options.name });
  const { host, port } = parseListen(options.listen);
  let shuttingDown = false;
  let inFlight = 0;
  const listener: Listener = {
    get shuttingDown() {
      return shuttingDown;
    },
  };

  const healthz = (res: ServerResponse) => {
    if (shuttingDown) sendJson(res, 503, { status: "shutting_down" });
    else sendJson(res, 200, { status: "ok" });
  };

  const dispatch = async (req: IncomingMessage, res: ServerResponse) => {
    const method = req.method ?? "GET";
    let path: string;
    try {
      path = new URL(req.url ?? "/", "http://x").pathname;
    } catch {
      return sendJson(
        res,
        400,
        { error: "bad_request", message: "unparseable request target" },
        { Connection: "close" },
      );
    }
    if (path === "/healthz") {
      if (method === "GET" || method === "HEAD") return healthz(res);
      return methodNotAllowed(res, method, path);
    }
    for (const route of routes) if (await route(req, res, listener)) return;
    // Nobody reads the body of an unknown route: the connection closes instead of draining it.
    sendJson(
      res,
      404,
      { error: "not_found", message: `no route for ${method} ${path.slice(0, 200)}` },
      hasBody(req) ? { Connection: "close" } : {},
    );
  };

  const server = createServer(
    {
      requestTimeout: options.requestTimeoutMs ?? 30_000,
      headersTimeout: options.headersTimeoutMs ?? 10_000,
      // How often node checks those two timeouts (default 30 s, which let a slow request live up to twice as long).
      connectionsCheckingInterval: 1000,
    },
    (req, res) => {
      const started = performance.now();
      inFlight++;
      // While draining, every answer closes its connection, so keep-alive clients cannot hold the server open.
      if (shuttingDown) res.setHeader("Connection", "close");
      res.once("close", () => {
        inFlight--;
        if (shuttingDown) server.closeIdleConnections();
        const ms = Math.round(performance.now() - started);
        log.debug({ method: req.method, path: pathOnly(req.url), status: res.statusCode, ms }, "http request");
      });
      dispatch(req, res).catch((err: unknown) => {
        log.error({ err, method: req.method, path: pathOnly(req.url) }, "http: handler failed");
        if (!res.headersSent)
          sendJson(res, 500, { error: "internal_error", message: "the request failed; see the logs" });
        else res.destroy();
      });
    },
  );
  if (options.maxConnections !== undefined) {
    server.maxConnections = options.maxConnections;
    const counter = options.registry ? droppedCounter(options.registry) : undefined;
    let warnedAt = Number.NEGATIVE_INFINITY;
    server.on("drop", () => {
      counter?.inc({ listener: options.name });
      // At most a line a minute: a flood must not flood the log too; the metric counts every connection.
      if (performance.now() - warnedAt < 60_000) return;
      warnedAt = performance.now();
      log.warn(
        { max_connections: options.maxConnections },
        "http: connections refused, the listener has its maximum open (see calbridge_http_connections_dropped_total)",
      );
    });
  }

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

/**
 * A request's path for the log, without its query: queries carry secrets (an invite's token, Google's authorization
 * code, percent-encoded so the log's scrubber, which knows their plain form, would not recognise them).
 */
function pathOnly(url: string | undefined): string | undefined {
  if (url === undefined) return undefined;
  const q = url.indexOf("?");
  return (q === -1 ? url : url.slice(0, q)).slice(0, 200);
}
