// Owns the emulator's OAuth side: service-account keys (RS256 JWT-bearer), OAuth clients, consent codes, tokens, revocation.
import { createHash, createVerify, generateKeyPairSync, type KeyObject, randomBytes } from "node:crypto";
import type { Clock } from "../../clock.ts";
import { ApiError } from "./http.ts";

export const JWT_BEARER = "urn:ietf:params:oauth:grant-type:jwt-bearer";
const CALENDAR_SCOPE_PREFIX = "https://www.googleapis.com/auth/calendar";
/** The audience Google requires of an assertion (a key file's token_uri), wherever the assertion is posted. */
export const GOOGLE_TOKEN_AUDIENCE = "https://oauth2.googleapis.com/token";

export interface ServiceAccountKeyJson {
  type: "service_account";
  project_id: string;
  private_key_id: string;
  private_key: string;
  client_email: string;
  client_id: string;
  token_uri: string;
}

/** An OAuth error from the token endpoint: `{ error, error_description }`. */
export class TokenError extends Error {
  readonly status: number;
  readonly error: string;
  constructor(status: number, error: string, description: string) {
    super(description);
    this.status = status;
    this.error = error;
  }
}

interface AccessToken {
  subject: string;
  expiresAt: number;
  revoked: boolean;
}

interface Grant {
  clientId: string;
  subject: string;
  revoked: boolean;
}

interface PendingCode {
  clientId: string;
  redirectUri: string;
  subject: string;
  challenge: string | undefined;
  method: string;
  offline: boolean;
  expiresAt: number;
}

/** What the token endpoint records about a request (for tests asserting who asked for what). */
export interface TokenRequestInfo {
  grantType: string;
  subject?: string;
  clientEmail?: string;
  clientId?: string;
  /** JWT bearer: the assertion's `aud`. */
  audience?: string;
}

const b64json = (part: string): Record<string, unknown> => {
  try {
    return JSON.parse(Buffer.from(part, "base64url").toString("utf8")) as Record<string, unknown>;
  } catch {
    throw new TokenError(400, "invalid_grant", "Invalid JWT: cannot decode.");
  }
};

export class OAuthServer {
  /** Who consents on the /authorize page, and whether they approve. */
  consent = { subject: "therapist@clinic.example", approve: true };
  accessTokenTtlSeconds = 3599;
  /** Leave expires_in out of token responses (some proxies do); clients must still know the expiry. */
  omitExpiresIn = false;
  readonly #clock: Clock;
  readonly #tokenUrl: () => string;
  readonly #serviceAccounts = new Map<string, { key: KeyObject; delegation: boolean }>();
  readonly #clients = new Map<string, string>();
  readonly #refreshTokens = new Map<string, Grant>();
  readonly #accessTokens = new Map<string, AccessToken>();
  readonly #codes = new Map<string, PendingCode>();
  readonly #blocked = new Set<string>();

  constructor(clock: Clock, tokenUrl: () => string) {
    this.#clock = clock;
    this.#tokenUrl = tokenUrl;
  }

  registerServiceAccount(options: { clientEmail?: string; delegation?: boolean } = {}): ServiceAccountKeyJson {
    const { privateKey, publicKey } = generateKeyPairSync("rsa", { modulusLength: 2048 });
    const id = randomBytes(4).toString("hex");
    const clientEmail = options.clientEmail ?? `calbridge-${id}@emulator.iam.gserviceaccount.com`;
    this.#serviceAccounts.set(clientEmail, { key: publicKey, delegation: options.delegation ?? true });
    return {
      type: "service_account",
      project_id: "emulator",
      private_key_id: randomBytes(20).toString("hex"),
      private_key: privateKey.export({ type: "pkcs8", format: "pem" }).toString(),
      client_email: clientEmail,
      client_id: String(100_000_000_000 + Math.floor(Math.random() * 1e9)),
      token_uri: this.#tokenUrl(),
    };
  }

  registerOAuthClient(options: { clientId?: string; clientSecret?: string } = {}) {
    const clientId = options.clientId ?? `${randomBytes(6).toString("hex")}.apps.googleusercontent.com`;
    const clientSecret = options.clientSecret ?? `GOCSPX-${randomBytes(18).toString("base64url")}`;
    this.#clients.set(clientId, clientSecret);
    return { client_id: clientId, client_secret: clientSecret };
  }

  issueRefreshToken(subject: string, clientId?: string): string {
    const client = clientId ?? this.#clients.keys().next().value ?? this.registerOAuthClient().client_id;
    const token = `1//${randomBytes(24).toString("base64url")}`;
    this.#refreshTokens.set(token, { clientId: client, subject, revoked: false });
    return token;
  }

  /** Revokes issued access and refresh tokens (of one subject, or all) and refuses new grants for that subject. */
  revokeTokens(subject?: string): void {
    for (const t of this.#accessTokens.values()) if (!subject || t.subject === subject) t.revoked = true;
    for (const g of this.#refreshTokens.values()) if (!subject || g.subject === subject) g.revoked = true;
    if (subject) this.#blocked.add(subject);
    else this.#blocked.add("*");
  }

  /** Access tokens (of one subject, or all) stop working before their expiry; refresh tokens stay valid. */
  expireAccessTokens(subject?: string): void {
    for (const t of this.#accessTokens.values()) if (!subject || t.subject === subject) t.revoked = true;
  }

  /** Lets a revoked subject obtain tokens again (a re-granted delegation, a new consent). */
  restoreAccess(subject?: string): void {
    if (subject) this.#blocked.delete(subject);
    else this.#blocked.clear();
  }

  #isBlocked(subject: string): boolean {
    return this.#blocked.has("*") || this.#blocked.has(subject);
  }

  /** The subject of a bearer token, or a Google-style 401. */
  authenticate(header: string | undefined): string {
    const token = header?.match(/^Bearer\s+(.+)$/i)?.[1];
    if (!token) {
      throw new ApiError(401, "required", "Login Required.", { locationType: "header", location: "Authorization" });
    }
    const entry = this.#accessTokens.get(token);
    if (!entry || entry.revoked || entry.expiresAt <= this.#clock.now()) {
      throw new ApiError(401, "authError", "Invalid Credentials", {
        locationType: "header",
        location: "Authorization",
      });
    }
    return entry.subject;
  }

  #issueAccess(subject: string): { access_token: string; expires_in?: number; token_type: "Bearer" } {
    const token = `ya29.${randomBytes(32).toString("base64url")}`;
    this.#accessTokens.set(token, {
      subject,
      expiresAt: this.#clock.now() + this.accessTokenTtlSeconds * 1000,
      revoked: false,
    });
    if (this.omitExpiresIn) return { access_token: token, token_type: "Bearer" };
    return { access_token: token, expires_in: this.accessTokenTtlSeconds, token_type: "Bearer" };
  }

  /** POST /token. Returns the JSON body; throws TokenError for OAuth error answers. */
  token(form: URLSearchParams, info: TokenRequestInfo): Record<string, unknown> {
    const grant = form.get("grant_type") ?? "";
    info.grantType = grant;
    if (grant === JWT_BEARER) return this.#jwtBearer(form.get("assertion") ?? "", info);
    if (grant === "refresh_token") return this.#refresh(form, info);
    if (grant === "authorization_code") return this.#code(form, info);
    throw new TokenError(400, "unsupported_grant_type", `Invalid grant_type: ${grant}`);
  }

  #jwtBearer(assertion: string, info: TokenRequestInfo): Record<string, unknown> {
    const parts = assertion.split(".");
    if (parts.length !== 3) throw new TokenError(400, "invalid_grant", "Invalid JWT: malformed assertion.");
    const [h, p, s] = parts as [string, string, string];
    const header = b64json(h);
    const claims = b64json(p);
    info.clientEmail = String(claims.iss ?? "");
    if (typeof claims.sub === "string") info.subject = claims.sub;
    if (typeof claims.aud === "string") info.audience = claims.aud;
    if (header.alg !== "RS256") throw new TokenError(400, "invalid_grant", "Invalid JWT: alg must be RS256.");
    const account = this.#serviceAccounts.get(String(claims.iss));
    if (!account) throw new TokenError(400, "invalid_grant", "Invalid grant: account not found");
    const valid = createVerify("RSA-SHA256").update(`${h}.${p}`).verify(account.key, Buffer.from(s, "base64url"));
    if (!valid) throw new TokenError(400, "invalid_grant", "Invalid JWT Signature.");
    // Google wants its own token URL as aud, also when a proxy forwards the assertion; this emulator stands in for
    // Google, so either name of it will do. Any other address (the proxy's own) fails as it would at Google.
    if (claims.aud !== GOOGLE_TOKEN_AUDIENCE && claims.aud !== this.#tokenUrl()) {
      throw new TokenError(
        400,
        "invalid_grant",
        `Invalid JWT: Failed audience check. The right audience is ${GOOGLE_TOKEN_AUDIENCE}`,
      );
    }
    const iat = Number(claims.iat);
    const exp = Number(claims.exp);
    // Clients sign with the wall clock, while this emulator may run on a simulated one: either may vouch for the times.
    const fresh = (nowMs: number) => {
      const now = Math.floor(nowMs / 1000);
      return iat <= now + 300 && exp > now - 300;
    };
    if (!((fresh(this.#clock.now()) || fresh(Date.now())) && exp - iat <= 3600 && exp > iat)) {
      throw new TokenError(
        400,
        "invalid_grant",
        "Invalid JWT: Token must be a short-lived token (60 minutes) and in a reasonable timeframe. Check your iat and exp values in the JWT claim.",
      );
    }
    const scopes = String(claims.scope ?? "").split(" ");
    if (!scopes.some((sc) => sc.startsWith(CALENDAR_SCOPE_PREFIX))) {
      throw new TokenError(400, "invalid_scope", "Invalid OAuth scope or ID token audience provided.");
    }
    const subject = typeof claims.sub === "string" ? claims.sub : String(claims.iss);
    if (claims.sub !== undefined && (!account.delegation || this.#isBlocked(subject))) {
      throw new TokenError(
        401,
        "unauthorized_client",
        "Client is unauthorized to retrieve access tokens using this method, or client not authorized for any of the scopes requested.",
      );
    }
    if (this.#isBlocked(subject)) throw new TokenError(400, "invalid_grant", "Invalid grant: account not found");
    return this.#issueAccess(subject);
  }

  #client(form: URLSearchParams, info: TokenRequestInfo): string {
    const clientId = form.get("client_id") ?? "";
    info.clientId = clientId;
    const secret = this.#clients.get(clientId);
    if (secret === undefined || secret !== form.get("client_secret")) {
      throw new TokenError(401, "invalid_client", "The OAuth client was not found.");
    }
    return clientId;
  }

  #refresh(form: URLSearchParams, info: TokenRequestInfo): Record<string, unknown> {
    const clientId = this.#client(form, info);
    const grant = this.#refreshTokens.get(form.get("refresh_token") ?? "");
    if (grant) info.subject = grant.subject;
    if (!grant || grant.revoked || grant.clientId !== clientId || this.#isBlocked(grant.subject)) {
      throw new TokenError(400, "invalid_grant", "Token has been expired or revoked.");
    }
    return { ...this.#issueAccess(grant.subject), scope: `${CALENDAR_SCOPE_PREFIX}` };
  }

  #code(form: URLSearchParams, info: TokenRequestInfo): Record<string, unknown> {
    const clientId = this.#client(form, info);
    const code = form.get("code") ?? "";
    const pending = this.#codes.get(code);
    this.#codes.delete(code);
    if (!pending || pending.clientId !== clientId || pending.expiresAt <= this.#clock.now()) {
      throw new TokenError(400, "invalid_grant", "Malformed auth code.");
    }
    info.subject = pending.subject;
    if (pending.redirectUri !== form.get("redirect_uri"))
      throw new TokenError(400, "redirect_uri_mismatch", "Bad Request");
    if (pending.challenge !== undefined) {
      const verifier = form.get("code_verifier") ?? "";
      const computed = pending.method === "S256" ? createHash("sha256").update(verifier).digest("base64url") : verifier;
      if (computed !== pending.challenge) throw new TokenError(400, "invalid_grant", "Invalid code verifier.");
    }
    const body: Record<string, unknown> = { ...this.#issueAccess(pending.subject), scope: CALENDAR_SCOPE_PREFIX };
    if (pending.offline) body.refresh_token = this.issueRefreshToken(pending.subject, clientId);
    return body;
  }

  /** GET /authorize: approves at once (as `consent.subject`) by redirecting to redirect_uri with code and state. */
  authorize(url: URL): { status: number; location?: string; text?: string } {
    const q = url.searchParams;
    const clientId = q.get("client_id") ?? "";
    const redirectUri = q.get("redirect_uri") ?? "";
    if (!this.#clients.has(clientId))
      return { status: 401, text: "Error 401: invalid_client. The OAuth client was not found." };
    let redirect: URL;
    try {
      redirect = new URL(redirectUri);
    } catch {
      return { status: 400, text: "Error 400: redirect_uri_mismatch" };
    }
    if (q.get("response_type") !== "code") return { status: 400, text: "Error 400: unsupported_response_type" };
    const state = q.get("state");
    if (state !== null) redirect.searchParams.set("state", state);
    if (!this.consent.approve) {
      redirect.searchParams.set("error", "access_denied");
      return { status: 302, location: redirect.toString() };
    }
    const code = `4/${randomBytes(24).toString("base64url")}`;
    this.#codes.set(code, {
      clientId,
      redirectUri,
      subject: q.get("login_hint") ?? this.consent.subject,
      challenge: q.get("code_challenge") ?? undefined,
      method: q.get("code_challenge_method") ?? "plain",
      offline: q.get("access_type") === "offline",
      expiresAt: this.#clock.now() + 600_000,
    });
    redirect.searchParams.set("code", code);
    redirect.searchParams.set("scope", q.get("scope") ?? "");
    return { status: 302, location: redirect.toString() };
  }
}
