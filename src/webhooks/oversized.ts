// Owns reading a webhook body that passed `webhooks.max_body_bytes` to its end without holding it: each chunk goes
// through the signature's HMAC and a SHA-256 (the body's name in the dead letters) and is dropped. The booking
// service retries a refused delivery 7 times and then disables the endpoint (spec, "Retry policy"), and the spec
// names no limit on body or field sizes ("Limits on body size, field lengths ...: not shown"): answering 413 to an
// authentic event that is merely large would, a day and a half later, stop every webhook. Verified, it is
// acknowledged and set aside instead, and the reconciliation, which reads the booking itself, brings its appointment
// in step.
import { createHash } from "node:crypto";
import type { IncomingMessage } from "node:http";
import { type DecodedDigest, decodedDigest } from "./decoded-digest.ts";
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
  /**
   * The body fails with "timeout" when it is not whole this long after the drain began: what is left of readRawBody's
   * total time (a body trickled just inside the idle timeout would otherwise go on until the listener's own request
   * limit ended it unsaid, as a client's abort). Default: none.
   */
  totalTimeoutMs?: number;
  /** The signature's running HMAC (signature.ts `signatureDigest`), fed every byte. */
  digest: SignatureDigest;
  toleranceSec: number;
  now(): number;
  /**
   * A compressed body's signature may cover its decoded bytes instead (the spec does not say): its decoding, at most
   * `maxBytes` of it, goes through this digest as the bytes arrive, and either digest verifying will do.
   */
  decoded?: { encoding: "gzip" | "deflate"; digest: SignatureDigest; maxBytes: number };
}

export function drainOversized(req: IncomingMessage, options: DrainOptions): Promise<DrainResult> {
  const { maxBytes, digest } = options;
  const sha = createHash("sha256");
  const decoding: DecodedDigest | undefined = options.decoded
    ? decodedDigest(options.decoded.encoding, options.decoded.digest, options.decoded.maxBytes)
    : undefined;
  let size = 0;
  /** Whether the decoder takes more now (false: pause the request until it drains). */
  const take = (chunk: Buffer): boolean => {
    size += chunk.length;
    digest.update(chunk);
    sha.update(chunk);
    return decoding?.write(chunk) ?? true;
  };
  for (const chunk of options.consumed) take(chunk);
  return new Promise((resolve) => {
    let finished = false;
    let timer: NodeJS.Timeout | undefined;
    let total: NodeJS.Timeout | undefined;
    const settle = (result: DrainResult) => {
      if (finished) return;
      finished = true;
      clearTimeout(timer);
      clearTimeout(total);
      decoding?.abandon();
      req.off("data", onData);
      req.off("end", onEnd);
      req.off("error", onAborted);
      req.off("close", onAborted);
      // Stopped short: nothing more is read; the caller answers and closes the connection.
      if (!result.ok) req.pause();
      resolve(result);
    };
    // The idle timer is pushed back by each chunk, the total one armed once; neither once the parser has seen the whole
    // message (`req.complete`).
    const arm = () => {
      if (finished || req.complete) return;
      if (timer) timer.refresh();
      else if (options.idleTimeoutMs !== undefined)
        timer = setTimeout(() => settle({ ok: false, reason: "timeout" }), options.idleTimeoutMs);
      if (total === undefined && options.totalTimeoutMs !== undefined)
        total = setTimeout(() => settle({ ok: false, reason: "timeout" }), options.totalTimeoutMs);
    };
    const onData = (chunk: Buffer) => {
      if (finished) return;
      const more = take(chunk);
      if (size > maxBytes) return settle({ ok: false, reason: "too_large" });
      arm();
      if (!more) {
        req.pause();
        decoding!.onDrain(() => {
          if (!finished) req.resume();
        });
      }
    };
    const onEnd = async () => {
      if (finished) return;
      // The body is whole: only the decoding may still be under way, and nothing the client does now changes it.
      clearTimeout(timer);
      clearTimeout(total);
      req.off("close", onAborted);
      const sha256 = sha.digest("hex");
      let verdict = digest.verdict(options.toleranceSec, options.now());
      if (!verdict.ok && verdict.reason === "mismatch" && decoding && options.decoded) {
        const decoded = await decoding.end();
        if (decoded.ok) verdict = options.decoded.digest.verdict(options.toleranceSec, options.now());
      }
      settle({ ok: true, bytes: size, sha256, verdict });
    };
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
