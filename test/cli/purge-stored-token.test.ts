// `calbridge purge --therapist ID` for an OAuth therapist removed from the mapping signs in with the refresh token they
// connected. When the configured keys do not open that token (a mistyped store.encryption_key, the old key left out
// of store.previous_encryption_keys), purge stops with exit 2 and the decryption error, which names the setting: it
// neither sends an OAuth clinic to --impersonate (a service account it does not have) nor quietly tries the service
// account instead. With the right key, or with --impersonate given, it purges.
import { afterEach, describe, expect, it } from "vitest";
import { createApp } from "../../src/daemon/app.ts";
import { silentLogger } from "../../src/log.ts";
import { startWorld, type World } from "../../src/simulator/world.ts";
import { CredentialStore, SecretBox } from "../../src/store/secrets.ts";
import { openStore } from "../../src/store/store.ts";
import { runCli, writeConfig } from "./support.ts";

const KEY_A = "key-a-0123456789abcdef0123456789abcdef";
const KEY_WRONG = "key-w-fedcba9876543210fedcba9876543210";
const DAY = 86_400_000;

const worlds: World[] = [];
afterEach(async () => {
  for (const w of worlds.splice(0)) await w.close();
});

/** Anna and Ben connected by OAuth (tokens stored under KEY_A), one appointment each mirrored, the daemon stopped. */
async function connectedWorld(): Promise<World> {
  const world = await startWorld({
    therapists: ["th_anna", "th_ben"],
    configure: (c) => {
      c.google.oauth = { client_id: "placeholder", client_secret: "placeholder-secret" };
      c.store = { ...c.store, encryption_key: KEY_A, previous_encryption_keys: [] };
      for (const t of c.therapists) t.auth = { type: "oauth" };
    },
  });
  worlds.push(world);
  const client = world.google.registerOAuthClient();
  world.config.google.oauth = client;
  const store = await openStore(world.config.store.url);
  const creds = new CredentialStore({ store, box: new SecretBox(KEY_A) });
  for (const t of ["th_anna", "th_ben"]) {
    await creds.saveRefreshToken(t, world.google.issueRefreshToken(world.calendarOf(t), client.client_id));
    world.booking.create({ therapist_id: t, start_time: new Date(Date.now() + DAY).toISOString() }, { force: true });
  }
  await store.close();
  const app = await createApp(world.config, { logger: silentLogger, oneShot: true, listen: "127.0.0.1:0" });
  await app.reconcile();
  await app.stop(2000);
  expect(live(world, "th_ben")).toHaveLength(1);
  return world;
}

const live = (world: World, t: string) =>
  world.google.events(world.calendarOf(t)).filter((e) => e.status === "confirmed");

describe("purge of an unmapped OAuth therapist whose stored token does not decrypt", () => {
  it("stops with the decryption error naming store.encryption_key (OAuth-only clinic), and purges with the key", async () => {
    const world = await connectedWorld();
    const file = (key: string) =>
      writeConfig(world, (c) => {
        c.google.auth = { type: "oauth" };
        c.therapists = c.therapists.filter((t) => t.therapist_id !== "th_ben");
        c.store.encryption_key = key;
      });
    const r = await runCli("purge", "--therapist", "th_ben", "--force", "--config", file(KEY_WRONG));
    expect(r.code, r.stdout + r.stderr).toBe(2);
    expect(r.stderr).toMatch(
      /therapist th_ben: the stored OAuth refresh token cannot be decrypted: it was encrypted under another key \(key id [0-9a-f]+\) than store\.encryption_key/,
    );
    expect(r.stdout + r.stderr).not.toMatch(/--impersonate/);
    expect(live(world, "th_ben")).toHaveLength(1);

    const ok = await runCli("purge", "--therapist", "th_ben", "--force", "--config", file(KEY_A));
    expect(ok.code, ok.stdout + ok.stderr).toBe(0);
    expect(ok.stdout).toContain("as th_ben's connected Google account");
    expect(live(world, "th_ben")).toEqual([]);
  }, 60_000);

  it("does not quietly act through the service account instead; with --impersonate it does", async () => {
    const world = await connectedWorld();
    // google.auth stays the service account (the world's default): Ben's calendar is named by his address.
    const file = writeConfig(world, (c) => {
      c.therapists = c.therapists.filter((t) => t.therapist_id !== "th_ben");
      c.store.encryption_key = KEY_WRONG;
    });
    const r = await runCli("purge", "--therapist", "th_ben", "--force", "--config", file);
    expect(r.code, r.stdout + r.stderr).toBe(2);
    expect(r.stderr).toContain("the stored OAuth refresh token cannot be decrypted");
    expect(r.stderr).toContain("store.encryption_key");
    expect(r.stderr).toContain("or give --impersonate <address> to purge through the service account instead");
    expect(live(world, "th_ben")).toHaveLength(1);

    const ok = await runCli(
      "purge",
      "--therapist",
      "th_ben",
      "--impersonate",
      world.calendarOf("th_ben"),
      "--force",
      "--config",
      file,
    );
    expect(ok.code, ok.stdout + ok.stderr).toBe(0);
    expect(live(world, "th_ben")).toEqual([]);
  }, 60_000);
});
