// Owns token-endpoint exchanges (one POST, no retries of their own) and per-therapist OAuth refresh-token credentials.
import { type Credentials, type gaxios, OAuth2Client } from "google-auth-library";
import { deadline } from "../deadline.ts";
import { secrets } from "../log.ts";
import { CalendarError, tokenErrorKind } from "./errors.ts";

export interface TokenRequest {
  /** Where the form is POSTed. */
  url: string;
  form: Record<string, string>;
  /** Names the credentials in error messages (never a secret), e.g. "service account token for anna@clinic.example". */
  what: string;
  timeoutMs: number;
  /** Extra text for an OAuth error code, e.g. `unauthorized_client` → a hint about domain-wide delegation. */
  hints?: Readonly<Record<string, string>>;
}

/** A successful token answer: `access_token` (already registered for scrubbing) and the other fields as sent. */
export type TokenAnswer = Record<string, unknown> & { access_token: string };

function retryAfterMs(value: string | null): number | undefined {
  if (!value) return undefined;
  const seconds = Number(value);
  if (Number.isFinite(seconds)) return Math.max(0, seconds * 1000);
  const at = Date.parse(value);
  return Number.isNaN(at) ? undefined : Math.max(0, at - Date.now());
}

/** Seconds until expiry from a token answer's `expires_in` (some proxies send it as a string), if usable. */
export function expiresInSeconds(answer: TokenAnswer): number | undefined {
  const seconds = Number(answer.expires_in);
  return answer.expires_in !== undefined && Number.isFinite(seconds) && seconds > 0 ? seconds : undefined;
}

/**
 * Sends one token request: exactly one POST, never retried here (the call runner owns the retry policy and honours
 * Retry-After). Failures are CalendarErrors with `tokenEndpoint: true` and the kind of the answer (tokenErrorKind):
 * 429 → "rate_limited", 5xx/408 and network failures → "transient", any other refusal (invalid_grant and friends, a
 * Workspace admin's admin_policy_enforced, a proxy's 403 page, a 404 from a wrong URL) → "auth". Messages
 * carry the status, the OAuth error and its description, never the form (secrets) or the answer's tokens.
 */
export async function requestToken(req: TokenRequest): Promise<TokenAnswer> {
  let res: Response;
  let text: string;
  const limit = deadline(req.timeoutMs);
  try {
    res = await fetch(req.url, {
      method: "POST",
      headers: { "content-type": "application/x-www-form-urlencoded", accept: "application/json" },
      body: new URLSearchParams(req.form),
      signal: limit.signal,
    });
    text = await res.text();
  } catch (err) {
    const code = (err as { cause?: { code?: unknown } }).cause?.code;
    const detail = `${(err as Error).message}${typeof code === "string" ? ` (${code})` : ""}`;
    throw new CalendarError(`${req.what}: token endpoint ${req.url} unreachable: ${detail}`, {
      kind: "transient",
      tokenEndpoint: true,
    });
  } finally {
    limit.end();
  }
  let body: Record<string, unknown> = {};
  try {
    const parsed: unknown = JSON.parse(text);
    if (parsed && typeof parsed === "object" && !Array.isArray(parsed)) body = parsed as Record<string, unknown>;
  } catch {
    // non-JSON bodies (a proxy's error page) are reported by status below
  }
  if (res.ok && typeof body.access_token === "string" && body.access_token) {
    secrets.addEphemeral(body.access_token);
    return body as TokenAnswer;
  }
  const error = typeof body.error === "string" ? body.error : undefined;
  const detail = typeof body.error_description === "string" ? `: ${body.error_description}` : "";
  const hint = (error && req.hints?.[error]) ?? "";
  const answered = res.ok ? "answered without an access_token" : "answered";
  const message = `${req.what}: token endpoint ${answered} ${res.status}${error ? ` ${error}` : ""}${detail}${hint}`;
  throw new CalendarError(message, {
    kind: res.ok ? "unknown" : tokenErrorKind(res.status, error),
    status: res.status,
    reason: error,
    retryAfterMs: retryAfterMs(res.headers.get("retry-after")),
    tokenEndpoint: true,
  });
}

export interface OAuthCredentialsOptions {
  clientId: string;
  clientSecret: string;
  refreshToken: string;
  /** Every token request goes here (Google: https://oauth2.googleapis.com/token). */
  tokenUrl: string;
  /** Used when a token response carries no expires_in, so `expiry_date` is never empty. */
  defaultLifetimeSeconds?: number;
  /** Timeout of one token request. */
  timeoutMs?: number;
}

/**
 * An OAuth2Client for one therapist's personal calendar. The refresh token lives in `credentials.refresh_token` as
 * usual (re-authorization installs a new one with setCredentials). `expiry_date` is always set from the token
 * response: without it google-auth-library refreshes the token and repeats the call on any 403, a rate-limit error
 * included.
 */
export class OAuthCredentials extends OAuth2Client {
  readonly tokenUrl: string;
  readonly #clientId: string;
  readonly #clientSecret: string;
  readonly #defaultLifetimeMs: number;
  readonly #timeoutMs: number;

  constructor(options: OAuthCredentialsOptions) {
    super({
      clientId: options.clientId,
      clientSecret: options.clientSecret,
      endpoints: { oauth2TokenUrl: options.tokenUrl },
    });
    secrets.add(options.clientSecret);
    secrets.add(options.refreshToken);
    this.tokenUrl = options.tokenUrl;
    this.#clientId = options.clientId;
    this.#clientSecret = options.clientSecret;
    this.#defaultLifetimeMs = (options.defaultLifetimeSeconds ?? 3600) * 1000;
    this.#timeoutMs = options.timeoutMs ?? 30_000;
    this.setCredentials({ refresh_token: options.refreshToken });
  }

  /**
   * The refresh-token exchange, as one request. Every refresh path of OAuth2Client ends here (a request's auth
   * headers, getAccessToken, refreshAccessToken, its retry after a 401), behind its per-token sharing of concurrent
   * refreshes. OAuth2Client's own exchange goes through gaxios with RETRY_CONFIG (POST retried 3 times with its own
   * delays, Retry-After ignored), which the call runner's retries would multiply; `refreshHandler` would not do
   * instead, as OAuth2Client bypasses it on several of those paths while a refresh token is set.
   */
  protected override async refreshTokenNoCache(
    refreshToken?: string | null,
  ): Promise<{ tokens: Credentials; res: gaxios.GaxiosResponse | null }> {
    if (!refreshToken) {
      throw new CalendarError("OAuth token refresh: no refresh token is set", { kind: "auth", tokenEndpoint: true });
    }
    secrets.add(refreshToken);
    const answer = await requestToken({
      url: this.tokenUrl,
      form: {
        grant_type: "refresh_token",
        refresh_token: refreshToken,
        client_id: this.#clientId,
        client_secret: this.#clientSecret,
      },
      what: `OAuth token refresh for client ${this.#clientId}`,
      timeoutMs: this.#timeoutMs,
    });
    const lifetimeMs = (expiresInSeconds(answer) ?? this.#defaultLifetimeMs / 1000) * 1000;
    const tokens: Credentials = {
      access_token: answer.access_token,
      token_type: typeof answer.token_type === "string" ? answer.token_type : "Bearer",
      expiry_date: Date.now() + lifetimeMs,
    };
    if (typeof answer.scope === "string") tokens.scope = answer.scope;
    if (typeof answer.id_token === "string") tokens.id_token = answer.id_token;
    this.emit("tokens", tokens);
    return { tokens, res: null };
  }
}
