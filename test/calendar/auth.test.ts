// Tests Google credentials against the emulator: service account with delegation, OAuth refresh, consent flow, no leaks.
import { mkdtemp, rm, writeFile } from "node:fs/promises";
import { createServer, type Server } from "node:http";
import type { AddressInfo } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { Registry } from "prom-client";
import { afterEach, beforeEach, describe, expect, it } from "vitest";
import {
  createCalendarAuth,
  GOOGLE_TOKEN_URL,
  OAuthCredentials,
  runConsentFlow,
  ServiceAccountCredentials,
} from "../../src/calendar/auth.ts";
import { type ConsentRefusal, ConsentRefusedError } from "../../src/calendar/consent.ts";
import { CalendarError } from "../../src/calendar/errors.ts";
import { CalendarGateway, type CalendarGatewayOptions } from "../../src/calendar/gateway.ts";
import { eventIdFor } from "../../src/calendar/ids.ts";
import { SecretRegistry } from "../../src/log.ts";
import { type CalendarEmulator, startCalendarEmulator } from "../../src/simulator/calendar/index.ts";
import { answerConsent } from "../support/consent.ts";
import { captureLog } from "../support/log-capture.ts";
import { body } from "./helpers.ts";

const ANNA = "anna@clinic.example";
let emulator: CalendarEmulator;
let dir: string;
const gateways: CalendarGateway[] = [];
const servers: Server[] = [];

beforeEach(async () => {
  emulator = await startCalendarEmulator();
  emulator.createCalendar(ANNA, ANNA, { timeZone: "Europe/Berlin" });
  dir = await mkdtemp(join(tmpdir(), "calbridge-auth-"));
});
afterEach(async () => {
  for (const g of gateways.splice(0)) g.close();
  for (const s of servers.splice(0)) await new Promise((resolve) => s.close(resolve));
  await emulator.close();
  await rm(dir, { recursive: true, force: true });
});

function gatewayFor(auth: ServiceAccountCredentials | OAuthCredentials, extra: Partial<CalendarGatewayOptions> = {}) {
  const g = new CalendarGateway({
    therapistId: "th_anna",
    calendarId: ANNA,
    apiRoot: emulator.rootUrl,
    auth,
    random: () => 0,
    registry: new Registry(),
    ...extra,
  });
  gateways.push(g);
  return g;
}
const tokenRequests = () => emulator.requestLog.filter((r) => r.path === "/token");

/** A clock whose sleeps return at once and are recorded: the call runner's retry delays. */
function recordingClock() {
  const sleeps: number[] = [];
  return { sleeps, now: () => Date.now(), sleep: async (ms: number) => void sleeps.push(ms) };
}

/** A real HTTP server on 127.0.0.1; returns its origin. */
async function serve(handler: Parameters<typeof createServer>[1]): Promise<string> {
  const server = createServer(handler);
  servers.push(server);
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  return `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
}

/** An egress proxy in front of the emulator's token endpoint: forwards the body, answers what the emulator answered. */
async function tokenProxy(): Promise<{ url: string; forwarded: () => number }> {
  let forwarded = 0;
  const origin = await serve(async (req, res) => {
    const chunks: Buffer[] = [];
    for await (const chunk of req) chunks.push(chunk as Buffer);
    forwarded++;
    const upstream = await fetch(emulator.tokenUrl, {
      method: "POST",
      headers: { "content-type": String(req.headers["content-type"]) },
      body: Buffer.concat(chunks),
    });
    res.writeHead(upstream.status, { "content-type": "application/json" });
    res.end(await upstream.text());
  });
  return { url: `${origin}/oauth2/token`, forwarded: () => forwarded };
}

const assertionAudience = (form: string) => {
  const assertion = new URLSearchParams(form).get("assertion") ?? "";
  return JSON.parse(Buffer.from(assertion.split(".")[1] ?? "", "base64url").toString()).aud as unknown;
};

describe("service account with domain-wide delegation", () => {
  it("signs its own assertion, posts it to the configured token URL with the impersonated subject, caches the token", async () => {
    const key = emulator.registerServiceAccount();
    const keyFile = join(dir, "sa.json");
    await writeFile(keyFile, JSON.stringify(key));
    const auth = await createCalendarAuth({
      type: "service_account",
      keyFile,
      subject: ANNA,
      tokenUrl: emulator.tokenUrl,
    });
    expect(auth).toBeInstanceOf(ServiceAccountCredentials);
    const gateway = gatewayFor(auth as ServiceAccountCredentials);
    await gateway.upsert(eventIdFor("apt_1"), body("x"));
    await gateway.get(eventIdFor("apt_1"));
    expect(tokenRequests()).toEqual([
      expect.objectContaining({
        method: "POST",
        status: 200,
        grantType: "urn:ietf:params:oauth:grant-type:jwt-bearer",
        clientEmail: key.client_email,
        subject: ANNA,
      }),
    ]);
    expect(emulator.requestLog.filter((r) => r.path.startsWith("/calendar/")).every((r) => r.subject === ANNA)).toBe(
      true,
    );
    expect(gateway.health().credentials).toBe("ok");
  });

  it("refuses a forged key: the emulator checks the RS256 signature", async () => {
    const real = emulator.registerServiceAccount();
    const other = emulator.registerServiceAccount();
    const forged = new ServiceAccountCredentials({
      key: { ...real, private_key: other.private_key },
      subject: ANNA,
      tokenUrl: emulator.tokenUrl,
    });
    const err = await forged.fetchAccessToken().catch((e: unknown) => e);
    expect(err).toBeInstanceOf(CalendarError);
    expect(err).toMatchObject({ kind: "auth", reason: "invalid_grant", tokenEndpoint: true });
    expect(String((err as Error).message)).toMatch(/Invalid JWT Signature/);
  });

  it("marks the gateway broken when delegation is not granted", async () => {
    const key = emulator.registerServiceAccount({ delegation: false });
    const auth = new ServiceAccountCredentials({ key, subject: ANNA, tokenUrl: emulator.tokenUrl });
    const gateway = gatewayFor(auth);
    const err = await gateway.get(eventIdFor("x")).catch((e: unknown) => e);
    expect(err).toMatchObject({ kind: "auth", reason: "unauthorized_client" });
    expect(String((err as Error).message)).toMatch(/domain-wide delegation/);
    expect(gateway.health().credentials).toBe("broken");
  });

  it("signs for the key's token_uri (Google's) while posting to a token_url proxy in front of Google", async () => {
    const key = { ...emulator.registerServiceAccount(), token_uri: GOOGLE_TOKEN_URL };
    const proxy = await tokenProxy();
    const auth = new ServiceAccountCredentials({ key, subject: ANNA, tokenUrl: proxy.url });
    const gateway = gatewayFor(auth);
    expect(await gateway.get(eventIdFor("x"))).toBeNull();
    expect(proxy.forwarded()).toBe(1);
    expect(tokenRequests()).toEqual([
      expect.objectContaining({
        status: 200,
        audience: GOOGLE_TOKEN_URL,
        clientEmail: key.client_email,
        subject: ANNA,
      }),
    ]);
    expect(gateway.health().credentials).toBe("ok");
  });

  it("signs for Google's token URL when token_url is the emulator and the key names Google's or no token_uri", async () => {
    const registered = emulator.registerServiceAccount();
    const { token_uri: _omitted, ...withoutTokenUri } = registered;
    for (const key of [{ ...registered, token_uri: GOOGLE_TOKEN_URL }, withoutTokenUri]) {
      const auth = new ServiceAccountCredentials({ key, subject: ANNA, tokenUrl: emulator.tokenUrl });
      expect(auth.audience).toBe(GOOGLE_TOKEN_URL);
      expect((await auth.fetchAccessToken()).access_token).toBeTruthy();
    }
    expect(tokenRequests().map((r) => [r.status, r.audience])).toEqual([
      [200, GOOGLE_TOKEN_URL],
      [200, GOOGLE_TOKEN_URL],
    ]);
  });

  it("posts the assertion for the key's token_uri to another token_url once, passing on a 503's Retry-After", async () => {
    const key = emulator.registerServiceAccount();
    const seen: unknown[] = [];
    const origin = await serve(async (req, res) => {
      let form = "";
      for await (const chunk of req) form += String(chunk);
      seen.push(assertionAudience(form));
      res.writeHead(503, { "content-type": "application/json", "retry-after": "2" });
      res.end(JSON.stringify({ error: "temporarily_unavailable", error_description: "try later" }));
    });
    const auth = new ServiceAccountCredentials({ key, subject: ANNA, tokenUrl: `${origin}/token` });
    const err = await auth.fetchAccessToken().catch((e: unknown) => e);
    expect(err).toMatchObject({ kind: "transient", status: 503, retryAfterMs: 2000, tokenEndpoint: true });
    expect(seen).toEqual([emulator.tokenUrl]);
  });
});

describe("OAuth per therapist", () => {
  it("refreshes at the configured token URL and does not refresh on a 403 rate limit", async () => {
    const client = emulator.registerOAuthClient();
    const auth = new OAuthCredentials({
      clientId: client.client_id,
      clientSecret: client.client_secret,
      refreshToken: emulator.issueRefreshToken(ANNA, client.client_id),
      tokenUrl: emulator.tokenUrl,
    });
    const gateway = gatewayFor(auth);
    await gateway.get(eventIdFor("warm"));
    expect(tokenRequests()).toHaveLength(1);
    expect(tokenRequests()[0]).toMatchObject({ grantType: "refresh_token", clientId: client.client_id, subject: ANNA });
    expect(auth.credentials.expiry_date).toBeGreaterThan(Date.now());
    emulator.faults.next(2, { status: 403, reason: "rateLimitExceeded" });
    await gateway.get(eventIdFor("x"));
    expect(tokenRequests()).toHaveLength(1);
  });

  it("fills expiry_date when the token response has no expires_in, so a 403 still does not refresh", async () => {
    emulator.omitExpiresIn = true;
    const client = emulator.registerOAuthClient();
    const auth = new OAuthCredentials({
      clientId: client.client_id,
      clientSecret: client.client_secret,
      refreshToken: emulator.issueRefreshToken(ANNA, client.client_id),
      tokenUrl: emulator.tokenUrl,
      defaultLifetimeSeconds: 600,
    });
    const gateway = gatewayFor(auth);
    await gateway.get(eventIdFor("warm"));
    expect(auth.credentials.expiry_date).toBeGreaterThan(Date.now() + 590_000);
    expect(auth.credentials.expiry_date).toBeLessThanOrEqual(Date.now() + 600_000);
    emulator.faults.next(1, { status: 403, reason: "rateLimitExceeded" });
    await gateway.get(eventIdFor("x"));
    expect(tokenRequests()).toHaveLength(1);
  });

  it("reports invalid_grant for a revoked refresh token", async () => {
    const client = emulator.registerOAuthClient();
    const refreshToken = emulator.issueRefreshToken(ANNA, client.client_id);
    emulator.revokeTokens(ANNA);
    const auth = new OAuthCredentials({
      clientId: client.client_id,
      clientSecret: client.client_secret,
      refreshToken,
      tokenUrl: emulator.tokenUrl,
    });
    const gateway = gatewayFor(auth);
    const err = await gateway.get(eventIdFor("x")).catch((e: unknown) => e);
    expect(err).toMatchObject({ kind: "auth", reason: "invalid_grant", tokenEndpoint: true });
    expect(gateway.health().credentials).toBe("broken");
  });

  function oauthCredentials(tokenUrl = emulator.tokenUrl) {
    const client = emulator.registerOAuthClient();
    const refreshToken = emulator.issueRefreshToken(ANNA, client.client_id);
    return new OAuthCredentials({
      clientId: client.client_id,
      clientSecret: client.client_secret,
      refreshToken,
      tokenUrl,
    });
  }

  it("sends one token request per call attempt when the token endpoint fails: only the call runner retries", async () => {
    const clock = recordingClock();
    const gateway = gatewayFor(oauthCredentials(), { clock, maxAttempts: 3 });
    emulator.faults.next(1000, { status: 503, reason: "temporarily_unavailable", target: "token" });
    const started = Date.now();
    const err = await gateway.get(eventIdFor("x")).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(CalendarError);
    expect(err).toMatchObject({
      kind: "transient",
      status: 503,
      reason: "temporarily_unavailable",
      tokenEndpoint: true,
    });
    expect(tokenRequests()).toHaveLength(3);
    expect(clock.sleeps).toHaveLength(2);
    expect(Date.now() - started).toBeLessThan(1000);
    expect(emulator.requestLog.filter((r) => r.path.startsWith("/calendar/"))).toHaveLength(0);
    expect(gateway.health().credentials).not.toBe("broken");
  });

  it("leaves a token-endpoint 429 to the call runner, which waits its Retry-After", async () => {
    const clock = recordingClock();
    const gateway = gatewayFor(oauthCredentials(), { clock });
    emulator.faults.next(1, { status: 429, reason: "rate_limit_exceeded", target: "token", retryAfter: 7 });
    expect(await gateway.get(eventIdFor("x"))).toBeNull();
    expect(tokenRequests().map((r) => r.status)).toEqual([429, 200]);
    expect(clock.sleeps).toEqual([7000]);
  });

  it("refreshes with one request on every OAuth2Client path, failing with the same error kinds", async () => {
    const auth = oauthCredentials();
    emulator.faults.next(1, { status: 503, reason: "backendError", target: "token" });
    await expect(auth.getAccessToken()).rejects.toMatchObject({ kind: "transient", status: 503, tokenEndpoint: true });
    expect(tokenRequests()).toHaveLength(1);
    emulator.faults.next(1, { status: 500, reason: "internal_failure", target: "token" });
    await expect(auth.refreshAccessToken()).rejects.toMatchObject({ kind: "transient", status: 500 });
    expect(tokenRequests()).toHaveLength(2);
    const { token } = await auth.getAccessToken();
    expect(token).toMatch(/^ya29\./);
    expect(auth.credentials).toMatchObject({ access_token: token, token_type: "Bearer" });
    expect(auth.credentials.refresh_token).toBeTruthy();
    expect(auth.credentials.expiry_date).toBeGreaterThan(Date.now());
    emulator.revokeTokens(ANNA);
    await expect(auth.refreshAccessToken()).rejects.toMatchObject({
      kind: "auth",
      status: 400,
      reason: "invalid_grant",
      tokenEndpoint: true,
    });
    expect(tokenRequests()).toHaveLength(4);
  });

  it("reports a connection reset at the token endpoint after one attempt, as a transient token error", async () => {
    let connections = 0;
    const origin = await serve((req) => {
      connections++;
      req.socket.destroy();
    });
    const auth = oauthCredentials(`${origin}/token`);
    const err = await auth.getAccessToken().catch((e: unknown) => e);
    expect(err).toBeInstanceOf(CalendarError);
    expect(err).toMatchObject({ kind: "transient", tokenEndpoint: true, ambiguous: false });
    expect(connections).toBe(1);
  });
});

/** `calbridge authorize` against the emulator with `client`; `open` plays the browser. */
function consent(client: { client_id: string; client_secret: string }, open: (url: string) => Promise<void>) {
  return runConsentFlow({
    clientId: client.client_id,
    clientSecret: client.client_secret,
    authUrl: emulator.authUrl,
    tokenUrl: emulator.tokenUrl,
    openUrl: open,
  });
}

describe("consent flow", () => {
  it("runs end to end against the emulator: PKCE, state, loopback redirect, refresh token", async () => {
    const client = emulator.registerOAuthClient();
    emulator.consent.subject = ANNA;
    let shown = "";
    const result = await consent(client, async (url) => {
      shown = url;
      // A stray answer with another state is ignored; then the "browser" follows the real redirect.
      const callback = new URL(url).searchParams.get("redirect_uri")!;
      expect((await fetch(`${callback}?code=forged&state=wrong`)).status).toBe(400);
      const res = await fetch(await answerConsent(url));
      expect(res.status).toBe(200);
      expect(await res.text()).toMatch(/authorized/);
    });
    const auth = new URL(shown).searchParams;
    expect(auth.get("code_challenge_method")).toBe("S256");
    expect(auth.get("access_type")).toBe("offline");
    expect(auth.get("redirect_uri")).toMatch(/^http:\/\/127\.0\.0\.1:\d+\//);
    expect(result.refresh_token).toBeTruthy();
    expect(result.expiry_date).toBeGreaterThan(Date.now());
    const exchange = tokenRequests().find((r) => r.grantType === "authorization_code");
    expect(exchange).toMatchObject({ status: 200, subject: ANNA });

    const creds = new OAuthCredentials({
      clientId: client.client_id,
      clientSecret: client.client_secret,
      refreshToken: result.refresh_token,
      tokenUrl: emulator.tokenUrl,
    });
    expect(await gatewayFor(creds).checkAccess()).toMatchObject({ ok: true });
  });

  it("answers the browser only once `accept` decided: its refusal, or a pointer to the terminal when it throws", async () => {
    const client = emulator.registerOAuthClient();
    emulator.consent.subject = ANNA;
    const run = (accept: () => Promise<ConsentRefusal | undefined>) => {
      let page: Promise<{ status: number; text: string }> | undefined;
      const flow = runConsentFlow({
        clientId: client.client_id,
        clientSecret: client.client_secret,
        authUrl: emulator.authUrl,
        tokenUrl: emulator.tokenUrl,
        accept,
        openUrl: async (url) => {
          page = answerConsent(url).then(async (location) => {
            const res = await fetch(location);
            return { status: res.status, text: await res.text() };
          });
        },
      }).catch((e: unknown) => e);
      return flow.then(async (outcome) => ({ outcome, page: await page }));
    };
    let decided = false;
    const refused = await run(async () => {
      await new Promise((r) => setTimeout(r, 200));
      decided = true;
      return { message: "the account cannot be used here: nothing was stored" };
    });
    expect(decided).toBe(true);
    expect(refused.outcome).toBeInstanceOf(ConsentRefusedError);
    expect((refused.outcome as Error).message).toBe("the account cannot be used here: nothing was stored");
    expect(refused.page).toMatchObject({ status: 403 });
    expect(refused.page?.text).toContain(
      "The account cannot be used here: nothing was stored. You can close this tab.",
    );
    expect(refused.page?.text).not.toContain("authorized");

    const failed = await run(async () => {
      throw new Error("store: refused the write");
    });
    expect((failed.outcome as Error).message).toBe("store: refused the write");
    expect(failed.page).toMatchObject({ status: 500 });
    expect(failed.page?.text).toContain("did not finish; see the terminal");
  });

  it("exchanges the single-use code once: a failing token endpoint is reported, not retried", async () => {
    const client = emulator.registerOAuthClient();
    emulator.consent.subject = ANNA;
    emulator.faults.next(1, { status: 503, reason: "backendError", target: "token" });
    const before = tokenRequests().length;
    const err = await consent(client, async (url) => {
      await fetch(await answerConsent(url));
    }).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(CalendarError);
    expect(err).toMatchObject({ kind: "transient", tokenEndpoint: true, status: 503 });
    expect(String((err as Error).message)).toContain("authorization code exchange");
    expect(String((err as Error).message)).not.toContain(client.client_secret);
    expect(
      tokenRequests()
        .slice(before)
        .map((r) => r.status),
    ).toEqual([503]);
  });

  it("rejects when the user denies consent", async () => {
    const client = emulator.registerOAuthClient();
    await expect(
      consent(client, async (url) => {
        await fetch(await answerConsent(url, { action: "deny" }));
      }),
    ).rejects.toThrow(/access_denied/);
  });
});

describe("secrets", () => {
  it("never logs private keys, client secrets, refresh or access tokens", async () => {
    // A fresh registry: nothing is scrubbed, so any leak would show.
    const log = captureLog("trace", new SecretRegistry());
    const key = emulator.registerServiceAccount();
    const sa = new ServiceAccountCredentials({ key, subject: ANNA, tokenUrl: emulator.tokenUrl });
    const client = emulator.registerOAuthClient();
    const refreshToken = emulator.issueRefreshToken(ANNA, client.client_id);
    const oauth = new OAuthCredentials({
      clientId: client.client_id,
      clientSecret: client.client_secret,
      refreshToken,
      tokenUrl: emulator.tokenUrl,
    });
    const secretsSeen = new Set<string>([key.private_key, client.client_secret, refreshToken]);
    for (const auth of [sa, oauth]) {
      auth.on("tokens", (t) => t.access_token && secretsSeen.add(t.access_token));
      const gateway = gatewayFor(auth, { logger: log.logger });
      emulator.faults.next(1, { status: 503, reason: "temporarily_unavailable", target: "token" });
      emulator.faults.next(2, { status: 503, reason: "backendError" });
      await gateway.upsert(eventIdFor("apt_s"), body("x"));
      emulator.faults.next(1, { status: 403, reason: "quotaExceeded" });
      await gateway.get(eventIdFor("apt_s")).catch(() => undefined);
    }
    emulator.revokeTokens();
    const broken = gatewayFor(oauth, { logger: log.logger });
    await broken.get(eventIdFor("apt_s")).catch(() => undefined);
    expect(log.raw.length).toBeGreaterThan(3);
    expect(secretsSeen.size).toBeGreaterThanOrEqual(5);
    const text = log.raw.join("\n");
    for (const secret of secretsSeen) {
      expect(text).not.toContain(secret);
      expect(text).not.toContain(JSON.stringify(secret).slice(1, -1));
    }
  });
});

describe("emulator on a simulated clock", () => {
  it("accepts assertions signed with the wall clock while its own clock is elsewhere", async () => {
    const { ManualClock } = await import("../../src/clock.ts");
    const simulated = await startCalendarEmulator({ clock: new ManualClock(Date.UTC(2031, 0, 1)) });
    try {
      simulated.createCalendar(ANNA, ANNA);
      const key = simulated.registerServiceAccount();
      const auth = new ServiceAccountCredentials({ key, subject: ANNA, tokenUrl: simulated.tokenUrl });
      const token = await auth.fetchAccessToken();
      expect(token.access_token).toBeTruthy();
    } finally {
      await simulated.close();
    }
  });
});
