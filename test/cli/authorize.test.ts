// `calbridge authorize`: the OAuth consent flow against the emulator's consent page, the refresh token stored
// encrypted with store.encryption_key, and a therapist with no token in the file then syncs with the stored one. A
// consent without the calendar scope stores nothing and says which box to tick; without a key, or with a store that
// cannot be opened or refuses writes, it refuses before any consent; the store URL it prints never shows a password.
import { existsSync, mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, relative } from "node:path";
import { request } from "undici";
import { afterEach, describe, expect, it } from "vitest";
import type { Config } from "../../src/config/schema.ts";
import { createApp } from "../../src/daemon/app.ts";
import { silentLogger } from "../../src/log.ts";
import { startWorld, type World } from "../../src/simulator/world.ts";
import { CredentialStore, SecretBox } from "../../src/store/secrets.ts";
import { openStore } from "../../src/store/store.ts";
import { answerConsent, type ConsentChoice } from "../support/consent.ts";
import { freePort } from "../support/ports.ts";
import { redisTestsEnabled, startRedis } from "../support/redis.ts";
import { runCliWatching, writeConfig } from "./support.ts";

const KEY = "authorize-test-key-0123456789abcdef";

let world: World | undefined;
const cleanups: (() => Promise<unknown>)[] = [];
afterEach(async () => {
  for (const c of cleanups.splice(0).reverse()) await c().catch(() => {});
  await world?.close();
  world = undefined;
});

async function oauthWorld(): Promise<World> {
  const w = await startWorld({
    therapists: ["th_ben"],
    configure: (c) => {
      c.therapists[0] = {
        therapist_id: "th_ben",
        calendar_id: "primary",
        timezone: "Europe/Berlin",
        auth: { type: "oauth" },
      };
      c.google.oauth = { client_id: "placeholder", client_secret: "placeholder-secret" };
    },
  });
  w.config.google.oauth = w.google.registerOAuthClient();
  w.google.consent.subject = "ben@personal.test";
  return w;
}

/**
 * Runs `calbridge authorize --therapist th_ben` while "the therapist" opens the consent address it prints on stderr
 * and answers the consent page with `choice`. Resolves with the exit code, the output, the addresses opened and the
 * loopback page's answer.
 */
async function authorize(file: string, choice: ConsentChoice = { tick: "all" }) {
  const opened: string[] = [];
  let printed = "";
  let browser: Promise<{ status: number; text: string }> | undefined;
  const result = await runCliWatching(
    (text) => {
      printed += text;
      const url = printed.match(/https?:\/\/\S+authorize\S*/)?.[0];
      if (!url) return;
      printed = "";
      opened.push(url);
      browser = answerConsent(url, choice).then(async (location) => {
        const res = await request(location);
        return { status: res.statusCode, text: await res.body.text() };
      });
    },
    "--config",
    file,
    "authorize",
    "--therapist",
    "th_ben",
  );
  return { ...result, opened, page: await browser };
}

/** The loopback page's words, as the browser shows them. */
const textOf = (page: { text: string } | undefined) =>
  (page?.text ?? "")
    .replace(/&quot;/g, '"')
    .replace(/&#39;/g, "'")
    .replace(/&lt;/g, "<")
    .replace(/&gt;/g, ">")
    .replace(/&amp;/g, "&");

async function storedToken(config: Config) {
  const store = await openStore(config.store.url);
  try {
    return await new CredentialStore({ store, box: new SecretBox(KEY) }).loadRefreshToken("th_ben");
  } finally {
    await store.close();
  }
}

describe("calbridge authorize", () => {
  it("runs the consent flow, stores the refresh token encrypted, and the daemon uses it", async () => {
    world = await oauthWorld();
    const file = writeConfig(world, (c) => {
      c.store.encryption_key = KEY;
    });
    await (await openStore(world.config.store.url)).close(); // the daemon's store, there before
    const r = await authorize(file);
    expect(r.stderr).not.toMatch(/invalid configuration|warning/);
    expect(r.code).toBe(0);
    expect(r.page).toMatchObject({ status: 200, text: expect.stringMatching(/calbridge is authorized/) });
    expect(r.stdout).toMatch(/^authorized th_ben; the refresh token is stored encrypted in sqlite:\/\//);
    expect(r.stdout).toMatch(/a running daemon takes it up/);

    const config: Config = { ...world.config, store: { ...world.config.store, encryption_key: KEY } };
    const stored = await storedToken(config);
    expect(stored?.meta).toMatchObject({ source: "authorize" });
    const path = config.store.url.slice("sqlite://".length);
    const disk = readFileSync(path).toString("latin1") + readFileSync(`${path}-wal`, { flag: "a+" }).toString("latin1");
    expect(disk).not.toContain(stored!.token);

    const app = await createApp(config, { logger: silentLogger, oneShot: true });
    try {
      expect(app.calendars.has("th_ben")).toBe(true);
      expect((await app.calendars.get("th_ben")!.checkAccess()).ok).toBe(true);
      world.booking.create(
        { therapist_id: "th_ben", start_time: new Date(Date.now() + 86_400_000).toISOString() },
        { force: true },
      );
      await app.reconcile();
      const token = world.google.requestLog.find((req) => req.grantType === "refresh_token");
      expect(token?.clientId).toBe(config.google.oauth!.client_id);
      // "primary" is the consenting user's own calendar.
      expect(world.google.events("ben@personal.test").filter((e) => e.status === "confirmed")).toHaveLength(1);
    } finally {
      await app.stop(1000);
    }
  });

  it("names the file before the consent when no store is there yet (a first setup, or another folder), and claims no daemon", async () => {
    world = await oauthWorld();
    // A relative store.url, as the default is: run from another folder than the daemon's, it names another file.
    const folder = mkdtempSync(join(tmpdir(), "calbridge-authorize-"));
    cleanups.push(async () => rmSync(folder, { recursive: true, force: true }));
    const missing = join(folder, "calbridge.sqlite");
    const file = writeConfig(world, (c) => {
      c.store.encryption_key = KEY;
      c.store.url = `sqlite://${relative(process.cwd(), missing)}`;
    });
    const r = await authorize(file);
    expect(r.code).toBe(0);
    expect(r.stderr).toContain(`warning: store: no SQLite store at ${missing}`);
    expect(r.stderr).toContain("a new store is created there for the token");
    expect(r.stderr.indexOf("warning: store:")).toBeLessThan(r.stderr.indexOf("http")); // before the consent address
    expect(r.stdout).toContain(`stored encrypted in a new store, ${missing}`);
    expect(r.stdout).not.toContain("a running daemon takes it up");
    expect(existsSync(missing)).toBe(true);
  });

  it("refuses a consent that left the calendar box unticked: nothing stored, the box named", async () => {
    world = await oauthWorld();
    const file = writeConfig(world, (c) => {
      c.store.encryption_key = KEY;
    });
    const r = await authorize(file, { tick: [] });
    expect(r.code).toBe(1);
    expect(r.stderr).toContain("Google granted no calendar access");
    expect(r.stderr).toContain('tick "See, edit, share and permanently delete all the calendars');
    expect(r.page?.status).toBe(403);
    expect(r.page?.text).toContain("See, edit, share and permanently delete all the calendars");
    expect(await storedToken(world.config)).toBeUndefined();
  });

  it("stores nothing when the account chosen cannot open the mapped calendar, and says which; the owner then can", async () => {
    world = await oauthWorld();
    const shared = "ben-praxis@group.calendar.google.com";
    world.google.createCalendar(shared, "ben@personal.test");
    const file = writeConfig(world, (c) => {
      c.store.encryption_key = KEY;
      c.therapists[0]!.calendar_id = shared;
    });
    // The browser is signed in to another of Ben's accounts: Google answers the shared calendar 404 for it.
    world.google.consent.subject = "ben.private@gmail.test";
    const wrong = await authorize(file);
    expect(wrong.code).toBe(1);
    expect(wrong.stderr).toContain(`the Google account chosen cannot open calendar ${shared}`);
    expect(wrong.stderr).toContain("nothing was stored");
    expect(wrong.stdout).toBe("");
    // The browser is told the same, not "authorized": the loopback page waits for the check.
    expect(wrong.page?.status).toBe(403);
    expect(textOf(wrong.page)).not.toContain("calbridge is authorized");
    expect(textOf(wrong.page)).toContain(`The Google account chosen cannot open calendar ${shared}`);
    expect(textOf(wrong.page)).toContain("choose the account that owns it");
    expect(await storedToken(world.config)).toBeUndefined();

    world.google.consent.subject = "ben@personal.test";
    const right = await authorize(file);
    expect(right.code).toBe(0);
    expect(await storedToken(world.config)).toMatchObject({ meta: { source: "authorize" } });
  });

  it("refuses an account that can only see the mapped calendar, in the terminal and on the page; with writer access it is stored", async () => {
    world = await oauthWorld();
    const shared = "ben-praxis@group.calendar.google.com";
    world.google.createCalendar(shared, "desk@praxis.test");
    world.google.shareCalendar(shared, "ben@personal.test", "reader");
    const file = writeConfig(world, (c) => {
      c.store.encryption_key = KEY;
      c.therapists[0]!.calendar_id = shared;
    });
    const viewOnly = await authorize(file);
    expect(viewOnly.code).toBe(1);
    const refusal = `the Google account chosen can only see calendar ${shared} (access reader), not change its events: nothing was stored; the account needs the "Make changes to events" permission on it`;
    expect(viewOnly.stderr).toContain(`calbridge: ${refusal}`);
    expect(viewOnly.stdout).toBe("");
    expect(viewOnly.page?.status).toBe(403);
    expect(textOf(viewOnly.page)).not.toContain("calbridge is authorized");
    expect(textOf(viewOnly.page)).toContain(`The${refusal.slice(3)}`);
    expect(await storedToken(world.config)).toBeUndefined();

    world.google.shareCalendar(shared, "ben@personal.test", "writer");
    const writer = await authorize(file);
    expect(writer.code).toBe(0);
    expect(writer.page).toMatchObject({ status: 200, text: expect.stringMatching(/calbridge is authorized/) });
    expect(await storedToken(world.config)).toMatchObject({ meta: { source: "authorize" } });
  });

  it("stores the token when the calendar is not on the account's calendar list (no role to tell), and says so", async () => {
    world = await oauthWorld();
    const shared = "ben-praxis@group.calendar.google.com";
    world.google.createCalendar(shared, "desk@praxis.test");
    world.google.shareCalendar(shared, "ben@personal.test", "writer");
    world.google.removeFromCalendarList(shared, "ben@personal.test");
    const file = writeConfig(world, (c) => {
      c.store.encryption_key = KEY;
      c.therapists[0]!.calendar_id = shared;
    });
    const r = await authorize(file);
    expect(r.code).toBe(0);
    expect(r.page).toMatchObject({ status: 200, text: expect.stringMatching(/calbridge is authorized/) });
    expect(r.stderr).toContain(
      `note: whether this account may change events in calendar ${shared} could not be told (the calendar is not in the account's calendar list)`,
    );
    expect(world.google.requestLog.filter((req) => req.path.includes("/users/me/calendarList/"))).toMatchObject([
      { status: 404, subject: "ben@personal.test" },
    ]);
    expect(await storedToken(world.config)).toMatchObject({ meta: { source: "authorize" } });
  });

  it("refuses without store.encryption_key before asking for consent, with the fix", async () => {
    world = await oauthWorld();
    const file = writeConfig(world);
    const r = await authorize(file);
    expect(r.code).toBe(2);
    expect(r.opened).toEqual([]);
    expect(r.stderr).toMatch(/store\.encryption_key is not set, and calbridge does not store tokens in clear/);
    expect(r.stderr).toMatch(/therapists\[\]\.auth\.refresh_token/);
    expect(world.google.requestLog.filter((req) => req.grantType === "authorization_code")).toEqual([]);
  });

  it("refuses before asking for consent when the store cannot be opened (Redis down): no token issued to lose", async () => {
    world = await oauthWorld();
    const port = await freePort(); // nothing listens there
    const file = writeConfig(world, (c) => {
      c.store = { ...c.store, url: `redis://127.0.0.1:${port}`, encryption_key: KEY };
    });
    const r = await authorize(file);
    expect(r.code).toBe(1);
    expect(r.opened).toEqual([]);
    expect(r.page).toBeUndefined();
    expect(r.stderr.trimEnd().split("\n").at(-1)).toMatch(
      new RegExp(`^calbridge: store: Redis at redis://127\\.0\\.0\\.1:${port} did not answer within 5000 ms`),
    );
    expect(world.google.requestLog.filter((req) => req.grantType === "authorization_code")).toEqual([]);
  }, 20_000);

  it.skipIf(!redisTestsEnabled("authorize"))(
    "refuses before asking for consent when the store refuses writes (Redis over its maxmemory)",
    async () => {
      const server = await startRedis(["--maxmemory", "1", "--maxmemory-policy", "noeviction"]);
      cleanups.push(() => server.stop());
      world = await oauthWorld();
      const file = writeConfig(world, (c) => {
        c.store = { ...c.store, url: server.url, encryption_key: KEY };
      });
      const r = await authorize(file);
      expect(r.code).toBe(1);
      expect(r.opened).toEqual([]);
      expect(r.stderr.trimEnd().split("\n").at(-1)).toMatch(
        /^calbridge: store: redis:\/\/127\.0\.0\.1:\d+ refuses writes \(.*OOM.*\); nothing was asked of the therapist: fix the store first$/,
      );
    },
  );

  it.skipIf(!redisTestsEnabled("authorize"))("prints a Redis store URL without its password", async () => {
    const password = "hunter2-redis-password";
    const server = await startRedis(["--requirepass", password]);
    cleanups.push(() => server.stop());
    world = await oauthWorld();
    const url = `redis://default:${password}@127.0.0.1:${server.port}`;
    const file = writeConfig(world, (c) => {
      c.store = { ...c.store, url, encryption_key: KEY };
    });
    const r = await authorize(file);
    expect(r.code).toBe(0);
    expect(r.stdout).toBe(
      `authorized th_ben; the refresh token is stored encrypted in redis://***@127.0.0.1:${server.port}\n` +
        "a running daemon takes it up at once, without a restart\n",
    );
    expect(`${r.stdout}${r.stderr}`).not.toContain(password);
  });
});
