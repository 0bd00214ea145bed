// Owns service-account credentials with domain-wide delegation: our own RS256 assertion (aud: the key's token_uri), posted to a configurable token URL.
import { createPrivateKey, createSign, type KeyObject } from "node:crypto";
import { readFile } from "node:fs/promises";
import { OAuth2Client } from "google-auth-library";
import { secrets } from "../log.ts";
import { expiresInSeconds, requestToken } from "./oauth-client.ts";

export const CALENDAR_SCOPE = "https://www.googleapis.com/auth/calendar";
export const JWT_BEARER_GRANT = "urn:ietf:params:oauth:grant-type:jwt-bearer";
const ASSERTION_LIFETIME_S = 3600;
/** Google's token endpoint: the `aud` of every assertion unless the key file names another `token_uri`. */
export const GOOGLE_TOKEN_URL = "https://oauth2.googleapis.com/token";

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
  /**
   * Every token request goes here (an emulator, an egress proxy). The assertion's audience stays the key file's
   * `token_uri` (default Google's), as Google refuses any other `aud`: a proxy forwards the assertion unchanged.
   */
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
  /** The assertion's `aud`: the key file's token_uri, or Google's token endpoint. */
  readonly audience: string;
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
    this.audience = options.key.token_uri || GOOGLE_TOKEN_URL;
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
      aud: this.audience,
      iat,
      exp: iat + ASSERTION_LIFETIME_S,
    };
    if (this.subject) payload.sub = this.subject;
    const header: Record<string, unknown> = { alg: "RS256", typ: "JWT" };
    if (this.#keyId) header.kid = this.#keyId;
    return signJwt(header, payload, this.#key);
  }

  async #exchange(): Promise<{ access_token: string; expiry_date: number }> {
    const answer = await requestToken({
      url: this.tokenUrl,
      form: { grant_type: JWT_BEARER_GRANT, assertion: this.#assertion() },
      what: `service account token for ${this.principal}`,
      timeoutMs: this.#timeoutMs,
      hints: { unauthorized_client: " (is domain-wide delegation granted for this scope?)" },
    });
    const expiresIn = expiresInSeconds(answer) ?? 3600;
    const tokens = {
      access_token: answer.access_token,
      expiry_date: Date.now() + expiresIn * 1000,
      token_type: "Bearer",
    };
    this.emit("tokens", tokens);
    return tokens;
  }
}
