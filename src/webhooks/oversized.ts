// Owns reading a webhook body that passed `webhooks.max_body_bytes` to its end without holding it: each chunk goes
// through the signature's HMAC and a SHA-256 (the body's name in the dead letters) and is dropped. The booking
// service retries a refused delivery 7 times and then disables the endpoint (spec, "Retry policy"), and the spec
// names no limit on body or field sizes ("Limits on body size, field lengths ...: not shown"): answering 413 to an
// authentic event that is merely large would, a day and a half later, stop every webhook. Verified, it is
// acknowledged and set aside instead, and the reconciliation, which reads the booking itself, brings its appointment
// in step.
import { createHash } from "node:crypto";
import type { IncomingMessage } from "node:http";
import type { SignatureDigest, VerifyResult } from "./signature.ts";

export type DrainResult =
  | { ok: true; bytes: number; sha256: string; verdict: VerifyResult }
  | { ok: false; reason: "too_large" | "timeout" | "aborted" };

export interface DrainOptions {
  /** What readRawBody had read of the body before it passed its limit (nothing when Content-Length said so). */
  consumed: readonly Buffer[];
  /** Read at most this many bytes in all; beyond it, "too_large". */
  maxBytes: number;
  /** The body fails with "timeout" when no byte arrives for this long. Default: none. */
  idleTimeoutMs?: number;
  /** The signature's running HMAC (signature.ts `signatureDigest`), fed every byte. */
  digest: SignatureDigest;
  toleranceSec: number;
  now(): number;
}

export function drainOversized(req: IncomingMessage, options: DrainOptions): Promise<DrainResult> {
  const { maxBytes, digest } = options;
  const sha = createHash("sha256");
  let size = 0;
  const take = (chunk: Buffer) => {
    size += chunk.length;
    digest.update(chunk);
    sha.update(chunk);
  };
  for (const chunk of options.consumed) take(chunk);
  return new Promise((resolve) => {
    let finished = false;
    let timer: NodeJS.Timeout | undefined;
    const settle = (result: DrainResult) => {
      if (finished) return;
      finished = true;
      clearTimeout(timer);
      req.off("data", onData);
      req.off("end", onEnd);
      req.off("error", onAborted);
      req.off("close", onAborted);
      // Stopped short: nothing more is read; the caller answers and closes the connection.
      if (!result.ok) req.pause();
      resolve(result);
    };
    const arm = () => {
      if (options.idleTimeoutMs === undefined || finished || req.complete) return;
      if (timer) timer.refresh();
      else timer = setTimeout(() => settle({ ok: false, reason: "timeout" }), options.idleTimeoutMs);
    };
    const onData = (chunk: Buffer) => {
      if (finished) return;
      take(chunk);
      if (size > maxBytes) return settle({ ok: false, reason: "too_large" });
      arm();
    };
    const onEnd = () =>
      settle({
        ok: true,
        bytes: size,
        sha256: sha.digest("hex"),
        verdict: digest.verdict(options.toleranceSec, options.now()),
      });
    const onAborted = () => settle({ ok: false, reason: "aborted" });
    if (size > maxBytes) return settle({ ok: false, reason: "too_large" });
    req.on("data", onData);
    req.on("end", onEnd);
    req.on("error", onAborted);
    req.on("close", onAborted);
    arm();
    // readRawBody paused the request when the body passed its limit (or never started it).
    req.resume();
  });
}
