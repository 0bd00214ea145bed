// Owns the admin routes (GET /readyz, /metrics, /status, /status.html, /history/ID), served on the admin listener
// only, and their optional bearer token: without it they answer 401 with WWW-Authenticate, the token compared in
// constant time.
import { createHash, timingSafeEqual } from "node:crypto";
import type { IncomingMessage, ServerResponse } from "node:http";
import type { Registry } from "prom-client";
import { type Clock, systemClock } from "../clock.ts";
import { checkReadiness, type HealthSource, type ReadinessOptions } from "./health.ts";
import { HISTORY_PREFIX, type HistorySource, renderRecentHistory, serveHistory } from "./history-page.ts";
import { methodNotAllowed, type RouteHandler, sendJson } from "./http.ts";
import { renderStatusHtml } from "./status-page.ts";

export interface AdminRoutesOptions {
  health: HealthSource;
  registry: Registry;
  readiness?: ReadinessOptions;
  clock?: Clock;
  /** When set, every admin route requires `Authorization: Bearer <token>`. */
  bearerToken?: string;
  /** Appointment histories: GET /history/APPOINTMENT_ID. */
  history?: { read: HistorySource; retentionDays: number };
}

export const ADMIN_PATHS = ["/readyz", "/metrics", "/status", "/status.html"] as const;

const HTML_HEADERS = {
  "Content-Security-Policy": "default-src 'none'; style-src 'unsafe-inline'",
  "X-Content-Type-Options": "nosniff",
  "Cache-Control": "no-store",
  Vary: "Accept",
};

function send(res: ServerResponse, status: number, type: string, body: string, headers: Record<string, string> = {}) {
  res.writeHead(status, { "Content-Type": type, "Content-Length": Buffer.byteLength(body), ...headers });
  res.end(body);
}

/** Hashes first, so the comparison takes the same time whatever the lengths (timingSafeEqual wants equal lengths). */
function sameToken(given: string, expected: string): boolean {
  const digest = (v: string) => createHash("sha256").update(v).digest();
  return timingSafeEqual(digest(given), digest(expected));
}

function authorized(req: IncomingMessage, token: string): boolean {
  const match = /^Bearer[ ]+(\S+)\s*$/i.exec(req.headers.authorization ?? "");
  return match !== null && sameToken(match[1]!, token);
}

export function adminRoutes(options: AdminRoutesOptions): RouteHandler {
  const { health, registry, bearerToken } = options;
  const clock = options.clock ?? systemClock;
  const paths = new Set<string>(ADMIN_PATHS);

  return async (req, res, listener) => {
    const path = new URL(req.url ?? "/", "http://x").pathname;
    const history = options.history && path.startsWith(HISTORY_PREFIX) ? options.history : undefined;
    if (!paths.has(path) && !history) return false;
    if (bearerToken !== undefined && !authorized(req, bearerToken)) {
      sendJson(
        res,
        401,
        { error: "unauthorized", message: "this route needs Authorization: Bearer <admin.bearer_token>" },
        { "WWW-Authenticate": 'Bearer realm="calbridge admin"' },
      );
      return true;
    }
    const method = req.method ?? "GET";
    if (method !== "GET" && method !== "HEAD") {
      methodNotAllowed(res, method, path);
      return true;
    }
    if (path === "/readyz") {
      if (listener.shuttingDown) sendJson(res, 503, { status: "shutting_down" });
      else {
        const r = await checkReadiness(health, options.readiness ?? {}, clock.now());
        sendJson(res, r.ready ? 200 : 503, { status: r.ready ? "ready" : "not_ready", checks: r.checks });
      }
    } else if (history) {
      await serveHistory(path, req.headers.accept, res, { ...history, htmlHeaders: HTML_HEADERS });
    } else if (path === "/metrics") {
      send(res, 200, registry.contentType, await registry.metrics(), { "Cache-Control": "no-store" });
    } else {
      const snapshot = await health.status();
      if (path === "/status.html" || /\btext\/html\b/.test(req.headers.accept ?? "")) {
        send(
          res,
          200,
          "text/html; charset=utf-8",
          renderStatusHtml(snapshot, snapshot.history ? renderRecentHistory(snapshot.history.recent) : ""),
          HTML_HEADERS,
        );
      } else sendJson(res, 200, snapshot, { Vary: "Accept" });
    }
    return true;
  };
}
