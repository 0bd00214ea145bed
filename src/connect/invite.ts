// Owns invitation links: a therapist id, an expiry and a nonce, signed with HMAC-SHA256 under connect.secret; made by
// `calbridge invite`, checked by the connect pages. Verification is a pure function of the token, the secret and the
// time. (Single use is kept in the store: ledger.ts.)
import { createHmac, randomBytes, timingSafeEqual } from "node:crypto";
import type { Config } from "../config/schema.ts";
import { CALLBACK_PATH, CONNECT_PATH } from "../public-paths.ts";

export interface Invite {
  therapistId: string;
  /** Epoch ms after which the link is refused. */
  expiresAt: number;
  /** Random: names this link (single use is recorded under it). */
  nonce: string;
}

export type InviteCheck =
  | { ok: true; invite: Invite }
  | { ok: false; problem: "malformed" | "signature" }
  | { ok: false; problem: "expired"; invite: Invite };

/** Longer tokens are not ours: refused before any parsing. */
export const MAX_TOKEN_LENGTH = 600;
export const DEFAULT_TTL_MS = 7 * 86_400_000;
export const MAX_TTL_MS = 30 * 86_400_000;
const CONTEXT = "calbridge-invite-v1.";

function mac(payload: string, secret: string): Buffer {
  return createHmac("sha256", secret).update(CONTEXT).update(payload).digest();
}

/** A new link's token for `therapistId`, valid for `ttlMs` from `now`. */
export function createInvite(
  therapistId: string,
  options: { secret: string; ttlMs?: number; now?: number },
): { token: string; invite: Invite } {
  const invite: Invite = {
    therapistId,
    expiresAt: (options.now ?? Date.now()) + (options.ttlMs ?? DEFAULT_TTL_MS),
    nonce: randomBytes(16).toString("base64url"),
  };
  const payload = Buffer.from(
    JSON.stringify({ v: 1, t: invite.therapistId, e: invite.expiresAt, n: invite.nonce }),
  ).toString("base64url");
  return { token: `${payload}.${mac(payload, options.secret).toString("base64url")}`, invite };
}

/** Checks a token: its shape, then its signature (constant time), then its expiry. */
export function verifyInvite(token: string, secret: string, now = Date.now()): InviteCheck {
  if (token.length === 0 || token.length > MAX_TOKEN_LENGTH) return { ok: false, problem: "malformed" };
  const [payload, signature, extra] = token.split(".");
  if (!payload || !signature || extra !== undefined || !/^[\w-]+$/.test(payload) || !/^[\w-]+$/.test(signature)) {
    return { ok: false, problem: "malformed" };
  }
  const given = Buffer.from(signature, "base64url");
  // Only the canonical spelling: the last character of 32 bytes in base64url carries 2 unused bits, which decoding
  // ignores, so four spellings would otherwise pass for one signature (a link altered by hand, or on its way, must not).
  if (given.toString("base64url") !== signature) return { ok: false, problem: "signature" };
  const expected = mac(payload, secret);
  if (given.length !== expected.length || !timingSafeEqual(given, expected)) return { ok: false, problem: "signature" };
  let fields: { v?: unknown; t?: unknown; e?: unknown; n?: unknown };
  try {
    fields = JSON.parse(Buffer.from(payload, "base64url").toString("utf8")) as typeof fields;
  } catch {
    return { ok: false, problem: "malformed" };
  }
  const { v, t, e, n } = fields ?? {};
  if (v !== 1 || typeof t !== "string" || !t || typeof e !== "number" || typeof n !== "string" || !n) {
    return { ok: false, problem: "malformed" };
  }
  const invite: Invite = { therapistId: t, expiresAt: e, nonce: n };
  if (now >= e) return { ok: false, problem: "expired", invite };
  return { ok: true, invite };
}

/** The public base without a trailing slash. */
export function publicBase(publicUrl: string): string {
  return publicUrl.replace(/\/+$/, "");
}

/** The link a therapist opens. */
export function inviteUrl(publicUrl: string, token: string): string {
  return `${publicBase(publicUrl)}${CONNECT_PATH}?invite=${token}`;
}

/** The OAuth redirect URI of the connect pages (what the admin registers for the Web application client). */
export function callbackUrl(publicUrl: string): string {
  return `${publicBase(publicUrl)}${CALLBACK_PATH}`;
}

/** "7d", "12h", "90m" → milliseconds; undefined for anything else. */
export function parseTtl(text: string): number | undefined {
  const m = /^(\d{1,4})([dhm])$/.exec(text.trim());
  if (!m) return undefined;
  const unit = { d: 86_400_000, h: 3_600_000, m: 60_000 }[m[2] as "d" | "h" | "m"];
  const ms = Number(m[1]) * unit;
  return ms > 0 ? ms : undefined;
}

/** Why `therapistId` cannot be connected through a link, or undefined when it can. */
export function notConnectable(config: Config, therapistId: string): string | undefined {
  const t = config.therapists.find((x) => x.therapist_id === therapistId);
  if (!t) return `therapist ${therapistId} is not in the configuration`;
  if ((t.auth?.type ?? config.google.auth.type) !== "oauth") {
    return `therapist ${therapistId} uses the service account (domain-wide delegation): there is nothing to connect`;
  }
  if (t.auth?.type === "oauth" && t.auth.refresh_token) {
    return `therapist ${therapistId} has auth.refresh_token in the configuration, which wins over a connected token: remove it first`;
  }
  return undefined;
}

/**
 * Why no link can work at all in this configuration, or undefined. Without store.encryption_key the connect page can
 * keep no token, so it refuses every link ("Connecting is not set up yet"): none is handed out.
 */
export function linksUnusable(config: Config): string | undefined {
  if (config.store.encryption_key) return undefined;
  return (
    "store.encryption_key is not set: a connected calendar's refresh token is stored encrypted with it, so the " +
    "connect page would refuse the link. Set store.encryption_key: ${CALBRIDGE_STORE_KEY} (32 or more random " +
    "characters, e.g. from `openssl rand -base64 32`), restart the daemon, then make the link"
  );
}
