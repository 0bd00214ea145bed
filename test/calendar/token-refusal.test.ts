// A refusal by the token endpoint that is no grant error (a Workspace admin's admin_policy_enforced, an egress proxy's
// or allow-list's 403 page, a 404 from a mistyped google.token_url) is no answer from Google about an event: no token
// was had and no API request sent. The credentials are broken (not declared working, not closing a broken alert), the
// sync layer waits for the calendar (no dead letter), and the summary and hint say what refused (review20).
import { createServer, type Server } from "node:http";
import type { AddressInfo } from "node:net";
import { afterEach, describe, expect, it } from "vitest";
import { OAuthCredentials } from "../../src/calendar/auth.ts";
import { credentialsHint, reconnectHelps } from "../../src/calendar/credential-hints.ts";
import { CalendarError, tokenErrorKind } from "../../src/calendar/errors.ts";
import { CalendarGateway } from "../../src/calendar/gateway.ts";
import { eventIdFor } from "../../src/calendar/ids.ts";
import { isPermanent, isUnavailable, safeErrorSummary } from "../../src/sync/errors.ts";
import { type Fixture, rejection, SUBJECT, setup } from "./helpers.ts";

let f: Fixture | undefined;
const servers: Server[] = [];
afterEach(async () => {
  await f?.close();
  f = undefined;
  for (const s of servers.splice(0)) await new Promise((resolve) => s.close(resolve));
});

const apiRequests = (x: Fixture) => x.emulator.requestLog.filter((r) => r.path.startsWith("/calendar/v3/"));

describe("a token endpoint refusal that is no grant error", () => {
  it("is 'auth' for any 4xx but 408 and 429", () => {
    for (const [status, error] of [
      [400, "admin_policy_enforced"],
      [403, undefined],
      [404, undefined],
      [400, "invalid_request"],
    ] as const) {
      expect(tokenErrorKind(status, error)).toBe("auth");
    }
    expect(tokenErrorKind(429, undefined)).toBe("rate_limited");
    expect(tokenErrorKind(408, undefined)).toBe("transient");
    expect(tokenErrorKind(503, undefined)).toBe("transient");
  });

  it("does not declare fresh credentials working: they are broken, naming the refusal, with no API request sent", async () => {
    f = await setup();
    f.emulator.faults.next(1, { target: "token", status: 400, reason: "admin_policy_enforced" });
    const err = await rejection(f.gateway.get(eventIdFor("a")));
    expect(err).toMatchObject({ tokenEndpoint: true, kind: "auth", status: 400, reason: "admin_policy_enforced" });
    expect(apiRequests(f)).toHaveLength(0);
    const health = f.gateway.health();
    expect(health).toMatchObject({ credentials: "broken", reason: "admin_policy_enforced" });
    expect(health.lastError).toMatch(/token endpoint answered 400 admin_policy_enforced/);
    expect(health.hint).toMatch(/Workspace admin/);
    // Reconnecting cannot fix it: the notifications send no reconnect link, and give the admins this hint.
    expect(health.reconnectHelps).toBe(false);
    expect(safeErrorSummary(err)).toBe(
      "Google's token endpoint refused the token request (HTTP 400, admin_policy_enforced): no access token, no API request sent",
    );
  });

  it("keeps broken credentials broken when the probe is refused with 403 instead of invalid_grant", async () => {
    f = await setup({ credentialProbeMs: 0 });
    await f.gateway.get(eventIdFor("warmup")).catch(() => {});
    f.emulator.revokeTokens(SUBJECT);
    await rejection(f.gateway.get(eventIdFor("a")));
    expect(f.gateway.health()).toMatchObject({ credentials: "broken", reason: "invalid_grant" });
    expect(f.gateway.health().reconnectHelps).toBeUndefined(); // a revoked grant: reconnecting is the fix
    // The next probe: an egress proxy (or a blocked app) refuses the token request; still no token.
    f.emulator.faults.next(1, { target: "token", status: 403, reason: "access_blocked" });
    const err = await rejection(f.gateway.get(eventIdFor("b")));
    expect(err).toMatchObject({ tokenEndpoint: true, status: 403, kind: "auth" });
    expect(f.gateway.health().credentials).toBe("broken");
  });

  it("a refusal met at a token refresh breaks working credentials; the probe after the endpoint answers again finds them working", async () => {
    f = await setup({ credentialProbeMs: 0 });
    await f.gateway.get(eventIdFor("warmup")).catch(() => {});
    expect(f.gateway.health().credentials).toBe("ok");
    // The access token is refused (401) and the new one is refused by the endpoint: a proxy's 403.
    f.emulator.expireAccessTokens(SUBJECT);
    f.emulator.faults.next(1, { target: "token", status: 403, reason: "access_blocked" });
    const err = await rejection(f.gateway.get(eventIdFor("a")));
    expect(err).toMatchObject({ tokenEndpoint: true, status: 403, kind: "auth" });
    expect(f.gateway.health()).toMatchObject({ credentials: "broken", reason: "access_blocked" });
    expect(f.gateway.health().hint).toMatch(/google\.token_url and any egress proxy/);
    expect(f.gateway.health().reconnectHelps).toBe(false);
    // The endpoint answers again: the next probe gets a token and Google's answer.
    await f.gateway.get(eventIdFor("b")).catch(() => {});
    expect(f.gateway.health().credentials).toBe("ok");
  });

  it("is neither permanent nor anything but 'calendar unavailable' to the sync layer", async () => {
    f = await setup();
    f.emulator.faults.next(1, { target: "token", status: 403, reason: "access_blocked" });
    const err = await rejection(f.gateway.upsert(eventIdFor("c"), { summary: "x" }));
    expect(isPermanent(err)).toBe(false);
    expect(isUnavailable(err)).toBe(true);
    // Even one of kind "invalid" (however it came) is never permanent when the token endpoint failed.
    expect(isPermanent(new CalendarError("x", { kind: "invalid", status: 400, tokenEndpoint: true }))).toBe(false);
  });

  it("an egress proxy's HTML 403 page at the token URL: broken, summary and hint say what refused, no secret shown", async () => {
    f = await setup();
    const server = createServer((_req, res) => {
      res.writeHead(403, { "content-type": "text/html" });
      res.end("<html><body>Access denied by policy</body></html>");
    });
    servers.push(server);
    await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
    const refreshToken = f.emulator.issueRefreshToken(SUBJECT, f.client.client_id);
    const auth = new OAuthCredentials({
      clientId: f.client.client_id,
      clientSecret: f.client.client_secret,
      refreshToken,
      tokenUrl: `http://127.0.0.1:${(server.address() as AddressInfo).port}/token`,
    });
    const gateway = new CalendarGateway({
      therapistId: "th_anna",
      calendarId: SUBJECT,
      apiRoot: f.emulator.rootUrl,
      auth,
      random: () => 0,
    });
    try {
      const err = await rejection(gateway.get(eventIdFor("a")));
      expect(err).toMatchObject({ tokenEndpoint: true, kind: "auth", status: 403, reason: undefined });
      expect(apiRequests(f)).toHaveLength(0);
      const health = gateway.health();
      expect(health).toMatchObject({ credentials: "broken", reason: "403" });
      expect(health.lastError).toMatch(/token endpoint answered 403$/);
      expect(health.hint).toMatch(/HTTP 403, no OAuth error/);
      expect(safeErrorSummary(err)).toBe(
        "Google's token endpoint refused the token request (HTTP 403, no OAuth error): no access token, no API request sent",
      );
      for (const text of [err.message, health.lastError, health.hint, safeErrorSummary(err)]) {
        expect(text).not.toContain(f.client.client_secret);
        expect(text).not.toContain(refreshToken);
      }
      expect(isPermanent(err)).toBe(false);
    } finally {
      gateway.close();
    }
  });

  it("a refusal of calbridge's own OAuth client (invalid_client, deleted_client) offers no reconnect: it names google.oauth", () => {
    for (const reason of ["invalid_client", "deleted_client"]) {
      const err = { reason, status: 401, tokenEndpoint: true };
      expect(tokenErrorKind(401, reason)).toBe("auth");
      // The connect flow's code exchange uses the same client: a reconnect link could not help (review23).
      expect(reconnectHelps(err)).toBe(false);
      const hint = credentialsHint(err, { therapistId: "th_1", calendarId: "primary", authKind: "oauth" });
      expect(hint).toMatch(/google\.oauth\.client_id and client_secret/);
      // google.* is restart-only (RESTART_ONLY in src/config/changes.ts): a reload would leave the old client (review25).
      expect(hint).toMatch(/restart calbridge/);
      expect(hint).not.toMatch(/SIGHUP/);
      expect(hint).not.toMatch(/calbridge invite|calbridge authorize/);
    }
  });
});
