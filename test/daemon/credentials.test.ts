// The daemon's credential loading through the CredentialStore: a therapist whose stored refresh token decrypts syncs;
// one whose token was stored under another key is marked broken, with the reason and the fix in /status, the log and
// the metric, and the daemon starts anyway, the other therapists unaffected.
import { afterEach, describe, expect, it } from "vitest";
import { type App, createApp } from "../../src/daemon/app.ts";
import { startWorld, type World } from "../../src/simulator/world.ts";
import { CredentialStore, SecretBox } from "../../src/store/secrets.ts";
import { openStore } from "../../src/store/store.ts";
import { captureLog } from "../support/log-capture.ts";

const KEY_A = "key-a-0123456789abcdef0123456789abcdef";
const KEY_B = "key-b-fedcba9876543210fedcba9876543210";

let world: World | undefined;
let app: App | undefined;
afterEach(async () => {
  await app?.stop(1000);
  await world?.close();
  app = undefined;
  world = undefined;
});

async function oauthWorld(key: string, previous: string[] = []): Promise<World> {
  const w = await startWorld({
    therapists: ["th_anna", "th_ben", "th_cleo"],
    configure: (c) => {
      c.google.oauth = { client_id: "placeholder", client_secret: "placeholder-secret" };
      c.store = { ...c.store, encryption_key: key, previous_encryption_keys: previous };
      for (const t of c.therapists) {
        if (t.therapist_id !== "th_anna") t.auth = { type: "oauth" };
      }
    },
  });
  const client = w.google.registerOAuthClient();
  w.config.google.oauth = client;
  return w;
}

describe("stored refresh tokens in the daemon", () => {
  it("uses a token that decrypts, and marks one stored under another key broken without stopping", async () => {
    world = await oauthWorld(KEY_A);
    const store = await openStore(world.config.store.url);
    const client = world.config.google.oauth!.client_id;
    await new CredentialStore({ store, box: new SecretBox(KEY_A) }).saveRefreshToken(
      "th_ben",
      world.google.issueRefreshToken(world.calendarOf("th_ben"), client),
    );
    await new CredentialStore({ store, box: new SecretBox(KEY_B) }).saveRefreshToken(
      "th_cleo",
      world.google.issueRefreshToken(world.calendarOf("th_cleo"), client),
    );
    await store.close();

    const log = captureLog("info");
    app = await createApp(world.config, { logger: log.logger, oneShot: true, listen: "127.0.0.1:0" });
    expect([...app.calendars.keys()].sort()).toEqual(["th_anna", "th_ben"]);
    expect((await app.calendars.get("th_ben")!.checkAccess()).ok).toBe(true);

    const cleo = (await app.status()).therapists.find((t) => t.therapistId === "th_cleo")!;
    expect(cleo.credentials.ok).toBe(false);
    expect(cleo.credentials.detail).toMatch(
      /^therapist th_cleo: the stored OAuth refresh token cannot be decrypted: it was encrypted under another key \(key id [0-9a-f]+\) than store\.encryption_key: .*run `calbridge authorize --therapist th_cleo` again$/,
    );
    expect(log.find((l) => l["therapist_id"] === "th_cleo" && l["level"] === 50)).toMatchObject({
      msg: "therapist's calendar is not usable; its appointments wait",
      err: cleo.credentials.detail,
    });
    expect(await app.registry.metrics()).toContain('calbridge_therapist_credentials_ok{therapist="th_cleo"} 0');

    // The others sync.
    world.booking.create(
      { therapist_id: "th_ben", start_time: new Date(Date.now() + 86_400_000).toISOString() },
      { force: true },
    );
    await app.reconcile();
    expect(world.google.events(world.calendarOf("th_ben")).filter((e) => e.status === "confirmed")).toHaveLength(1);
  });

  it("a start with a new key seals every stored token again, also of therapists not mapped or with a file token", async () => {
    world = await oauthWorld(KEY_B, [KEY_A]);
    const client = world.config.google.oauth!.client_id;
    // th_cleo's token comes from the file; her stored one waits for the file token to be removed.
    const cleo = world.config.therapists.find((t) => t.therapist_id === "th_cleo")!;
    cleo.auth = { type: "oauth", refresh_token: world.google.issueRefreshToken(world.calendarOf("th_cleo"), client) };
    let store = await openStore(world.config.store.url);
    const old = new CredentialStore({ store, box: new SecretBox(KEY_A) });
    await old.saveRefreshToken("th_ben", world.google.issueRefreshToken(world.calendarOf("th_ben"), client));
    await old.saveRefreshToken("th_cleo", "1//cleo-stored-token-Kiwi5Tui2");
    await old.saveRefreshToken("th_dora", "1//dora-left-the-mapping-Quokka7"); // removed: `purge` signs in with it
    await store.table("credentials").set("oauth:th_emil", { refresh_token: "1//emil-clear-Koala9Emu4", at: 1 });
    await store.close();

    const log = captureLog("info");
    app = await createApp(world.config, { logger: log.logger, oneShot: true, listen: "127.0.0.1:0" });
    expect((await app.calendars.get("th_ben")!.checkAccess()).ok).toBe(true);
    await app.stop(1000);
    app = undefined;
    const sealed = log.lines.filter((l) => String(l["msg"]).includes(": now encrypted with"));
    expect(sealed.map((l) => l["therapist_id"]).sort()).toEqual(["th_ben", "th_cleo", "th_dora", "th_emil"]);
    expect(JSON.stringify(log.lines)).not.toMatch(/cleo-stored|dora-left|emil-clear/);

    // The old key removed, as the README says after that start: every stored token still reads.
    store = await openStore(world.config.store.url);
    try {
      const current = new CredentialStore({ store, box: new SecretBox(KEY_B) });
      expect((await current.loadRefreshToken("th_ben"))?.token).toBeDefined();
      expect((await current.loadRefreshToken("th_cleo"))?.token).toBe("1//cleo-stored-token-Kiwi5Tui2");
      expect((await current.loadRefreshToken("th_dora"))?.token).toBe("1//dora-left-the-mapping-Quokka7");
      const emil = await store.table<{ refresh_token: string }>("credentials").get("oauth:th_emil");
      expect(emil?.refresh_token).toMatch(/^enc:v1:/);
      expect((await current.loadRefreshToken("th_emil"))?.token).toBe("1//emil-clear-Koala9Emu4");
    } finally {
      await store.close();
    }
  });
});
