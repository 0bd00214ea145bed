// Owns the emulator's OAuth side: service-account keys (RS256 JWT-bearer), OAuth clients (desktop or web, "Testing"
// consent screens), authorization codes with PKCE, tokens that remember their scopes, revocation, and the API-side
// check of a bearer token (401, accessNotConfigured, insufficientPermissions). The consent page is consent.ts.
import { createHash, createVerify, generateKeyPairSync, type KeyObject, randomBytes } from "node:crypto";
import type { Clock } from "../../clock.ts";
import { ApiError } from "./http.ts";
import { CALENDAR_SCOPE, scopesAllow } from "./scopes.ts";

export const JWT_BEARER = "urn:ietf:params:oauth:grant-type:jwt-bearer";
/**
 * A consent screen left in "Testing" (external users) issues refresh tokens that expire after 7 days: Google's
 * "Using OAuth 2.0 to Access Google APIs", section Refresh token expiration
 * (https://developers.google.com/identity/protocols/oauth2#expiration); reported in calcom/docker#336 and
 * andrewramsay/ical_to_gcal_sync#28 ("Token keeps expiring after 7 days").
 */
export const TESTING_REFRESH_TOKEN_LIFETIME_MS = 7 * 86_400_000;
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
  /** What the token may do: the scopes granted (consent) or asserted (service account). */
  scopes: string[];
}

interface Grant {
  clientId: string;
  subject: string;
  revoked: boolean;
  scopes: string[];
  /** Set for clients whose consent screen is in "Testing": the refresh token dies then. */
  expiresAt?: number;
}

/** An OAuth client as registered in the Cloud console. */
export interface OAuthClientRecord {
  secret: string;
  /** Desktop app: any loopback redirect. Web application: only the registered redirect URIs. */
  type: "desktop" | "web";
  redirectUris: Set<string>;
  /** The consent screen's publishing status is "Testing": refresh tokens expire after 7 days. */
  testing: boolean;
  /** The app name the consent page shows. */
  name: string;
}

export interface OAuthClientOptions {
  clientId?: string;
  clientSecret?: string;
  type?: "desktop" | "web";
  redirectUris?: string[];
  testing?: boolean;
  name?: string;
}

/** What a person approved on the consent page: the code the redirect carries is exchanged for this. */
export interface ApprovedConsent {
  clientId: string;
  redirectUri: string;
  subject: string;
  challenge: string | undefined;
  method: string;
  offline: boolean;
  /** The scopes the person left ticked, and the sign-in scopes asked for. */
  scopes: string[];
}

interface PendingCode extends ApprovedConsent {
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
  accessTokenTtlSeconds = 3599;
  /** Leave expires_in out of token responses (some proxies do); clients must still know the expiry. */
  omitExpiresIn = false;
  readonly #clock: Clock;
  readonly #tokenUrl: () => string;
  readonly #serviceAccounts = new Map<string, { key: KeyObject; delegation: boolean }>();
  readonly #clients = new Map<string, OAuthClientRecord>();
  readonly #refreshTokens = new Map<string, Grant>();
  readonly #accessTokens = new Map<string, AccessToken>();
  readonly #codes = new Map<string, PendingCode>();
  readonly #blocked = new Set<string>();
  /** The Cloud project of every client and key here; the Calendar API can be switched off in it. */
  readonly project = { number: "123456789012", calendarApiEnabled: true };

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

  registerOAuthClient(options: OAuthClientOptions = {}) {
    const clientId = options.clientId ?? `${randomBytes(6).toString("hex")}.apps.googleusercontent.com`;
    const clientSecret = options.clientSecret ?? `GOCSPX-${randomBytes(18).toString("base64url")}`;
    this.#clients.set(clientId, {
      secret: clientSecret,
      type: options.type ?? "desktop",
      redirectUris: new Set(options.redirectUris ?? []),
      testing: options.testing ?? false,
      name: options.name ?? "calbridge",
    });
    return { client_id: clientId, client_secret: clientSecret };
  }

  client(clientId: string): OAuthClientRecord | undefined {
    return this.#clients.get(clientId);
  }

  issueRefreshToken(subject: string, clientId?: string, scopes: string[] = [CALENDAR_SCOPE]): string {
    const client = clientId ?? this.#clients.keys().next().value ?? this.registerOAuthClient().client_id;
    const token = `1//${randomBytes(24).toString("base64url")}`;
    const grant: Grant = { clientId: client, subject, revoked: false, scopes: [...scopes] };
    if (this.#clients.get(client)?.testing) grant.expiresAt = this.#clock.now() + TESTING_REFRESH_TOKEN_LIFETIME_MS;
    this.#refreshTokens.set(token, grant);
    return token;
  }

  /** A code for what a person approved on the consent page (single use, 10 minutes). */
  issueCode(approved: ApprovedConsent): string {
    const code = `4/${randomBytes(24).toString("base64url")}`;
    this.#codes.set(code, { ...approved, expiresAt: this.#clock.now() + 600_000 });
    return code;
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

  #bearer(header: string | undefined): AccessToken {
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
    return entry;
  }

  /** The subject of a bearer token, or a Google-style 401. */
  authenticate(header: string | undefined): string {
    return this.#bearer(header).subject;
  }

  /**
   * The subject of a bearer token that may make this Calendar API call: 401 for a bad token; 403
   * `accessNotConfigured` while the Calendar API is off in the project (the message and the usageLimits domain as
   * reported in nextcloud/integration_google#16 and taylorwilsdon/google_workspace_mcp#126); 403
   * `insufficientPermissions`, "Request had insufficient authentication scopes.", when the token's scopes do not
   * cover the call (the body as quoted in analogdotnow/Analog#296 and mtanda/grafana-google-calendar-datasource#22:
   * a token without a calendar scope, or a read-only one used to write).
   */
  authorizeApi(header: string | undefined, method: string, path: string): string {
    const token = this.#bearer(header);
    if (!this.project.calendarApiEnabled) {
      const n = this.project.number;
      throw new ApiError(
        403,
        "accessNotConfigured",
        `Google Calendar API has not been used in project ${n} before or it is disabled. Enable it by visiting ` +
          `https://console.developers.google.com/apis/api/calendar-json.googleapis.com/overview?project=${n} then ` +
          "retry. If you enabled this API recently, wait a few minutes for the action to propagate to our systems and retry.",
        { domain: "usageLimits" },
      );
    }
    if (!scopesAllow(token.scopes, method, path)) {
      throw new ApiError(403, "insufficientPermissions", "Request had insufficient authentication scopes.");
    }
    return token.subject;
  }

  #issueAccess(subject: string, scopes: string[]): { access_token: string; expires_in?: number; token_type: "Bearer" } {
    const token = `ya29.${randomBytes(32).toString("base64url")}`;
    this.#accessTokens.set(token, {
      subject,
      expiresAt: this.#clock.now() + this.accessTokenTtlSeconds * 1000,
      revoked: false,
      scopes,
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
    if (!scopes.some((sc) => sc.startsWith(CALENDAR_SCOPE))) {
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
    return this.#issueAccess(subject, scopes.filter(Boolean));
  }

  #client(form: URLSearchParams, info: TokenRequestInfo): string {
    const clientId = form.get("client_id") ?? "";
    info.clientId = clientId;
    const secret = this.#clients.get(clientId)?.secret;
    if (secret === undefined || secret !== form.get("client_secret")) {
      throw new TokenError(401, "invalid_client", "The OAuth client was not found.");
    }
    return clientId;
  }

  #refresh(form: URLSearchParams, info: TokenRequestInfo): Record<string, unknown> {
    const clientId = this.#client(form, info);
    const grant = this.#refreshTokens.get(form.get("refresh_token") ?? "");
    if (grant) info.subject = grant.subject;
    const expired = grant?.expiresAt !== undefined && grant.expiresAt <= this.#clock.now();
    if (!grant || grant.revoked || expired || grant.clientId !== clientId || this.#isBlocked(grant.subject)) {
      throw new TokenError(400, "invalid_grant", "Token has been expired or revoked.");
    }
    return { ...this.#issueAccess(grant.subject, grant.scopes), scope: grant.scopes.join(" ") };
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
    // PKCE (RFC 7636): the verifier must hash (S256) or equal (plain) the challenge sent to the consent page; Google's
    // "OAuth 2.0 for Mobile & Desktop Apps", step 1 (https://developers.google.com/identity/protocols/oauth2/native-app).
    if (pending.challenge !== undefined) {
      const verifier = form.get("code_verifier") ?? "";
      const computed = pending.method === "S256" ? createHash("sha256").update(verifier).digest("base64url") : verifier;
      if (!verifier || computed !== pending.challenge) {
        throw new TokenError(400, "invalid_grant", "Invalid code verifier.");
      }
    }
    // `scope` carries what was granted, which with granular consent may be less than what was asked for:
    // https://developers.google.com/identity/protocols/oauth2/resources/granular-permissions
    const body: Record<string, unknown> = {
      ...this.#issueAccess(pending.subject, pending.scopes),
      scope: pending.scopes.join(" "),
    };
    if (pending.offline) body.refresh_token = this.issueRefreshToken(pending.subject, clientId, pending.scopes);
    return body;
  }
}
