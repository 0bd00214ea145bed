// The web connect flow over real HTTP (the browser test walks the same pages in Chromium): `calbridge invite`, the
// landing page, Google's consent (the emulator's page), the callback's checks (state, PKCE, granted scopes, single
// use), the stored token taken up by the running daemon at once, the backfill, and reconnecting a broken therapist.
import { request } from "undici";
import { afterEach, describe, expect, it } from "vitest";
import { createInvite } from "../../src/connect/invite.ts";
import { runCli } from "../cli/support.ts";
import { answerConsent, type ConsentChoice } from "../support/consent.ts";
import { captureLog } from "../support/log-capture.ts";
import { BEN, CONNECT_SECRET, type ConnectWorld, startConnectWorld } from "./support.ts";

let cw: ConnectWorld | undefined;
afterEach(async () => {
  await cw?.close();
  cw = undefined;
});

async function get(url: string) {
  const res = await request(url);
  return { status: res.statusCode, headers: res.headers, html: await res.body.text() };
}

const hrefOf = (html: string, id: string) =>
  html.match(new RegExp(`id="${id}" href="([^"]+)"`))?.[1]?.replace(/&amp;/g, "&");

/** Opens the link, follows "Continue to Google", answers the consent page, and opens where Google sends the browser. */
async function connectThrough(link: string, choice: ConsentChoice = {}) {
  const landing = await get(link);
  expect(landing.status).toBe(200);
  const google = hrefOf(landing.html, "continue");
  expect(google).toBeTruthy();
  const callback = await answerConsent(google!, choice);
  return { landing, google: new URL(google!), callback: new URL(callback), page: await get(callback) };
}

const stored = async (w: ConnectWorld) => (await w.app.credentials.loadRefreshToken("th_ben"))?.token;

describe("calbridge invite", () => {
  it("prints a link on the public address; refuses what cannot be connected", async () => {
    cw = await startConnectWorld();
    const link = await cw.invite();
    expect(link).toMatch(new RegExp(`^${cw.origin}/connect\\?invite=[\\w-]+\\.[\\w-]+$`));
    const refused = async (...args: string[]) => {
      const res = await runCli("--config", cw!.file, "invite", ...args);
      return [res.code, res.stderr.trim()];
    };
    expect(await refused("--therapist", "th_nobody")).toEqual([2, expect.stringContaining("not in the configuration")]);
    expect(await refused("--therapist", "th_anna")).toEqual([2, expect.stringContaining("nothing to connect")]);
    expect(await refused("--therapist", "th_ben", "--ttl", "31d")).toEqual([2, expect.stringContaining("at most 30d")]);
    expect(await refused("--therapist", "th_ben", "--ttl", "soon")).toEqual([2, expect.stringContaining("--ttl soon")]);
  });
});

describe("connect pages", () => {
  it("connects a therapist end to end: consent with state and PKCE, token stored, events appear, link used", async () => {
    cw = await startConnectWorld();
    const w = cw;
    expect(w.app.calendars.has("th_ben")).toBe(false);
    const status = await w.app.status();
    expect(status.therapists[0]?.credentials).toMatchObject({
      ok: false,
      reconnect: "calbridge invite --therapist th_ben",
    });
    const link = await w.invite();
    const { landing, google, callback, page } = await connectThrough(link);

    // The landing page: who and what, the box to tick, strict headers, no referrer to Google.
    expect(landing.html).toContain("Praxis am Park");
    expect(landing.html).toContain("Ben Berger");
    expect(landing.html).toContain("See, edit, share and permanently delete all the calendars");
    expect(landing.headers["content-security-policy"]).toMatch(/^default-src 'none'; style-src 'sha256-[^']+'; /);
    expect(landing.headers["referrer-policy"]).toBe("no-referrer");
    // The consent request: web redirect to the daemon, offline access, forced consent, S256 PKCE, the calendar scope.
    expect(Object.fromEntries(google.searchParams)).toMatchObject({
      redirect_uri: `${w.origin}/connect/callback`,
      access_type: "offline",
      prompt: "consent",
      scope: "https://www.googleapis.com/auth/calendar",
      code_challenge_method: "S256",
    });
    expect(callback.origin + callback.pathname).toBe(`${w.origin}/connect/callback`);

    // The confirmation counts the bookings the booking service lists for the window, and says so.
    const expected = w.expected();
    expect(expected.length).toBeGreaterThan(3);
    expect(page.status).toBe(200);
    expect(page.html).toContain(`<strong id="count">${expected.length}</strong> appointments`);
    expect(page.html).toContain("Counted in Praxis am Park's booking system just now");
    const exchange = w.world.google.requestLog.find((r) => r.grantType === "authorization_code");
    expect(exchange).toMatchObject({ status: 200, subject: BEN });

    expect(await stored(w)).toBeTruthy();
    // No restart: the running daemon got a gateway and backfilled the therapist.
    expect(w.app.calendars.has("th_ben")).toBe(true);
    await expect.poll(() => w.live().length, { timeout: 15_000 }).toBe(expected.length);
    expect((await w.app.status()).therapists[0]?.credentials).toEqual({ ok: true });

    // Used: the link and the state are spent.
    const again = await get(link);
    expect(again.status).toBe(410);
    expect(again.html).toContain("This link was already used");
    const replayed = await get(callback.toString());
    expect(replayed.status).toBe(400);
  });

  it("a consent without the calendar scope stores nothing, names the box, and offers the link again", async () => {
    cw = await startConnectWorld();
    const link = await cw.invite();
    const { page } = await connectThrough(link, { tick: [] });
    expect(page.status).toBe(403);
    expect(page.html).toContain("Calendar access was not granted");
    expect(page.html).toContain('tick "See, edit, share and permanently delete all the calendars');
    expect(hrefOf(page.html, "retry")).toBe(link);
    expect(await stored(cw)).toBeUndefined();
    expect(cw.app.calendars.has("th_ben")).toBe(false);
    // The link is not spent: ticking the box this time connects.
    const second = await connectThrough(link, { tick: "all" });
    expect(second.page.status).toBe(200);
    expect(await stored(cw)).toBeTruthy();
  });

  it("Deny on Google's page stores nothing and offers the link again", async () => {
    cw = await startConnectWorld();
    const link = await cw.invite();
    const { page } = await connectThrough(link, { action: "deny" });
    expect(page.html).toContain("You did not allow access");
    expect(hrefOf(page.html, "retry")).toBe(link);
    expect(await stored(cw)).toBeUndefined();
  });

  it("refuses expired, tampered and foreign links and unexpected callbacks, storing nothing", async () => {
    cw = await startConnectWorld();
    const expired = createInvite("th_ben", { secret: CONNECT_SECRET, ttlMs: 60_000, now: Date.now() - 120_000 });
    const page = await get(`${cw.origin}/connect?invite=${expired.token}`);
    expect(page.status).toBe(410);
    expect(page.html).toContain("This link has expired");
    const link = await cw.invite();
    const tampered = link.replace(/invite=([\w-]+)\./, (_m, p: string) => `invite=${p.slice(0, -2)}AA.`);
    expect((await get(tampered)).status).toBe(400);
    const foreign = createInvite("th_ben", { secret: "another-secret-0123456789abcdefghijklmnop" });
    expect((await get(`${cw.origin}/connect?invite=${foreign.token}`)).status).toBe(400);
    expect((await get(`${cw.origin}/connect`)).status).toBe(400);
    const stray = await get(`${cw.origin}/connect/callback?state=made-up&code=4/abc`);
    expect(stray.status).toBe(400);
    expect(stray.html).toContain("was not expected");
    expect((await request(`${cw.origin}/connect`, { method: "POST" })).statusCode).toBe(405);
    expect(await stored(cw)).toBeUndefined();
  });

  it("reconnects a therapist whose token was revoked: /status and doctor say who and how, then sync resumes", async () => {
    const log = captureLog("debug");
    cw = await startConnectWorld({ logger: log.logger });
    const w = cw;
    await connectThrough(await w.invite());
    await expect.poll(() => w.live().length, { timeout: 15_000 }).toBe(w.expected().length);

    w.world.google.revokeTokens(BEN);
    await w.app.calendars.get("th_ben")!.checkAccess();
    const broken = (await w.app.status()).therapists[0]!.credentials;
    expect(broken).toMatchObject({
      ok: false,
      reason: "invalid_grant",
      reconnect: "calbridge invite --therapist th_ben",
    });
    expect(broken.hint).toContain("calbridge invite --therapist th_ben");
    const html = await get(`${w.app.admin!.url}/status.html`);
    expect(html.html).toContain("Needs a reconnect link:</b> <code>calbridge invite --therapist th_ben</code>");
    const doctor = await runCli("--config", w.file, "doctor", "--json");
    const check = (JSON.parse(doctor.stdout) as { checks: { name: string; fix?: string }[] }).checks.find(
      (c) => c.name === "calendar of th_ben",
    );
    expect(check?.fix).toContain("calbridge invite --therapist th_ben");

    // The therapist consents again (a new grant: the emulator lets the account back in) through a new link.
    w.world.google.restoreAccess(BEN);
    const relink = await w.invite();
    const { page, callback } = await connectThrough(relink);
    expect(page.status).toBe(200);
    expect((await w.app.status()).therapists[0]!.credentials.ok).toBe(true);
    await w.app.reconcile({ therapistId: "th_ben" }); // joins the backfill if it still runs
    const apt = w.world.booking.create(
      { therapist_id: "th_ben", start_time: new Date(Date.now() + 3 * 86_400_000).toISOString() },
      { force: true },
    );
    await w.app.reconcile({ therapistId: "th_ben" });
    expect(w.live().some((e) => JSON.stringify(e).includes(String(apt.id)))).toBe(true);
    // Neither the secret, the link's token nor Google's code reaches a log line (the request lines included).
    const text = log.raw.join("\n");
    expect(text).toContain("/connect/callback");
    for (const secret of [
      CONNECT_SECRET,
      new URL(relink).searchParams.get("invite")!,
      callback.searchParams.get("code")!,
    ]) {
      expect(text).not.toContain(secret);
    }
  });

  it("a token without the calendar scope (stored before scopes were checked) is named in /status, doctor and /metrics", async () => {
    cw = await startConnectWorld();
    const w = cw;
    const oauth = w.world.config.google.oauth!;
    await w.app.credentials.saveRefreshToken("th_ben", w.world.google.issueRefreshToken(BEN, oauth.client_id, []), {
      source: "authorize",
    });
    await w.app.credentialsChanged("th_ben");
    await w.app.reconcile({ therapistId: "th_ben" });
    // Broken credentials are the calendar's state, not the appointments' fault: nothing goes to the dead letters.
    await w.app.engine.idle();
    expect(w.app.sync.dead.count).toBe(0);
    const creds = (await w.app.status()).therapists[0]!.credentials;
    expect(creds).toMatchObject({
      ok: false,
      reason: "insufficientPermissions",
      reconnect: "calbridge invite --therapist th_ben",
    });
    expect(creds.hint).toContain('the box "See, edit, share and permanently delete all the calendars');
    const metrics = await (await request(`${w.app.admin!.url}/metrics`)).body.text();
    expect(metrics).toContain(
      'calbridge_google_credentials_broken{therapist="th_ben",reason="insufficientPermissions"} 1',
    );
    const doctor = await runCli("--config", w.file, "doctor");
    expect(doctor.stdout).toMatch(/FAIL calendar of th_ben: .*insufficientPermissions/);
    expect(doctor.stdout).toContain("have them tick that box");

    // The Calendar API switched off in the project: the fix names the project.
    w.world.google.project.calendarApiEnabled = false;
    const off = await runCli("--config", w.file, "doctor", "--json");
    const check = (JSON.parse(off.stdout) as { checks: { name: string; fix?: string }[] }).checks.find(
      (c) => c.name === "calendar of th_ben",
    );
    expect(check?.fix).toContain(
      `Enable the Google Calendar API in Google Cloud project ${w.world.google.project.number}`,
    );
    w.world.google.project.calendarApiEnabled = true;

    // Reconnected with the box ticked: the broken series is gone, credentials work.
    await connectThrough(await w.invite());
    await w.app.reconcile({ therapistId: "th_ben" });
    const fixed = (await w.app.status()).therapists[0]!.credentials;
    expect(fixed.ok).toBe(true);
    expect([fixed.reason, fixed.hint, fixed.reconnect]).toEqual([undefined, undefined, undefined]);
    const after = await (await request(`${w.app.admin!.url}/metrics`)).body.text();
    expect(after).not.toContain('calbridge_google_credentials_broken{therapist="th_ben"');
  });
});
