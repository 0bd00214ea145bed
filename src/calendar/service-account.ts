// Owns service-account credentials with domain-wide delegation: our own RS256 assertion, posted to a configurable token URL.
import { createPrivateKey, createSign, type KeyObject } from "node:crypto";
import { readFile } from "node:fs/promises";
import { OAuth2Client } from "google-auth-library";
import { secrets } from "../log.ts";
import { CalendarError, tokenErrorKind } from "./errors.ts";

export const CALENDAR_SCOPE = "https://www.googleapis.com/auth/calendar";
export const JWT_BEARER_GRANT = "urn:ietf:params:oauth:grant-type:jwt-bearer";
const ASSERTION_LIFETIME_S = 3600;

/** The fields of a Google service-account JSON key that we use. */
export interface ServiceAccountKey {
  type?: string;
  client_email: string;
  private_key: string;
  private_key_id?: string;
  token_uri?: string;
  project_id?: string;
  client_id?: string;
}

export interface ServiceAccountOptions {
  key: ServiceAccountKey;
  /** The user to impersonate (domain-wide delegation); omitted: the service account acts as itself. */
  subject?: string;
  /** Every token request goes here (the key file's token_uri is ignored, so emulators and proxies work). */
  tokenUrl: string;
  scopes?: string[];
  timeoutMs?: number;
  /** Wall clock in ms for iat/exp; google-auth-library judges expiry by Date.now(), so keep the default outside tests. */
  now?: () => number;
}

const b64url = (data: string | Buffer) => Buffer.from(data).toString("base64url");

/** A compact RS256 JWT. */
export function signJwt(header: Record<string, unknown>, payload: Record<string, unknown>, key: KeyObject): string {
  const input = `${b64url(JSON.stringify(header))}.${b64url(JSON.stringify(payload))}`;
  const signature = createSign("RSA-SHA256").update(input).sign(key);
  return `${input}.${b64url(signature)}`;
}

/** Reads and checks a service-account key file; its private key is registered as a secret at once. */
export async function readServiceAccountKey(path: string): Promise<ServiceAccountKey> {
  let parsed: unknown;
  try {
    parsed = JSON.parse(await readFile(path, "utf8"));
  } catch (err) {
    throw new Error(`service account key file ${path}: cannot read it as JSON (${(err as Error).message})`);
  }
  const key = parsed as Partial<ServiceAccountKey>;
  secrets.add(key.private_key);
  if (typeof key.client_email !== "string" || typeof key.private_key !== "string") {
    throw new Error(`service account key file ${path}: expected "client_email" and "private_key" (a Google JSON key)`);
  }
  return key as ServiceAccountKey;
}

/**
 * An OAuth2Client whose tokens come from a JWT-bearer exchange we sign ourselves, so googleapis can use it as `auth`.
 * The token is cached until google-auth-library's eager-refresh margin before `expiry_date`; concurrent refreshes share
 * one request. Emits "tokens" after every successful exchange.
 */
export class ServiceAccountCredentials extends OAuth2Client {
  readonly clientEmail: string;
  readonly subject: string | undefined;
  readonly tokenUrl: string;
  readonly #key: KeyObject;
  readonly #keyId: string | undefined;
  readonly #scopes: string[];
  readonly #timeoutMs: number;
  readonly #now: () => number;
  #inflight: Promise<{ access_token: string; expiry_date: number }> | undefined;

  constructor(options: ServiceAccountOptions) {
    super({ endpoints: { oauth2TokenUrl: options.tokenUrl } });
    secrets.add(options.key.private_key);
    try {
      this.#key = createPrivateKey(options.key.private_key);
    } catch {
      throw new Error(`service account ${options.key.client_email}: private_key is not a valid PEM private key`);
    }
    this.clientEmail = options.key.client_email;
    this.subject = options.subject;
    this.tokenUrl = options.tokenUrl;
    this.#keyId = options.key.private_key_id;
    this.#scopes = options.scopes ?? [CALENDAR_SCOPE];
    this.#timeoutMs = options.timeoutMs ?? 30_000;
    this.#now = options.now ?? Date.now;
    this.refreshHandler = () => this.fetchAccessToken();
  }

  static async fromKeyFile(
    path: string,
    options: Omit<ServiceAccountOptions, "key">,
  ): Promise<ServiceAccountCredentials> {
    return new ServiceAccountCredentials({ ...options, key: await readServiceAccountKey(path) });
  }

  /** Who the tokens act for: the impersonated user, or the service account itself. */
  get principal(): string {
    return this.subject ?? this.clientEmail;
  }

  /** Exchanges a fresh assertion for an access token (one request at a time). */
  fetchAccessToken(): Promise<{ access_token: string; expiry_date: number }> {
    this.#inflight ??= this.#exchange().finally(() => {
      this.#inflight = undefined;
    });
    return this.#inflight;
  }

  #assertion(): string {
    const iat = Math.floor(this.#now() / 1000);
    const payload: Record<string, unknown> = {
      iss: this.clientEmail,
      scope: this.#scopes.join(" "),
      aud: this.tokenUrl,
      iat,
      exp: iat + ASSERTION_LIFETIME_S,
    };
    if (this.subject) payload.sub = this.subject;
    const header: Record<string, unknown> = { alg: "RS256", typ: "JWT" };
    if (this.#keyId) header.kid = this.#keyId;
    return signJwt(header, payload, this.#key);
  }

  async #exchange(): Promise<{ access_token: string; expiry_date: number }> {
    const what = `service account token for ${this.principal}`;
    let res: Response;
    try {
      res = await fetch(this.tokenUrl, {
        method: "POST",
        headers: { "content-type": "application/x-www-form-urlencoded" },
        body: new URLSearchParams({ grant_type: JWT_BEARER_GRANT, assertion: this.#assertion() }),
        signal: AbortSignal.timeout(this.#timeoutMs),
      });
    } catch (err) {
      throw new CalendarError(`${what}: ${this.tokenUrl} unreachable (${(err as Error).message})`, {
        kind: "transient",
        tokenEndpoint: true,
      });
    }
    const text = await res.text();
    let body: Record<string, unknown> = {};
    try {
      body = JSON.parse(text) as Record<string, unknown>;
    } catch {
      // non-JSON bodies are reported by status below
    }
    if (!res.ok || typeof body.access_token !== "string") {
      const error = typeof body.error === "string" ? body.error : undefined;
      const detail = typeof body.error_description === "string" ? `: ${body.error_description}` : "";
      const hint = error === "unauthorized_client" ? " (is domain-wide delegation granted for this scope?)" : "";
      throw new CalendarError(`${what}: token endpoint answered ${res.status} ${error ?? ""}${detail}${hint}`, {
        kind: res.ok ? "unknown" : tokenErrorKind(res.status, error),
        status: res.status,
        reason: error,
        tokenEndpoint: true,
      });
    }
    const accessToken = body.access_token;
    secrets.addEphemeral(accessToken);
    const expiresIn = typeof body.expires_in === "number" ? body.expires_in : 3600;
    const tokens = { access_token: accessToken, expiry_date: Date.now() + expiresIn * 1000, token_type: "Bearer" };
    this.emit("tokens", tokens);
    return tokens;
  }
}
