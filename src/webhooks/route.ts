// Owns the HTTP edge of booking webhooks: the signature header judged before any byte of the body is read, the raw body
// under its own limit, a shared memory budget and an idle timeout, precise statuses, the signature check, durable
// accept into the inbox and only then 2xx; never throws, never answers 5xx except when the store fails or the memory
// budget is spent (the sender retries).
import { createHash } from "node:crypto";
import type { IncomingMessage, OutgoingHttpHeaders, ServerResponse } from "node:http";
import { gunzipSync, inflateSync } from "node:zlib";
import type { Registry } from "prom-client";
import { type Clock, systemClock } from "../clock.ts";
import { type Logger, secrets as logSecrets, silentLogger } from "../log.ts";
import { UnstorableValueError } from "../store/store.ts";
import { describeError } from "../sync/errors.ts";
import { ByteBudget } from "./byte-budget.ts";
import { digestDecoded } from "./decoded-digest.ts";
import { appointmentIdOf, parseEventBody, peekEventId } from "./event.ts";
import type { WebhookInbox } from "./inbox.ts";
import { webhookMetrics } from "./metrics.ts";
import { drainOversized } from "./oversized.ts";
import { declaredLength, readRawBody } from "./raw-body.ts";
import { RejectionLog } from "./rejection-log.ts";
import {
  checkSignatureHeader,
  SIGNATURE_HEADER,
  type SignatureHeader,
  secretHints,
  signatureDigest,
  verifySignature,
} from "./signature.ts";

export interface WebhookHandlerOptions {
  /** The URL path served, e.g. /webhooks/booking; other paths are left to the caller. */
  path: string;
  /** Every valid signing secret (more than one while rotating). */
  secrets: string[];
  /** Accepted age (and advance) of the signature timestamp; default 300 s, as the booking service asks. */
  toleranceSec?: number;
  /** Bodies above this are not held: refused with 413, unless correctly signed and at most maxVerifiedBodyBytes. Default 64 KiB. */
  maxBodyBytes?: number;
  /**
   * A body over maxBodyBytes is still read up to this size without being held, to verify its signature; a correctly
   * signed one is acknowledged and kept in the dead letters (oversized.ts says why). Default 8 MiB; at most
   * maxBodyBytes turns it off.
   */
  maxVerifiedBodyBytes?: number;
  /** Bytes of bodies held at once across all requests in flight; beyond it, 503 with Retry-After. Default 32 MiB. */
  maxBufferedBytes?: number;
  /** A body that sends nothing for this long is answered 408 and its connection closed. Default 10 s. */
  bodyIdleTimeoutMs?: number;
  /**
   * A body not whole this long after it began is answered 408 too (a trickle inside the idle timeout), before the
   * listener's request limit (30 s) would end it as an abort. Default 20 s.
   */
  bodyTotalTimeoutMs?: number;
  /**
   * The same for a body over maxBodyBytes read on unheld (up to maxVerifiedBodyBytes, 128 times as much): counted from
   * when the body began, and just under the listener's request limit, so a large body on a slow link has what it had
   * before this limit existed, and only a trickle past it is answered 408 (not ended unsaid as an abort). Default 28 s.
   */
  oversizedTotalTimeoutMs?: number;
  /** Where deliveries are stored; its subscribers (the processor) take each accepted event from it. */
  inbox: WebhookInbox;
  clock?: Clock;
  logger?: Logger;
  registry?: Registry;
  /** Period of the refused-request log summary (default one minute). */
  rejectionLogPeriodMs?: number;
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

/** The answers to a stored (or already stored) delivery, written once. */
const RECEIVED = JSON.stringify({ received: true });
const RECEIVED_DUPLICATE = JSON.stringify({ received: true, duplicate: true });

/** Seconds a sender is asked to wait after a 503 for a spent memory budget. */
const BUSY_RETRY_AFTER = "10";

export function createWebhookHandler(options: WebhookHandlerOptions): WebhookHandler {
  const { path, inbox } = options;
  const secrets = [...options.secrets];
  const toleranceSec = options.toleranceSec ?? 300;
  const maxBodyBytes = options.maxBodyBytes ?? 64 * 1024;
  const maxVerifiedBodyBytes = options.maxVerifiedBodyBytes ?? 8 * 1024 * 1024;
  const budget = new ByteBudget(options.maxBufferedBytes ?? 32 * 1024 * 1024);
  const bodyIdleTimeoutMs = options.bodyIdleTimeoutMs ?? 10_000;
  const bodyTotalTimeoutMs = options.bodyTotalTimeoutMs ?? 20_000;
  const oversizedTotalTimeoutMs = options.oversizedTotalTimeoutMs ?? 28_000;
  const clock = options.clock ?? systemClock;
  const log = (options.logger ?? silentLogger).child({ component: "webhooks" });
  const rejections = new RejectionLog({
    logger: log,
    clock,
    what: "webhook requests",
    ...(options.rejectionLogPeriodMs !== undefined ? { periodMs: options.rejectionLogPeriodMs } : {}),
  });
  const metrics = webhookMetrics(options.registry);
  metrics.watchPending(inbox);
  for (const secret of secrets) logSecrets.add(secret);
  const hints = secretHints(secrets);
  for (const hint of hints) log.warn(hint);

  const count = (result: string) => metrics.deliveries.inc({ result });

  async function handle(req: IncomingMessage, res: ServerResponse, startedAt: number): Promise<void> {
    const ok = (text: string) => {
      replyText(res, 200, text);
      metrics.responseSeconds.observe((performance.now() - startedAt) / 1000);
    };
    const remote = req.socket.remoteAddress;
    if (req.method !== "POST") {
      count("method_not_allowed");
      return refuse(res, 405, { error: "method_not_allowed", message: "use POST" }, { allow: "POST" });
    }
    const header = req.headers[SIGNATURE_HEADER];
    const signature = Array.isArray(header) ? header.join(",") : header;
    // Judged before the body: a request without a plausible, current signature costs no memory and no reading.
    const pre = checkSignatureHeader(signature, toleranceSec, clock.now());
    if (!pre.ok) {
      const timing = pre.reason === "stale" || pre.reason === "future";
      count(timing ? "rejected_stale" : "rejected_signature");
      rejections.record(pre.reason, { remote, body_read: false }, pre.message);
      const status = timing ? 401 : 400;
      return refuse(res, status, { error: pre.reason, message: SHORT_REASON[pre.reason] });
    }
    const encoding = contentEncoding(req);
    if (encoding === "unsupported") {
      count("unsupported_encoding");
      const named = String(req.headers["content-encoding"]).slice(0, 40);
      rejections.record(
        "unsupported_encoding",
        { remote, content_encoding: named },
        "webhook body in an encoding calbridge does not decode",
      );
      return refuse(res, 415, { error: "unsupported_encoding", message: "send the body as is, or gzip or deflate" });
    }
    // When the body began to be awaited: its total time counts from here, also once it is read on unheld (oversized).
    const bodyBegan = performance.now();
    const read = await readRawBody(req, {
      maxBytes: maxBodyBytes,
      budget,
      idleTimeoutMs: bodyIdleTimeoutMs,
      totalTimeoutMs: bodyTotalTimeoutMs,
    });
    if (!read.ok) {
      if (read.reason === "too_large" && maxVerifiedBodyBytes > maxBodyBytes) {
        const declared = declaredLength(req);
        if (declared === undefined || declared <= maxVerifiedBodyBytes)
          return oversized(req, res, pre, read.consumed ?? [], bodyBegan, ok, encoding);
      }
      count(read.reason);
      if (read.reason === "aborted") return void log.debug("webhook request aborted by the client");
      if (read.reason === "too_large") {
        rejections.record(
          read.reason,
          { remote, max_body_bytes: maxBodyBytes, content_length: declaredLength(req) },
          "webhook body too large",
        );
        const limit = Math.max(maxBodyBytes, maxVerifiedBodyBytes);
        return refuse(res, 413, { error: "too_large", message: `body over ${limit} bytes` });
      }
      if (read.reason === "timeout") {
        rejections.record(
          read.reason,
          { remote, idle_ms: bodyIdleTimeoutMs, total_ms: bodyTotalTimeoutMs },
          "webhook body stalled or trickled past its time; connection closed",
        );
        return refuse(res, 408, { error: "timeout", message: "the body stopped arriving" });
      }
      rejections.record(
        read.reason,
        { remote, max_buffered_bytes: budget.limit, content_length: declaredLength(req) },
        "webhook refused: the memory budget for bodies in flight is spent (a flood of uploads?); answering 503",
      );
      return refuse(
        res,
        503,
        { error: "busy", message: "too many bodies in flight; try again later" },
        { "retry-after": BUSY_RETRY_AFTER },
      );
    }
    try {
      await verified(req, res, read.body, pre, ok, encoding);
    } finally {
      read.release();
    }
  }

  /** A body over max_body_bytes with a current signature header: read to its end unheld, and judged by its signature. */
  async function oversized(
    req: IncomingMessage,
    res: ServerResponse,
    header: SignatureHeader,
    consumed: readonly Buffer[],
    bodyBegan: number,
    ok: (text: string) => void,
    encoding: "gzip" | "deflate" | undefined,
  ): Promise<void> {
    const remote = req.socket.remoteAddress;
    const drained = await drainOversized(req, {
      consumed,
      maxBytes: maxVerifiedBodyBytes,
      idleTimeoutMs: bodyIdleTimeoutMs,
      // From when the body began (a chunked one was partly read already), just under the listener's request limit: a
      // trickle inside the idle timeout is answered 408 as stalled, not ended by the listener as an abort; a large body
      // on a slow link is not held to a held body's 20 s (2.8 MB at 125 KiB/s was refused, and after the sender's
      // retries the endpoint disabled: review19).
      totalTimeoutMs: Math.max(0, oversizedTotalTimeoutMs - (performance.now() - bodyBegan)),
      digest: signatureDigest(header, secrets),
      toleranceSec,
      now: () => clock.now(),
      ...(encoding
        ? { decoded: { encoding, digest: signatureDigest(header, secrets), maxBytes: maxVerifiedBodyBytes } }
        : {}),
    });
    if (!drained.ok) {
      count(drained.reason);
      if (drained.reason === "aborted") return void log.debug("webhook request aborted by the client");
      if (drained.reason === "timeout") {
        rejections.record(
          "timeout",
          { remote, idle_ms: bodyIdleTimeoutMs, total_ms: oversizedTotalTimeoutMs },
          "webhook body stalled or trickled past its time; connection closed",
        );
        return refuse(res, 408, { error: "timeout", message: "the body stopped arriving" });
      }
      rejections.record(
        "too_large",
        { remote, max_verified_body_bytes: maxVerifiedBodyBytes, content_length: declaredLength(req) },
        "webhook body too large",
      );
      return refuse(res, 413, { error: "too_large", message: `body over ${maxVerifiedBodyBytes} bytes` });
    }
    const { verdict, bytes } = drained;
    if (!verdict.ok) {
      const timing = verdict.reason === "stale" || verdict.reason === "future";
      count(timing ? "rejected_stale" : "rejected_signature");
      rejections.record(verdict.reason, { remote, bytes }, verdict.message);
      return reply(res, 401, { error: verdict.reason, message: SHORT_REASON[verdict.reason] });
    }
    return keepOversized(res, drained.sha256, bytes, ok);
  }

  /** A correctly signed body over max_body_bytes (as sent, or once decoded): kept in the dead letters, acknowledged. */
  async function keepOversized(
    res: ServerResponse,
    sha256: string,
    bytes: number,
    ok: (text: string) => void,
    decoded?: "decoded",
  ): Promise<void> {
    const key = `oversized:${sha256.slice(0, 32)}`;
    const size = decoded ? `${bytes} bytes as sent, more than ${maxBodyBytes} once decoded` : `${bytes} bytes`;
    const reason = `over webhooks.max_body_bytes (${size}, at most ${maxBodyBytes} are kept): not read as an event`;
    try {
      await inbox.deadLetter(key, { reason, bytes });
    } catch (error) {
      count("store_error");
      log.error({ err: error, bytes }, "oversized webhook not stored: the store failed; answering 503");
      return reply(res, 503, { error: "unavailable", message: "try again later" }, { "retry-after": "60" });
    }
    count("oversized");
    log.error(
      { dead_letter: key, bytes, max_body_bytes: maxBodyBytes },
      "correctly signed webhook over webhooks.max_body_bytes: acknowledged without reading it as an event (a refusal would have the sender retry it and then disable the endpoint) and kept in the dead letters; the next reconciliation brings its appointment in step. Raise webhooks.max_body_bytes if such bodies are expected",
    );
    ok(RECEIVED);
  }

  async function verified(
    req: IncomingMessage,
    res: ServerResponse,
    raw: Buffer,
    header: SignatureHeader,
    ok: (text: string) => void,
    encoding?: "gzip" | "deflate",
  ): Promise<void> {
    // A compressed body (Content-Encoding gzip or deflate: a sender, or a proxy, may compress) is decoded, within the
    // body limit; its signature may cover the bytes as sent or as decoded (the spec does not say), and either will do.
    // Not decoded, it was acknowledged and set aside as "not JSON": the change it announced lost.
    const decoded = encoding ? decode(raw, encoding, maxBodyBytes) : undefined;
    const check = (rawBody: Buffer) => verifySignature({ rawBody, header, secrets, toleranceSec, nowMs: clock.now() });
    let verdict = check(raw);
    if (!verdict.ok && verdict.reason === "mismatch" && decoded instanceof Buffer) verdict = check(decoded);
    // Small as sent but over the limit once decoded: its signature may cover the decoded bytes, which are then checked
    // as they are decoded, without holding them, up to max_verified_body_bytes (as for a body over the limit as sent).
    const decodesTooLarge = isTooLarge(decoded);
    if (
      !verdict.ok &&
      verdict.reason === "mismatch" &&
      encoding &&
      decodesTooLarge &&
      maxVerifiedBodyBytes > maxBodyBytes
    ) {
      const digest = signatureDigest(header, secrets);
      if ((await digestDecoded(raw, encoding, digest, maxVerifiedBodyBytes)).ok)
        verdict = digest.verdict(toleranceSec, clock.now());
    }
    if (!verdict.ok) {
      const timing = verdict.reason === "stale" || verdict.reason === "future";
      count(timing ? "rejected_stale" : "rejected_signature");
      const fields = { event_id: peekEventId(raw), remote: req.socket.remoteAddress };
      rejections.record(
        verdict.reason,
        verdict.reason === "mismatch" && hints.length > 0 ? { ...fields, hint: hints.join(" ") } : fields,
        verdict.message,
      );
      const status = verdict.reason === "missing" || verdict.reason === "malformed" ? 400 : 401;
      return reply(res, status, { error: verdict.reason, message: SHORT_REASON[verdict.reason] });
    }
    // The spec does not say which Content-Type the sender uses: a signed body is judged by its bytes, not its label
    // (refusing it would fail every delivery until the sender disables the endpoint).
    // A signed body that can never be processed (malformed, or over a structural limit such as nesting depth) is kept
    // in the dead letters and acknowledged: any other answer makes the sender retry it until it disables the endpoint
    // (after 7 failures), which would stop every later webhook too.
    const setAside = async (reason: string, result: "malformed" | "unprocessable") => {
      const key = `malformed:${createHash("sha256").update(raw).digest("hex").slice(0, 32)}`;
      const eventId = peekEventId(raw);
      try {
        await inbox.deadLetter(key, { reason, bytes: raw.length, ...(eventId !== undefined ? { eventId } : {}) });
      } catch (error) {
        count("store_error");
        log.error(
          { err: error, event_id: eventId },
          "unprocessable webhook not stored: the store failed; answering 503",
        );
        return reply(res, 503, { error: "unavailable", message: "try again later" }, { "retry-after": "60" });
      }
      count(result);
      log.error(
        { reason, dead_letter: key, event_id: eventId, bytes: raw.length },
        "correctly signed webhook that cannot be processed: kept in the dead letters and acknowledged, so the sender stops retrying. The signature verified, so it is authentic: the sender's payload is broken, or its signing secret is known to someone else",
      );
      return ok(RECEIVED);
    };
    if (decodesTooLarge)
      return keepOversized(res, createHash("sha256").update(raw).digest("hex"), raw.length, ok, "decoded");
    if (decoded instanceof Error)
      return setAside(`malformed: ${encoding} body not decoded: ${decoded.message}`, "malformed");
    const parsed = parseEventBody(decoded ?? raw);
    if (!parsed.ok)
      return setAside(
        `${parsed.limit ? "over a limit" : "malformed"}: ${parsed.reason}`,
        parsed.limit ? "unprocessable" : "malformed",
      );
    const { event } = parsed;
    const ids = { event_id: event.id, event_type: event.type, appointment_id: appointmentIdOf(event) };
    let outcome: "accepted" | "duplicate";
    try {
      outcome = await inbox.accept(event, raw);
    } catch (error) {
      // Never storable, so retrying cannot help: set aside on its own (the rest of its batch was stored).
      if (error instanceof UnstorableValueError)
        return setAside(`unstorable: ${describeError(error)}`, "unprocessable");
      count("store_error");
      log.error({ ...ids, err: error }, "webhook not stored: the store failed; answering 503 so the sender retries");
      return reply(res, 503, { error: "unavailable", message: "try again later" }, { "retry-after": "60" });
    }
    count(outcome);
    if (outcome === "duplicate") {
      log.info(ids, "duplicate webhook acknowledged");
      return ok(RECEIVED_DUPLICATE);
    }
    log.info(ids, "webhook accepted");
    ok(RECEIVED);
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

/** The body's Content-Encoding: none (absent, identity), gzip or deflate (which calbridge decodes), or another one. */
function contentEncoding(req: IncomingMessage): "gzip" | "deflate" | "unsupported" | undefined {
  const value = req.headers["content-encoding"];
  if (value === undefined) return undefined;
  const v = value.trim().toLowerCase();
  if (v === "" || v === "identity") return undefined;
  if (v === "gzip" || v === "x-gzip") return "gzip";
  return v === "deflate" ? "deflate" : "unsupported";
}

/** The decoded body, at most `maxBytes` long; an Error when it is not valid, or decodes to more. */
function decode(raw: Buffer, encoding: "gzip" | "deflate", maxBytes: number): Buffer | Error {
  try {
    const options = { maxOutputLength: maxBytes };
    return encoding === "gzip" ? gunzipSync(raw, options) : inflateSync(raw, options);
  } catch (err) {
    return err instanceof Error ? err : new Error(String(err));
  }
}

/** Whether decoding stopped because the body decodes to more than the limit (zlib's maxOutputLength). */
function isTooLarge(decoded: Buffer | Error | undefined): boolean {
  return decoded instanceof Error && (decoded as NodeJS.ErrnoException).code === "ERR_BUFFER_TOO_LARGE";
}

function pathOf(url: string | undefined): string | undefined {
  if (url === undefined) return undefined;
  const q = url.indexOf("?");
  return q === -1 ? url : url.slice(0, q);
}

/**
 * Answers without reading the body, and closes the connection as soon as the answer is out (node then destroys the
 * socket instead of reading the rest of the body to keep the connection alive, which is what a flood wants).
 */
function refuse(res: ServerResponse, status: number, body: object, headers: OutgoingHttpHeaders = {}): void {
  reply(res, status, body, { connection: "close", ...headers });
}

function reply(res: ServerResponse, status: number, body: object, headers: OutgoingHttpHeaders = {}): void {
  replyText(res, status, JSON.stringify(body), headers);
}

function replyText(res: ServerResponse, status: number, text: string, headers?: OutgoingHttpHeaders): void {
  res.writeHead(status, {
    "content-type": "application/json",
    "content-length": Buffer.byteLength(text),
    ...(headers ?? {}),
  });
  res.end(text);
}
