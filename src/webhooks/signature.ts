// Owns the webhook signature scheme (`X-Service-Signature: t=<unix>,v1=<hex>`): signing, the check of the header alone
// (before any body is read), and pure verification of raw bytes against several secrets (rotation) and several v1
// entries, in constant time, within a time tolerance.
import { createHmac, timingSafeEqual } from "node:crypto";

export const SIGNATURE_HEADER = "x-service-signature";

export type SignatureFailure = "missing" | "malformed" | "stale" | "future" | "mismatch";

export type VerifyResult = { ok: true; timestamp: number } | { ok: false; reason: SignatureFailure; message: string };

/** A readable signature header: its timestamp (not yet authenticated) and every v1 signature in it. */
export interface SignatureHeader {
  timestamp: number;
  signatures: string[];
}

export interface VerifyInput {
  /** The request body exactly as received, before any parsing. */
  rawBody: Buffer;
  /** The header's text, or what `checkSignatureHeader` read of it (so a request's header is parsed once). */
  header: string | undefined | SignatureHeader;
  /** Every secret currently valid for the endpoint (more than one while rotating). */
  secrets: string[];
  toleranceSec: number;
  nowMs: number;
}

/** Lowercase hex HMAC-SHA256 of `<timestampSec>.<payload>`. */
function hmacHex(payload: string | Buffer, secret: string, timestampSec: number): string {
  return createHmac("sha256", secret).update(`${timestampSec}.`).update(payload).digest("hex");
}

/** The header value the booking service would send for this payload: `t=<unix>,v1=<hex>`. */
export function sign(payload: string | Buffer, secret: string, timestampSec: number): string {
  return `t=${timestampSec},v1=${hmacHex(payload, secret, timestampSec)}`;
}

/** Splits `t=...,v1=...,v1=...`; unknown schemes (v0=...) are ignored. Undefined when it cannot be read. */
export function parseSignatureHeader(header: string): SignatureHeader | undefined {
  let timestamp: number | undefined;
  const signatures: string[] = [];
  for (const part of header.split(",")) {
    const eq = part.indexOf("=");
    if (eq <= 0) continue;
    const key = part.slice(0, eq).trim();
    const value = part.slice(eq + 1).trim();
    if (key === "t") {
      // The header sent twice (a proxy, one line per secret while rotating) arrives joined: the same t= again is that,
      // a different one is not one signature.
      if (!/^\d{1,12}$/.test(value) || (timestamp !== undefined && timestamp !== Number(value))) return undefined;
      timestamp = Number(value);
    } else if (key === "v1" && value.length > 0) {
      signatures.push(value);
    }
  }
  if (timestamp === undefined || signatures.length === 0) return undefined;
  return { timestamp, signatures };
}

function readHeader(
  header: string | undefined | SignatureHeader,
): ({ ok: true } & SignatureHeader) | { ok: false; reason: "missing" | "malformed"; message: string } {
  if (typeof header === "object") return { ok: true, timestamp: header.timestamp, signatures: header.signatures };
  if (header === undefined || header.trim() === "") {
    return {
      ok: false,
      reason: "missing",
      message:
        "No X-Service-Signature header on the request. Does it come from the booking service, or does a proxy strip the header?",
    };
  }
  const parsed = parseSignatureHeader(header);
  if (!parsed) {
    return {
      ok: false,
      reason: "malformed",
      message:
        "Unable to extract timestamp and signatures from the X-Service-Signature header (expected t=<unix seconds>,v1=<hex>).",
    };
  }
  return { ok: true, ...parsed };
}

export type HeaderCheck =
  | ({ ok: true } & SignatureHeader)
  | { ok: false; reason: Exclude<SignatureFailure, "mismatch">; message: string };

/**
 * What can be judged of a delivery before its body is read: the header is present, readable, and its timestamp
 * within the tolerance. A request that fails here is refused without reading (or buffering) a byte of its body; one
 * that passes still needs verifySignature over the raw body, which takes what was read here as its header. The
 * timestamp is not yet authenticated, so the messages say so.
 */
export function checkSignatureHeader(header: string | undefined, toleranceSec: number, nowMs: number): HeaderCheck {
  const parsed = readHeader(header);
  if (!parsed.ok) return parsed;
  const ageSec = ageOf(parsed.timestamp, nowMs);
  if (ageSec > toleranceSec) {
    return {
      ok: false,
      reason: "stale",
      message: `Signature timestamp ${ageSec}s old, tolerance ${toleranceSec}s: refused before reading the body (a replayed or forged delivery, or this host's clock is ahead?).`,
    };
  }
  if (-ageSec > toleranceSec) {
    return {
      ok: false,
      reason: "future",
      message: `Signature timestamp ${-ageSec}s in the future, tolerance ${toleranceSec}s: refused before reading the body (is this host's clock behind?).`,
    };
  }
  return parsed;
}

function matches(candidate: string, expected: Buffer): boolean {
  const given = Buffer.from(candidate, "utf8");
  return given.length === expected.length && timingSafeEqual(given, expected);
}

export function verifySignature(input: VerifyInput): VerifyResult {
  const parsed = readHeader(input.header);
  if (!parsed.ok) return parsed;
  // Every delivery's path: one HMAC per secret, no digest object (signatureDigest is for bodies read in pieces).
  let matched = false;
  for (const secret of input.secrets) {
    // An empty key would make signatures anyone can compute: it never verifies anything.
    if (secret !== "" && matchesAny(parsed.signatures, hmacHex(input.rawBody, secret, parsed.timestamp)))
      matched = true;
  }
  return matched ? timely(parsed.timestamp, input.toleranceSec, input.nowMs) : MISMATCH;
}

/** Whether any v1 signature is `hex`; every one is compared, so the time taken does not tell which matched. */
function matchesAny(signatures: readonly string[], hex: string): boolean {
  const expected = Buffer.from(hex, "utf8");
  let found = false;
  for (const candidate of signatures) if (matches(candidate, expected)) found = true;
  return found;
}

/** A body's signature checked as its bytes arrive, so a body need not be held to be verified (see oversized.ts). */
export interface SignatureDigest {
  update(chunk: Buffer): SignatureDigest;
  /** Once, after the last chunk. */
  verdict(toleranceSec: number, nowMs: number): VerifyResult;
}

export function signatureDigest(header: SignatureHeader, secrets: string[]): SignatureDigest {
  const { timestamp, signatures } = header;
  // An empty key would make signatures anyone can compute: it never verifies anything.
  const hmacs = secrets.filter((s) => s !== "").map((s) => createHmac("sha256", s).update(`${timestamp}.`));
  const digest: SignatureDigest = {
    update(chunk) {
      for (const hmac of hmacs) hmac.update(chunk);
      return digest;
    },
    verdict(toleranceSec, nowMs) {
      // Every (secret, v1) pair is compared, so the time taken does not depend on which one matched.
      let matched = false;
      for (const hmac of hmacs) if (matchesAny(signatures, hmac.digest("hex"))) matched = true;
      return matched ? timely(timestamp, toleranceSec, nowMs) : MISMATCH;
    },
  };
  return digest;
}

const MISMATCH: VerifyResult = {
  ok: false,
  reason: "mismatch",
  message:
    "No signatures found matching the expected signature for payload. Are you passing the raw request body you " +
    "received from the booking service (not re-serialized JSON)? Is the signing secret the one of this endpoint?",
};

/**
 * A timestamp's age in whole seconds, as the sender counts them (it signs `t` = its seconds, cut down): a delivery
 * exactly `tolerance` seconds old is on time whatever the fraction of this host's current second (compared in
 * milliseconds, it was refused 999 times in 1,000).
 */
function ageOf(timestamp: number, nowMs: number): number {
  return Math.floor(nowMs / 1000) - timestamp;
}

function timely(timestamp: number, toleranceSec: number, nowMs: number): VerifyResult {
  const ageSec = ageOf(timestamp, nowMs);
  if (ageSec > toleranceSec) {
    return {
      ok: false,
      reason: "stale",
      message: `Timestamp outside the tolerance zone: signed ${ageSec}s ago, tolerance ${toleranceSec}s (a replayed delivery, or this host's clock is ahead?).`,
    };
  }
  if (-ageSec > toleranceSec) {
    return {
      ok: false,
      reason: "future",
      message: `Timestamp outside the tolerance zone: signed ${-ageSec}s in the future, tolerance ${toleranceSec}s (is this host's clock behind?).`,
    };
  }
  return { ok: true, timestamp };
}

/** Fix-it hints for configured secrets that cannot be right; never contains a secret. */
export function secretHints(secrets: string[]): string[] {
  const hints: string[] = [];
  if (secrets.length === 0) hints.push("No webhook signing secret is configured: every delivery will be rejected.");
  secrets.forEach((secret, i) => {
    if (secret !== secret.trim()) {
      hints.push(
        `Webhook signing secret #${i + 1} has leading or trailing whitespace (a stray newline from a file or an ` +
          "environment variable?); signatures made with the real secret will not match it.",
      );
    } else if (secret === "") {
      hints.push(`Webhook signing secret #${i + 1} is empty.`);
    }
  });
  return hints;
}
