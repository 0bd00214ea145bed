// The connect flow in a real browser: Debian's Chromium driven by playwright-core walks invite -> the daemon's page ->
// the emulator's consent page (tick, Allow) -> the callback -> the confirmation; then the therapist's events appear
// and the status page shows them connected. An unticked box gets the refusal page; a used or expired link is refused.
// Like the Redis tests: skipped where Chromium is missing, but under CI=true its absence fails the run.
import { existsSync, mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { type BrowserContext, chromium, type Page } from "playwright-core";
import { afterAll, afterEach, beforeAll, describe, expect, it } from "vitest";
import { createInvite } from "../../src/connect/invite.ts";
import { BEN, CONNECT_SECRET, type ConnectWorld, startConnectWorld } from "./support.ts";

const CHROMIUM = process.env.CALBRIDGE_CHROMIUM ?? "/usr/bin/chromium";
const ARGS = [
  "--no-sandbox",
  "--headless",
  "--disable-gpu",
  "--disable-quic",
  "--no-first-run",
  "--disable-background-networking",
  "--disable-component-update",
  "--disable-sync",
];

/** The emulator's consent page (google.auth_url). */
const onConsentPage = (u: URL) => u.pathname === "/authorize" || u.pathname === "/o/oauth2/v2/auth";

function browserTestsEnabled(): boolean {
  if (existsSync(CHROMIUM) || process.env.CI === "true") return true;
  console.warn(
    `[browser] skipped: ${CHROMIUM} not found; install Debian's chromium (apt-get install -y chromium), as .ci/run does`,
  );
  return false;
}

// A real browser on a shared, busy machine: more time per test than the suite's default.
describe.runIf(browserTestsEnabled())("connecting a calendar in Chromium", { timeout: 90_000 }, () => {
  let context: BrowserContext | undefined;
  let launchError: unknown;
  let profile = "";
  let cw: ConnectWorld | undefined;
  /** Content-Security-Policy violations the pages caused (Chromium reports them on the console). */
  const consoleErrors: string[] = [];

  beforeAll(async () => {
    profile = mkdtempSync(join(tmpdir(), "calbridge-chromium-"));
    try {
      context = await chromium.launchPersistentContext(profile, {
        executablePath: CHROMIUM,
        headless: true,
        args: ARGS,
      });
    } catch (err) {
      launchError = err;
    }
  }, 60_000);
  afterAll(async () => {
    await context?.close();
    rmSync(profile, { recursive: true, force: true });
  });
  afterEach(async () => {
    await cw?.close();
    cw = undefined;
    for (const page of context?.pages() ?? []) await page.close();
    consoleErrors.length = 0;
  });

  /** A fresh tab; throws the launch error under CI when Chromium is missing, so each test fails on its own. */
  async function tab(): Promise<Page> {
    if (!context) throw launchError ?? new Error("Chromium was not started");
    const page = await context.newPage();
    page.on("console", (msg) => {
      if (/Content Security Policy|Refused to/i.test(msg.text())) consoleErrors.push(msg.text());
    });
    return page;
  }

  it("invite -> page -> Google's consent (tick, Allow) -> confirmation; events appear; status shows it connected", async () => {
    cw = await startConnectWorld();
    const w = cw;
    const link = await w.invite();
    const page = await tab();

    await page.goto(link);
    await expect.poll(() => page.title(), { timeout: 10_000 }).toBe("Connect your Google Calendar"); // not the default 1 s
    expect(await page.textContent("body")).toContain(
      "Praxis am Park invites you to connect a Google Calendar for Ben Berger",
    );
    await page.click("#continue");

    // Google's consent page (the emulator): the account, the unticked box, Allow.
    await page.waitForURL(onConsentPage);
    expect(await page.textContent("#account")).toBe(BEN);
    const box = page.locator('input[name="scope"][value="https://www.googleapis.com/auth/calendar"]');
    expect(await box.isChecked()).toBe(false);
    await box.check();
    await page.click('button[value="allow"]');

    await page.waitForURL((u) => u.pathname === "/connect/callback");
    expect(await page.textContent("h1")).toBe("Your calendar is connected");
    const expected = w.expected().length;
    expect(await page.textContent("#count")).toBe(String(expected));
    expect((await w.app.credentials.loadRefreshToken("th_ben"))?.token).toBeTruthy();
    await expect.poll(() => w.live().length, { timeout: 15_000 }).toBe(expected);

    await page.goto(`${w.app.admin!.url}/status.html`);
    const row = page.locator("tr", { hasText: "Ben Berger" });
    expect(await row.locator(".ok").textContent()).toBe("ok");
    expect(await row.textContent()).not.toContain("failing");
    expect(consoleErrors.join("\n")).toBe("");
  });

  it("Allow with the calendar box unticked: the refusal page says what to tick, nothing is stored", async () => {
    cw = await startConnectWorld();
    const link = await cw.invite();
    const page = await tab();
    await page.goto(link);
    await page.click("#continue");
    await page.waitForURL(onConsentPage);
    await page.click('button[value="allow"]');
    await page.waitForURL((u) => u.pathname === "/connect/callback");
    expect(await page.textContent("h1")).toBe("Calendar access was not granted");
    expect(await page.textContent("body")).toContain(
      'tick "See, edit, share and permanently delete all the calendars you can access using Google Calendar"',
    );
    expect((await cw.app.credentials.loadRefreshToken("th_ben"))?.token).toBeUndefined();
    expect(cw.app.calendars.has("th_ben")).toBe(false);
    // "Try again" is the same link, still good.
    await page.click("#retry");
    expect(await page.textContent("h1")).toBe("Connect your Google Calendar");
    expect(consoleErrors.join("\n")).toBe("");
  });

  it("a used link and an expired one are refused", async () => {
    cw = await startConnectWorld();
    const link = await cw.invite();
    const page = await tab();
    await page.goto(link);
    await page.click("#continue");
    await page.waitForURL(onConsentPage);
    await page.check('input[name="scope"]');
    await page.click('button[value="allow"]');
    await page.waitForURL((u) => u.pathname === "/connect/callback");
    expect(await page.textContent("h1")).toBe("Your calendar is connected");

    await page.goto(link);
    expect(await page.textContent("h1")).toBe("This link was already used");
    const expired = createInvite("th_ben", { secret: CONNECT_SECRET, ttlMs: 60_000, now: Date.now() - 3_600_000 });
    await page.goto(`${cw.origin}/connect?invite=${expired.token}`);
    expect(await page.textContent("h1")).toBe("This link has expired");
    expect(await page.textContent("body")).toContain("Ask Praxis am Park for a new link.");
  });
});
