// Scopes and consent, as Google documents them: the emulator's consent page (unticked checkboxes, Allow/Deny, web and
// desktop redirect URIs, PKCE), tokens that remember their scopes, 403 insufficientPermissions / accessNotConfigured /
// requiredAccessLevel, "Testing" refresh tokens that die after 7 days; and the gateway naming each as broken
// credentials with a fix-it hint instead of a generic "forbidden".
import { createHash, randomBytes } from "node:crypto";
import { Registry } from "prom-client";
import { request } from "undici";
import { afterEach, beforeEach, describe, expect, it } from "vitest";
import { OAuthCredentials, ServiceAccountCredentials } from "../../src/calendar/auth.ts";
import { CalendarGateway } from "../../src/calendar/gateway.ts";
import { eventIdFor } from "../../src/calendar/ids.ts";
import { CALENDAR_SCOPE } from "../../src/calendar/scopes.ts";
import { ManualClock } from "../../src/clock.ts";
import { type CalendarEmulator, startCalendarEmulator } from "../../src/simulator/calendar/index.ts";
import { safeErrorSummary } from "../../src/sync/errors.ts";
import { answerConsent } from "../support/consent.ts";
import { body, metricValue, rejection } from "./helpers.ts";

const ANNA = "anna@clinic.example";
const READONLY = "https://www.googleapis.com/auth/calendar.readonly";
const DAY = 86_400_000;
let emulator: CalendarEmulator;
let clock: ManualClock;
const gateways: CalendarGateway[] = [];

beforeEach(async () => {
  clock = new ManualClock(Date.now());
  emulator = await startCalendarEmulator({ clock });
  emulator.createCalendar(ANNA, ANNA, { timeZone: "Europe/Berlin" });
  emulator.consent.subject = ANNA;
});
afterEach(async () => {
  for (const g of gateways.splice(0)) g.close();
  await emulator.close();
});

/** The consent address an app sends the browser to, with PKCE (S256). */
function consentUrl(clientId: string, redirectUri: string, scope = CALENDAR_SCOPE) {
  const verifier = randomBytes(32).toString("base64url");
  const url = new URL(emulator.authUrl);
  for (const [k, v] of Object.entries({
    client_id: clientId,
    redirect_uri: redirectUri,
    response_type: "code",
    scope,
    access_type: "offline",
    prompt: "consent",
    state: "st-1",
    code_challenge: createHash("sha256").update(verifier).digest("base64url"),
    code_challenge_method: "S256",
  })) {
    url.searchParams.set(k, v);
  }
  return { url: url.toString(), verifier };
}

async function exchange(
  client: { client_id: string; client_secret: string },
  code: string,
  redirectUri: string,
  verifier: string,
): Promise<{ status: number; body: Record<string, string> }> {
  const res = await request(emulator.tokenUrl, {
    method: "POST",
    headers: { "content-type": "application/x-www-form-urlencoded" },
    body: new URLSearchParams({
      grant_type: "authorization_code",
      code,
      redirect_uri: redirectUri,
      code_verifier: verifier,
      client_id: client.client_id,
      client_secret: client.client_secret,
    }).toString(),
  });
  return { status: res.statusCode, body: (await res.body.json()) as Record<string, string> };
}

interface GoogleAnswer {
  error: { message: string; errors: { reason: string; domain: string }[] };
}

async function api(token: string, method: string, path: string, json?: object) {
  const res = await request(`${emulator.rootUrl}calendar/v3/${path}`, {
    method: method as "GET",
    headers: { authorization: `Bearer ${token}`, "content-type": "application/json" },
    ...(json ? { body: JSON.stringify(json) } : {}),
  });
  return { status: res.statusCode, body: (await res.body.json().catch(() => ({}))) as GoogleAnswer };
}

const EVENTS = `calendars/${encodeURIComponent(ANNA)}/events`;
const WEB_REDIRECT = "https://sync.clinic.example/connect/callback";

/** The consent page answered with `choice`, then the code exchanged: the token endpoint's answer. */
async function consentAndExchange(choice: Parameters<typeof answerConsent>[1], scope = CALENDAR_SCOPE) {
  const client = emulator.registerOAuthClient({ type: "web", redirectUris: [WEB_REDIRECT] });
  const { url, verifier } = consentUrl(client.client_id, WEB_REDIRECT, scope);
  const location = new URL(await answerConsent(url, choice));
  const code = location.searchParams.get("code") ?? "";
  return { client, location, ...(await exchange(client, code, WEB_REDIRECT, verifier)) };
}

describe("emulator: consent page", () => {
  it("shows the requested scope as an unticked checkbox in Google's words, with Allow and Deny", async () => {
    const client = emulator.registerOAuthClient({ type: "web", redirectUris: [WEB_REDIRECT] });
    const res = await request(consentUrl(client.client_id, WEB_REDIRECT).url);
    const html = await res.body.text();
    expect(res.statusCode).toBe(200);
    expect(html).toContain(ANNA);
    expect(html).toMatch(
      /<input type="checkbox" name="scope" value="https:\/\/www.googleapis.com\/auth\/calendar"> See, edit, share and permanently delete all the calendars/,
    );
    expect(html).not.toMatch(/checked/);
    expect(html).toMatch(/value="allow">Allow</);
    expect(html).toMatch(/value="deny">Deny</);
  });

  it("ticked and allowed: the code carries the calendar scope, the token says so and works", async () => {
    const { location, status, body: token } = await consentAndExchange({ tick: "all" });
    expect(location.origin + location.pathname).toBe(WEB_REDIRECT);
    expect(location.searchParams.get("state")).toBe("st-1");
    expect(status).toBe(200);
    expect(token.scope).toBe(CALENDAR_SCOPE);
    expect(token.refresh_token).toMatch(/^1\/\//);
    expect((await api(token.access_token!, "GET", EVENTS)).status).toBe(200);
    expect((await api(token.access_token!, "POST", EVENTS, body("x"))).status).toBe(200);
  });

  it("allowed with the box unticked: the exchange succeeds and every call answers 403 insufficientPermissions", async () => {
    const { client, status, body: token } = await consentAndExchange({ tick: [] });
    expect(status).toBe(200);
    expect(token.scope).toBe("");
    for (const [method, path] of [
      ["GET", EVENTS],
      ["POST", EVENTS],
      ["GET", `calendars/${encodeURIComponent(ANNA)}`],
    ] as const) {
      const res = await api(token.access_token!, method, path, method === "POST" ? body("x") : undefined);
      expect(res.status).toBe(403);
      expect(res.body.error.errors[0]?.reason).toBe("insufficientPermissions");
      expect(res.body.error.message).toBe("Request had insufficient authentication scopes.");
    }
    // The refresh token remembers the grant: a refresh answers the same (empty) scope.
    const refreshed = await request(emulator.tokenUrl, {
      method: "POST",
      headers: { "content-type": "application/x-www-form-urlencoded" },
      body: new URLSearchParams({
        grant_type: "refresh_token",
        refresh_token: token.refresh_token!,
        client_id: client.client_id,
        client_secret: client.client_secret,
      }).toString(),
    });
    expect(refreshed.statusCode).toBe(200);
    expect(((await refreshed.body.json()) as { scope: string }).scope).toBe("");
  });

  it("a read-only scope reads and cannot write", async () => {
    const { body: token } = await consentAndExchange({ tick: "all" }, READONLY);
    expect(token.scope).toBe(READONLY);
    expect((await api(token.access_token!, "GET", EVENTS)).status).toBe(200);
    const write = await api(token.access_token!, "POST", EVENTS, body("x"));
    expect(write.status).toBe(403);
    expect(write.body.error.errors[0]?.reason).toBe("insufficientPermissions");
  });

  it("Deny redirects with error=access_denied and the state", async () => {
    const { location } = await consentAndExchange({ action: "deny" });
    expect(location.searchParams.get("error")).toBe("access_denied");
    expect(location.searchParams.get("state")).toBe("st-1");
    expect(location.searchParams.get("code")).toBeNull();
  });

  it("a web application may only redirect to its registered URIs; a desktop app to any loopback port", async () => {
    const web = emulator.registerOAuthClient({ type: "web", redirectUris: [WEB_REDIRECT] });
    const desktop = emulator.registerOAuthClient();
    const status = async (clientId: string, redirect: string) => {
      const res = await request(consentUrl(clientId, redirect).url);
      const text = await res.body.text();
      return res.statusCode === 400 ? text.match(/redirect_uri_mismatch/)?.[0] : res.statusCode;
    };
    expect(await status(web.client_id, WEB_REDIRECT)).toBe(200);
    expect(await status(web.client_id, "https://sync.clinic.example/connect/callback/")).toBe("redirect_uri_mismatch");
    expect(await status(web.client_id, "http://127.0.0.1:4567/connect/callback")).toBe("redirect_uri_mismatch");
    expect(await status(desktop.client_id, "http://127.0.0.1:4567/oauth2callback")).toBe(200);
    expect(await status(desktop.client_id, WEB_REDIRECT)).toBe("redirect_uri_mismatch");
  });

  it("checks the PKCE verifier at the token endpoint (S256)", async () => {
    const client = emulator.registerOAuthClient({ type: "web", redirectUris: [WEB_REDIRECT] });
    for (const verifier of ["wrong-verifier-0123456789012345678901234567890", ""]) {
      const { url } = consentUrl(client.client_id, WEB_REDIRECT);
      const code = new URL(await answerConsent(url)).searchParams.get("code")!;
      const answer = await exchange(client, code, WEB_REDIRECT, verifier);
      expect(answer.status).toBe(400);
      expect(answer.body.error).toBe("invalid_grant");
    }
  });
});

describe("emulator: project and sharing", () => {
  it("answers 403 accessNotConfigured, naming the project, while the Calendar API is off", async () => {
    const token = (await consentAndExchange({ tick: "all" })).body.access_token!;
    emulator.project.calendarApiEnabled = false;
    const res = await api(token, "GET", EVENTS);
    expect(res.status).toBe(403);
    expect(res.body.error.errors[0]).toMatchObject({ reason: "accessNotConfigured", domain: "usageLimits" });
    expect(res.body.error.message).toContain(`project ${emulator.project.number}`);
    emulator.project.calendarApiEnabled = true;
    expect((await api(token, "GET", EVENTS)).status).toBe(200);
  });

  it("answers 403 requiredAccessLevel to a write by an account the calendar is shared with read-only", async () => {
    emulator.shareCalendar(ANNA, "assistant@clinic.example", "reader");
    emulator.consent.subject = "assistant@clinic.example";
    const token = (await consentAndExchange({ tick: "all" })).body.access_token!;
    expect((await api(token, "GET", EVENTS)).status).toBe(200);
    const res = await api(token, "POST", EVENTS, body("x"));
    expect(res.status).toBe(403);
    expect(res.body.error.errors[0]?.reason).toBe("requiredAccessLevel");
  });

  it("a client whose consent screen is in Testing issues refresh tokens that die after 7 days", async () => {
    const client = emulator.registerOAuthClient({ testing: true });
    const refresh = emulator.issueRefreshToken(ANNA, client.client_id);
    const ask = async () => {
      const res = await request(emulator.tokenUrl, {
        method: "POST",
        headers: { "content-type": "application/x-www-form-urlencoded" },
        body: new URLSearchParams({
          grant_type: "refresh_token",
          refresh_token: refresh,
          client_id: client.client_id,
          client_secret: client.client_secret,
        }).toString(),
      });
      return { status: res.statusCode, body: (await res.body.json()) as Record<string, string> };
    };
    await clock.advance(6 * DAY);
    expect((await ask()).status).toBe(200);
    await clock.advance(DAY);
    expect(await ask()).toEqual({
      status: 400,
      body: { error: "invalid_grant", error_description: "Token has been expired or revoked." },
    });
  });
});

describe("gateway: refusals are broken credentials with a fix-it hint", () => {
  function oauthGateway(scopes: string[], registry = new Registry()) {
    const client = emulator.registerOAuthClient();
    const auth = new OAuthCredentials({
      clientId: client.client_id,
      clientSecret: client.client_secret,
      refreshToken: emulator.issueRefreshToken(ANNA, client.client_id, scopes),
      tokenUrl: emulator.tokenUrl,
    });
    const g = new CalendarGateway({
      therapistId: "th_anna",
      calendarId: ANNA,
      apiRoot: emulator.rootUrl,
      auth,
      clock,
      registry,
      random: () => 0,
    });
    gateways.push(g);
    credentialsOf.set(g, auth);
    return g;
  }
  const credentialsOf = new WeakMap<CalendarGateway, OAuthCredentials>();
  const apiCalls = () => emulator.requestLog.filter((r) => r.path.startsWith("/calendar/"));

  it("a grant without the calendar scope: broken, reason insufficientPermissions, the box to tick; one API call", async () => {
    const registry = new Registry();
    const g = oauthGateway([], registry);
    const err = await rejection(g.upsert(eventIdFor("apt_1"), body("x")));
    expect(err).toMatchObject({ kind: "auth", status: 403, reason: "insufficientPermissions" });
    const health = g.health();
    expect(health).toMatchObject({ credentials: "broken", reason: "insufficientPermissions" });
    expect(health.hint).toContain("See, edit, share and permanently delete all the calendars");
    expect(health.hint).toContain("calbridge invite --therapist th_anna");
    expect(apiCalls()).toHaveLength(1);
    expect(
      await metricValue(registry, "calbridge_google_credentials_broken", {
        therapist: "th_anna",
        reason: "insufficientPermissions",
      }),
    ).toBe(1);
    expect(await metricValue(registry, "calbridge_google_credentials_ok", { therapist: "th_anna" })).toBe(0);
    // Until a probe is due, writes fail fast: nothing is sent.
    await rejection(g.upsert(eventIdFor("apt_2"), body("y")));
    expect(apiCalls()).toHaveLength(1);
  });

  it("a refresh that grants no calendar scope: /status and notices say so, not an HTTP 403 Google never answered", async () => {
    const g = oauthGateway([]);
    // The token alone (a push renewal's refresh, the call runner's before a write): its answer's scope shows it.
    await credentialsOf.get(g)!.getAccessToken();
    expect(g.health()).toMatchObject({ credentials: "broken", reason: "insufficientPermissions" });
    const err = await rejection(g.upsert(eventIdFor("apt_1"), body("x")));
    expect(apiCalls()).toHaveLength(0);
    expect(safeErrorSummary(err)).toBe("Google's token endpoint granted no calendar scope");
  });

  it("a read-only grant: reads go on, writes are refused and fail fast until a write probe succeeds", async () => {
    const g = oauthGateway([READONLY]);
    expect(await g.get(eventIdFor("apt_1"))).toBeNull();
    const err = await rejection(g.upsert(eventIdFor("apt_1"), body("x")));
    expect(err).toMatchObject({ kind: "auth", reason: "insufficientPermissions" });
    expect(g.health().credentials).toBe("broken");
    // The refresh answer already said so: the token alone does not clear it, nor does a read.
    expect(await g.get(eventIdFor("apt_1"))).toBeNull();
    expect(g.health()).toMatchObject({ credentials: "broken", reason: "insufficientPermissions" });
    const sent = apiCalls().length;
    await rejection(g.upsert(eventIdFor("apt_1"), body("x")));
    expect(apiCalls()).toHaveLength(sent);
  });

  it("the Calendar API off in the project: the hint names the project and the console page", async () => {
    const g = oauthGateway([CALENDAR_SCOPE]);
    emulator.project.calendarApiEnabled = false;
    const err = await rejection(g.get(eventIdFor("apt_1")));
    expect(err).toMatchObject({ kind: "auth", reason: "accessNotConfigured" });
    expect(g.health().hint).toContain(
      `Enable the Google Calendar API in Google Cloud project ${emulator.project.number}`,
    );
    expect(g.health().hint).toContain(`overview?project=${emulator.project.number}`);
  });

  it("no write access to the calendar: the hint asks for 'Make changes to events'; fixed sharing clears it", async () => {
    const key = emulator.registerServiceAccount();
    emulator.shareCalendar(ANNA, "desk@clinic.example", "reader");
    const auth = new ServiceAccountCredentials({ key, subject: "desk@clinic.example", tokenUrl: emulator.tokenUrl });
    const g = new CalendarGateway({
      therapistId: "th_anna",
      calendarId: ANNA,
      apiRoot: emulator.rootUrl,
      auth,
      account: "desk@clinic.example",
      clock,
      registry: new Registry(),
      random: () => 0,
      credentialProbeMs: 60_000,
    });
    gateways.push(g);
    const err = await rejection(g.upsert(eventIdFor("apt_1"), body("x")));
    expect(err).toMatchObject({ kind: "auth", reason: "requiredAccessLevel" });
    expect(g.health().hint).toContain(`The account desk@clinic.example may not change events in calendar ${ANNA}`);
    expect(g.health().hint).toContain('"Make changes to events"');
    expect(await g.get(eventIdFor("apt_1"))).toBeNull(); // reads still work
    emulator.shareCalendar(ANNA, "desk@clinic.example", "writer");
    await clock.advance(60_001);
    expect((await g.upsert(eventIdFor("apt_1"), body("x"))).action).toBe("inserted");
    expect(g.health().credentials).toBe("ok");
  });

  it("a service account whose delegation lacks the scope: the hint is about domain-wide delegation", async () => {
    const key = emulator.registerServiceAccount();
    const auth = new ServiceAccountCredentials({
      key,
      subject: ANNA,
      tokenUrl: emulator.tokenUrl,
      scopes: [READONLY],
    });
    const g = new CalendarGateway({
      therapistId: "th_anna",
      calendarId: ANNA,
      apiRoot: emulator.rootUrl,
      auth,
      clock,
      registry: new Registry(),
      random: () => 0,
    });
    gateways.push(g);
    await rejection(g.upsert(eventIdFor("apt_1"), body("x")));
    expect(g.health().hint).toContain("Domain-wide delegation");
  });

  it("a Testing consent screen's token dies after 7 days: invalid_grant, with the hint to publish the app", async () => {
    const client = emulator.registerOAuthClient({ testing: true });
    const auth = new OAuthCredentials({
      clientId: client.client_id,
      clientSecret: client.client_secret,
      refreshToken: emulator.issueRefreshToken(ANNA, client.client_id),
      tokenUrl: emulator.tokenUrl,
    });
    const g = new CalendarGateway({
      therapistId: "th_anna",
      calendarId: ANNA,
      apiRoot: emulator.rootUrl,
      auth,
      clock,
      registry: new Registry(),
      random: () => 0,
    });
    gateways.push(g);
    expect(await g.get(eventIdFor("apt_1"))).toBeNull();
    await clock.advance(7 * DAY + 1000);
    const err = await rejection(g.get(eventIdFor("apt_1")));
    expect(err).toMatchObject({ kind: "auth", reason: "invalid_grant" });
    expect(g.health().hint).toContain('consent screen is in "Testing"');
  });
});
