// Owns signing webhook deliveries the way the spec describes: X-Service-Signature: t=<unix seconds>,v1=<hex HMAC>.
import { createHmac } from "node:crypto";

/** Lowercase hex HMAC-SHA256 of "<t>.<raw body>" keyed with the endpoint's signing secret. */
export function signatureHex(secret: string, timestampSeconds: number, rawBody: string): string {
  return createHmac("sha256", secret).update(`${timestampSeconds}.${rawBody}`).digest("hex");
}

/** The X-Service-Signature header value for a body sent at `timestampSeconds`. */
export function signatureHeader(secret: string, timestampSeconds: number, rawBody: string): string {
  return `t=${timestampSeconds},v1=${signatureHex(secret, timestampSeconds, rawBody)}`;
}
