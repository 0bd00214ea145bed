// Owns the simulated service's HTTP surface: routing under /v1, Bearer auth, the rate limit, fault injection,
// envelopes ({data, meta} and {error}), and the request log.
import type { IncomingMessage, ServerResponse } from "node:http";
import { setTimeout as delay } from "node:timers/promises";
import type { Clock } from "../../clock.ts";
import type { Faults } from "./faults.ts";
import { SimError } from "./model.ts";
import { availability, type DateReading, listAppointments, paginate } from "./queries.ts";
import type { Rng } from "./random.ts";
import type { FixedWindowLimiter } from "./ratelimit.ts";
import type { BookingStore } from "./store.ts";
import { cancelledForm, createdForm, fullForm, updatedForm } from "./views.ts";
import type { WebhookDispatcher } from "./webhooks.ts";

export interface RequestLogEntry {
  seq: number;
  /** Simulator clock, epoch ms, at arrival. */
  at: number;
  method: string;
  path: string;
  query: string;
  /** Route pattern, e.g. "GET /v1/appointments/:id" ("unknown" when none matched). */
  route: string;
  /** Status sent; undefined when the answer was dropped. */
  status: number | undefined;
  requestId: string;
  outcome: "ok" | "error" | "unauthorized" | "rate_limited" | "fault" | "dropped" | "malformed";
  userAgent: string | undefined;
  accept: string | undefined;
  contentType: string | undefined;
  /** Whether the Bearer credential matched (the key itself is not kept). */
  authorized: boolean;
}

export interface HttpContext {
  apiKey: string;
  clock: Clock;
  rng: Rng;
  store: BookingStore;
  limiter: FixedWindowLimiter;
  faults: Faults;
  webhooks: WebhookDispatcher;
  log: RequestLogEntry[];
  /** How date_from/date_to are read (mutable: tests change it on a running simulator). */
  dates: DateReading;
  /** Send a `Date` header of the service's clock (as HTTP servers do); false: none (the spec shows none). */
  dateHeader: boolean;
}

interface Reply {
  status: number;
  data?: unknown;
  meta?: Record<string, unknown>;
}

type Handler = (ctx: HttpContext, match: { id?: string; query: URLSearchParams; body: unknown }) => Reply;

const ROUTES: { method: string; pattern: RegExp; route: string; handler: Handler }[] = [
  {
    method: "GET",
    pattern: /^\/v1\/appointments$/,
    route: "GET /v1/appointments",
    handler: (c, m) => ({ status: 200, ...listAppointments(c.store, m.query, c.dates) }),
  },
  {
    method: "POST",
    pattern: /^\/v1\/appointments$/,
    route: "POST /v1/appointments",
    handler: (c, m) => ({ status: 201, data: createdForm(c.store.create(m.body), c.store) }),
  },
  {
    method: "GET",
    pattern: /^\/v1\/appointments\/([^/]+)$/,
    route: "GET /v1/appointments/:id",
    handler: (c, m) => ({ status: 200, data: fullForm(c.store.get(m.id!), c.store) }),
  },
  {
    method: "PATCH",
    pattern: /^\/v1\/appointments\/([^/]+)$/,
    route: "PATCH /v1/appointments/:id",
    handler: (c, m) => ({ status: 200, data: updatedForm(c.store.update(m.id!, m.body)) }),
  },
  {
    method: "POST",
    pattern: /^\/v1\/appointments\/([^/]+)\/cancel$/,
    route: "POST /v1/appointments/:id/cancel",
    handler: (c, m) => ({ status: 200, data: cancelledForm(c.store.cancel(m.id!, m.body ?? {})) }),
  },
  {
    method: "GET",
    pattern: /^\/v1\/availability$/,
    route: "GET /v1/availability",
    handler: (c, m) => ({ status: 200, data: availability(c.store, m.query) }),
  },
  {
    method: "GET",
    pattern: /^\/v1\/services$/,
    route: "GET /v1/services",
    handler: (c, m) => ({ status: 200, ...paginate([...c.store.services.values()], m.query) }),
  },
  {
    method: "GET",
    pattern: /^\/v1\/webhooks$/,
    route: "GET /v1/webhooks",
    handler: (c, m) => ({ status: 200, ...paginate(c.webhooks.list(), m.query) }),
  },
];

function errorBody(code: string, message: string, details: Record<string, unknown>, requestId: string): string {
  return JSON.stringify({ error: { code, message, details }, meta: { request_id: requestId } });
}

async function readBody(req: IncomingMessage): Promise<string> {
  const chunks: Buffer[] = [];
  for await (const chunk of req) chunks.push(chunk as Buffer);
  return Buffer.concat(chunks).toString("utf8");
}

export function createHandler(ctx: HttpContext): (req: IncomingMessage, res: ServerResponse) => void {
  let seq = 0;
  return (req, res) => {
    // The service's own time, not the host's: a simulator on a skewed or manual clock says so as a real one would.
    if (ctx.dateHeader) res.setHeader("date", new Date(ctx.clock.now()).toUTCString());
    else res.sendDate = false;
    handle(ctx, ++seq, req, res).catch((e: unknown) => {
      if (!res.headersSent) {
        res.writeHead(500, { "content-type": "application/json" });
        res.end(errorBody("internal_error", e instanceof Error ? e.message : String(e), {}, "req_unknown"));
      }
    });
  };
}

async function handle(ctx: HttpContext, seq: number, req: IncomingMessage, res: ServerResponse): Promise<void> {
  const url = new URL(req.url ?? "/", "http://simulator.invalid");
  const method = (req.method ?? "GET").toUpperCase();
  const path = url.pathname;
  const requestId = `req_${ctx.rng.token(16)}`;
  const found = ROUTES.map((r) => ({ r, m: r.pattern.exec(path) })).filter((x) => x.m !== null);
  const hit = found.find((x) => x.r.method === method);
  const entry: RequestLogEntry = {
    seq,
    at: ctx.clock.now(),
    method,
    path,
    query: url.search,
    route: hit?.r.route ?? "unknown",
    status: undefined,
    requestId,
    outcome: "ok",
    userAgent: req.headers["user-agent"],
    accept: req.headers.accept,
    contentType: req.headers["content-type"],
    authorized: req.headers.authorization === `Bearer ${ctx.apiKey}`,
  };
  ctx.log.push(entry);
  const rawBody = await readBody(req);
  if (ctx.faults.latencyMs > 0) await delay(ctx.faults.latencyMs);

  const send = (status: number, body: string, extra: Record<string, string>, outcome: RequestLogEntry["outcome"]) => {
    entry.status = status;
    entry.outcome = outcome;
    res.writeHead(status, { "content-type": "application/json", "x-request-id": requestId, ...extra });
    res.end(body);
  };
  const fail = (e: SimError, headers: Record<string, string>, outcome: RequestLogEntry["outcome"]) =>
    send(e.status, errorBody(e.code, e.message, e.details, requestId), headers, outcome);

  if (!entry.authorized) {
    return fail(new SimError(401, "unauthorized", "missing or invalid API key"), ctx.limiter.peek(), "unauthorized");
  }
  const admission = ctx.limiter.admit();
  if (!admission.allowed) {
    return fail(new SimError(429, "rate_limited", "rate limit exceeded"), admission.headers, "rate_limited");
  }
  const rl = admission.headers;
  const before = ctx.faults.before(method, path);
  if (before?.kind === "fail") {
    const code = before.code ?? (before.status >= 500 ? "internal_error" : "simulated_error");
    const headers = before.retryAfter !== undefined ? { ...rl, "retry-after": String(before.retryAfter) } : rl;
    return fail(
      new SimError(before.status, code, before.message ?? (before.code ? `refused: ${code}` : "simulated failure")),
      headers,
      "fault",
    );
  }
  if (before?.kind === "ignore") {
    const id = hit?.m?.[1] === undefined ? undefined : decodeURIComponent(hit.m[1]);
    const appt = id === undefined ? undefined : ctx.store.appointments.get(id);
    const data = appt ? fullForm(appt, ctx.store) : null;
    return send(before.status, JSON.stringify({ data, meta: { request_id: requestId } }), rl, "fault");
  }
  if (!hit) {
    if (found.length > 0)
      return fail(new SimError(405, "method_not_allowed", `${method} not allowed on ${path}`), rl, "error");
    return fail(new SimError(404, "not_found", `no route ${method} ${path}`), rl, "error");
  }
  let body: unknown;
  if (rawBody.trim() !== "") {
    try {
      body = JSON.parse(rawBody);
    } catch {
      return fail(
        new SimError(400, "invalid_request", "request body is not valid JSON", { field: "body" }),
        rl,
        "error",
      );
    }
  }
  let reply: Reply;
  try {
    const id = hit.m?.[1] === undefined ? undefined : decodeURIComponent(hit.m[1]);
    reply = hit.r.handler(ctx, { ...(id === undefined ? {} : { id }), query: url.searchParams, body });
  } catch (e) {
    if (e instanceof SimError) return fail(e, rl, "error");
    throw e;
  }
  const after = ctx.faults.after(method, path);
  if (after?.kind === "drop") {
    entry.outcome = "dropped";
    res.socket?.destroy();
    return;
  }
  if (after?.kind === "malformed") return send(after.status, after.body, rl, "malformed");
  const meta = { ...(reply.meta ?? {}), request_id: requestId };
  send(reply.status, JSON.stringify({ data: reply.data, meta }), rl, "ok");
}
