// Owns the HTTP edge of booking webhooks: raw body under a limit, precise statuses, signature check, durable accept
// into the inbox and only then 2xx; never throws, never answers 5xx except when the store fails (the sender retries).
import { createHash } from "node:crypto";
import type { IncomingMessage, OutgoingHttpHeaders, ServerResponse } from "node:http";
import type { Registry } from "prom-client";
import { type Clock, systemClock } from "../clock.ts";
import { type Logger, secrets as logSecrets, silentLogger } from "../log.ts";
import { UnstorableValueError } from "../store/store.ts";
import { appointmentIdOf, parseEventBody, peekEventId } from "./event.ts";
import type { WebhookInbox } from "./inbox.ts";
import { webhookMetrics } from "./metrics.ts";
import type { InboxProcessor } from "./processor.ts";
import { readRawBody } from "./raw-body.ts";
import { SIGNATURE_HEADER, secretHints, verifySignature } from "./signature.ts";

export interface WebhookHandlerOptions {
  /** The URL path served, e.g. /webhooks/booking; other paths are left to the caller. */
  path: string;
  /** Every valid signing secret (more than one while rotating). */
  secrets: string[];
  /** Accepted age (and advance) of the signature timestamp; default 300 s, as the booking service asks. */
  toleranceSec?: number;
  /** Bodies above this are refused with 413; default 1 MiB. */
  maxBodyBytes?: number;
  inbox: WebhookInbox;
  /** Nudged with each accepted id (a no-op when it already took the entry from the inbox). */
  processor?: InboxProcessor;
  clock?: Clock;
  logger?: Logger;
  registry?: Registry;
}

/** Resolves false when the request is not for this route; otherwise answers it and resolves true. */
export type WebhookHandler = (req: IncomingMessage, res: ServerResponse) => Promise<boolean>;

const SHORT_REASON = {
  missing: "missing signature header",
  malformed: "malformed signature header",
  stale: "signature timestamp too old",
  future: "signature timestamp in the future",
  mismatch: "signature mismatch",
} as const;

export function createWebhookHandler(options: WebhookHandlerOptions): WebhookHandler {
  const { path, inbox, processor } = options;
  const secrets = [...options.secrets];
  const toleranceSec = options.toleranceSec ?? 300;
  const maxBodyBytes = options.maxBodyBytes ?? 1024 * 1024;
  const clock = options.clock ?? systemClock;
  const log = (options.logger ?? silentLogger).child({ component: "webhooks" });
  const metrics = webhookMetrics(options.registry);
  metrics.watchPending(inbox);
  for (const secret of secrets) logSecrets.add(secret);
  const hints = secretHints(secrets);
  for (const hint of hints) log.warn(hint);

  const count = (result: string) => metrics.deliveries.inc({ result });

  async function handle(req: IncomingMessage, res: ServerResponse, startedAt: number): Promise<void> {
    const ok = (body: object) => {
      reply(res, 200, body);
      metrics.responseSeconds.observe((performance.now() - startedAt) / 1000);
    };
    if (req.method !== "POST") {
      count("method_not_allowed");
      return reply(res, 405, { error: "method_not_allowed", message: "use POST" }, { allow: "POST" });
    }
    const read = await readRawBody(req, maxBodyBytes);
    if (!read.ok) {
      count(read.reason);
      if (read.reason === "aborted") return void log.debug("webhook request aborted by the client");
      log.warn(
        { max_body_bytes: maxBodyBytes, content_length: req.headers["content-length"] },
        "webhook body too large",
      );
      return reply(
        res,
        413,
        { error: "too_large", message: `body over ${maxBodyBytes} bytes` },
        { connection: "close" },
      );
    }
    const raw = read.body;
    const header = req.headers[SIGNATURE_HEADER];
    const verdict = verifySignature({
      rawBody: raw,
      header: Array.isArray(header) ? header.join(",") : header,
      secrets,
      toleranceSec,
      nowMs: clock.now(),
    });
    if (!verdict.ok) {
      const timing = verdict.reason === "stale" || verdict.reason === "future";
      count(timing ? "rejected_stale" : "rejected_signature");
      const fields = { reason: verdict.reason, event_id: peekEventId(raw), remote: req.socket.remoteAddress };
      log.warn(
        verdict.reason === "mismatch" && hints.length > 0 ? { ...fields, hint: hints.join(" ") } : fields,
        verdict.message,
      );
      const status = verdict.reason === "missing" || verdict.reason === "malformed" ? 400 : 401;
      return reply(res, status, { error: verdict.reason, message: SHORT_REASON[verdict.reason] });
    }
    // The spec does not say which Content-Type the sender uses: a signed body is judged by its bytes, not its label
    // (refusing it would fail every delivery until the sender disables the endpoint).
    const parsed = parseEventBody(raw);
    if (!parsed.ok && parsed.limit) {
      count("unprocessable");
      log.error(
        { reason: parsed.reason, event_id: peekEventId(raw), bytes: raw.length },
        "correctly signed webhook refused with 422: its body is over a structural limit. The signature verified, so it is authentic: the sender's payload is broken, or its signing secret is known to someone else",
      );
      return reply(res, 422, { error: "unprocessable", message: parsed.reason });
    }
    if (!parsed.ok) {
      const key = `malformed:${createHash("sha256").update(raw).digest("hex").slice(0, 32)}`;
      const eventId = peekEventId(raw);
      try {
        await inbox.deadLetter(key, {
          reason: `malformed: ${parsed.reason}`,
          bytes: raw.length,
          ...(eventId !== undefined ? { eventId } : {}),
        });
      } catch (error) {
        count("store_error");
        log.error({ err: error, event_id: eventId }, "malformed webhook not stored: the store failed; answering 503");
        return reply(res, 503, { error: "unavailable", message: "try again later" }, { "retry-after": "60" });
      }
      count("malformed");
      log.error(
        { reason: parsed.reason, dead_letter: key, event_id: eventId },
        "correctly signed webhook with a malformed body: kept in the dead letters and acknowledged, so the sender stops retrying",
      );
      return ok({ received: true });
    }
    const { event } = parsed;
    const ids = { event_id: event.id, event_type: event.type, appointment_id: appointmentIdOf(event) };
    let outcome: "accepted" | "duplicate";
    try {
      outcome = await inbox.accept(event, raw);
    } catch (error) {
      if (error instanceof UnstorableValueError) {
        // Never storable, so retrying cannot help: refused on its own (the rest of its batch was stored).
        count("unprocessable");
        log.error({ ...ids, err: error }, "correctly signed webhook refused with 422: the store cannot hold it");
        return reply(res, 422, { error: "unprocessable", message: "the event cannot be stored" });
      }
      count("store_error");
      log.error({ ...ids, err: error }, "webhook not stored: the store failed; answering 503 so the sender retries");
      return reply(res, 503, { error: "unavailable", message: "try again later" }, { "retry-after": "60" });
    }
    count(outcome);
    if (outcome === "duplicate") {
      log.info(ids, "duplicate webhook acknowledged");
      return ok({ received: true, duplicate: true });
    }
    log.info(ids, "webhook accepted");
    ok({ received: true });
    processor?.notify(event.id).catch((error: unknown) => log.warn({ ...ids, err: error }, "processor not nudged"));
  }

  return async (req, res) => {
    if (pathOf(req.url) !== path) return false;
    const startedAt = performance.now();
    try {
      await handle(req, res, startedAt);
    } catch (error) {
      count("internal_error");
      log.error({ err: error }, "webhook handler failed unexpectedly");
      if (!res.headersSent) reply(res, 500, { error: "internal" });
      else res.destroy();
    }
    return true;
  };
}

function pathOf(url: string | undefined): string | undefined {
  if (url === undefined) return undefined;
  const q = url.indexOf("?");
  return q === -1 ? url : url.slice(0, q);
}

function reply(res: ServerResponse, status: number, body: object, headers: OutgoingHttpHeaders = {}): void {
  const text = JSON.stringify(body);
  res.writeHead(status, { "content-type": "application/json", "content-length": Buffer.byteLength(text), ...headers });
  res.end(text);
}
