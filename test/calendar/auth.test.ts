// Tests Google credentials against the emulator: service account with delegation, OAuth refresh, consent flow, no leaks.
import { mkdtemp, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { Registry } from "prom-client";
import { afterEach, beforeEach, describe, expect, it } from "vitest";
import {
  createCalendarAuth,
  OAuthCredentials,
  runConsentFlow,
  ServiceAccountCredentials,
} from "../../src/calendar/auth.ts";
import { CalendarError } from "../../src/calendar/errors.ts";
import { CalendarGateway } from "../../src/calendar/gateway.ts";
import { eventIdFor } from "../../src/calendar/ids.ts";
import { SecretRegistry } from "../../src/log.ts";
import { type CalendarEmulator, startCalendarEmulator } from "../../src/simulator/calendar/index.ts";
import { captureLog } from "../support/log-capture.ts";
import { body } from "./helpers.ts";

const ANNA = "anna@clinic.example";
let emulator: CalendarEmulator;
let dir: string;
const gateways: CalendarGateway[] = [];

beforeEach(async () => {
  emulator = await startCalendarEmulator();
  emulator.createCalendar(ANNA, ANNA, { timeZone: "Europe/Berlin" });
  dir = await mkdtemp(join(tmpdir(), "calbridge-auth-"));
});
afterEach(async () => {
  for (const g of gateways.splice(0)) g.close();
  await emulator.close();
  await rm(dir, { recursive: true, force: true });
});

function gatewayFor(
  auth: ServiceAccountCredentials | OAuthCredentials,
  extra: { logger?: ReturnType<typeof captureLog>["logger"] } = {},
) {
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
});

describe("consent flow", () => {
  it("runs end to end against the emulator: PKCE, state, loopback redirect, refresh token", async () => {
    const client = emulator.registerOAuthClient();
    emulator.consent.subject = ANNA;
    let shown = "";
    const result = await runConsentFlow({
      clientId: client.client_id,
      clientSecret: client.client_secret,
      authUrl: emulator.authUrl,
      tokenUrl: emulator.tokenUrl,
      openUrl: async (url) => {
        shown = url;
        // A stray answer with another state is ignored; then the "browser" follows the real redirect.
        const callback = new URL(url).searchParams.get("redirect_uri")!;
        expect((await fetch(`${callback}?code=forged&state=wrong`)).status).toBe(400);
        const res = await fetch(url);
        expect(res.status).toBe(200);
        expect(await res.text()).toMatch(/authorized/);
      },
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

  it("rejects when the user denies consent", async () => {
    const client = emulator.registerOAuthClient();
    emulator.consent.approve = false;
    await expect(
      runConsentFlow({
        clientId: client.client_id,
        clientSecret: client.client_secret,
        authUrl: emulator.authUrl,
        tokenUrl: emulator.tokenUrl,
        openUrl: async (url) => {
          await fetch(url);
        },
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
