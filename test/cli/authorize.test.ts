// `calbridge authorize`: the OAuth consent flow against the emulator's consent page, the refresh token stored, and a
// therapist with no token in the file then syncs with the stored one; a consent without the calendar scope stores
// nothing and says which box to tick.
import { writeFileSync } from "node:fs";
import { join } from "node:path";
import { request } from "undici";
import { afterEach, describe, expect, it } from "vitest";
import { stringify } from "yaml";
import { main } from "../../src/cli.ts";
import { createApp } from "../../src/daemon/app.ts";
import { silentLogger } from "../../src/log.ts";
import { startWorld, type World } from "../../src/simulator/world.ts";
import { loadRefreshToken } from "../../src/store/credentials.ts";
import { openStore } from "../../src/store/store.ts";
import { answerConsent, type ConsentChoice } from "../support/consent.ts";

let world: World | undefined;
afterEach(async () => {
  await world?.close();
  world = undefined;
});

async function oauthWorld(): Promise<{ world: World; file: string; client: { client_id: string } }> {
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
  const client = w.google.registerOAuthClient();
  w.config.google.oauth = client;
  w.google.consent.subject = "ben@personal.test";
  const file = join(w.dir, "calbridge.yaml");
  writeFileSync(file, stringify(w.config));
  return { world: w, file, client };
}

/**
 * Runs `calbridge authorize --therapist th_ben`; the consent address printed on stderr is opened by "the therapist",
 * who answers the consent page with `choice`. Resolves with the exit code, stderr, and the loopback page's answer.
 */
async function authorize(file: string, choice: ConsentChoice) {
  const original = process.stderr.write.bind(process.stderr);
  let printed = "";
  let all = "";
  let browser: Promise<{ status: number; text: string }> | undefined;
  process.stderr.write = ((chunk: string | Uint8Array) => {
    printed += String(chunk);
    all += String(chunk);
    const url = printed.match(/https?:\/\/\S+authorize\S*/)?.[0];
    if (url) {
      printed = "";
      browser = answerConsent(url, choice).then(async (location) => {
        const res = await request(location);
        return { status: res.statusCode, text: await res.body.text() };
      });
    }
    return true;
  }) as typeof process.stderr.write;
  let code: number;
  try {
    code = await main(["node", "calbridge", "--config", file, "authorize", "--therapist", "th_ben"]);
  } finally {
    process.stderr.write = original;
  }
  return { code, stderr: all, page: await browser };
}

describe("calbridge authorize", () => {
  it("runs the consent flow, stores the refresh token, and the daemon uses it", async () => {
    const setup = await oauthWorld();
    world = setup.world;
    const { code, page } = await authorize(setup.file, { tick: "all" });
    expect(code).toBe(0);
    expect(page).toMatchObject({ status: 200, text: expect.stringMatching(/calbridge is authorized/) });

    const app = await createApp(world.config, { logger: silentLogger, oneShot: true });
    try {
      expect(app.calendars.has("th_ben")).toBe(true);
      const ok = await app.calendars.get("th_ben")!.checkAccess();
      expect(ok.ok).toBe(true);
      world.booking.create(
        { therapist_id: "th_ben", start_time: new Date(Date.now() + 86_400_000).toISOString() },
        { force: true },
      );
      await app.reconcile();
      const token = world.google.requestLog.find((r) => r.grantType === "refresh_token");
      expect(token?.clientId).toBe(setup.client.client_id);
      // "primary" is the consenting user's own calendar.
      expect(world.google.events("ben@personal.test").filter((e) => e.status === "confirmed")).toHaveLength(1);
    } finally {
      await app.stop(1000);
    }
  });

  it("refuses a consent that left the calendar box unticked: nothing stored, the box named", async () => {
    const setup = await oauthWorld();
    world = setup.world;
    const { code, stderr, page } = await authorize(setup.file, { tick: [] });
    expect(code).toBe(1);
    expect(stderr).toContain("Google granted no calendar access");
    expect(stderr).toContain('tick "See, edit, share and permanently delete all the calendars');
    expect(page?.status).toBe(403);
    expect(page?.text).toContain("See, edit, share and permanently delete all the calendars");
    const store = await openStore(world.config.store.url);
    try {
      expect(await loadRefreshToken(store, "th_ben")).toBeUndefined();
    } finally {
      await store.close();
    }
  });
});
