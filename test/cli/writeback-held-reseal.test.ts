// `calbridge writeback held` runs beside a running daemon on the same store (README). Run with a rotated key (the new
// one current, the old one in store.previous_encryption_keys) before the daemon has the new key, it sealed every stored
// OAuth token again under the new key at its start (and when read): the daemon, which has only the old key, was locked
// out of those therapists' calendars. It reads tokens with any configured key and seals none again; its decisions
// still write the calendar and the booking service.
import { afterEach, describe, expect, it } from "vitest";
import type { App } from "../../src/daemon/app.ts";
import { startWorld, type World } from "../../src/simulator/world.ts";
import { CredentialStore, SecretBox } from "../../src/store/secrets.ts";
import { openStore } from "../../src/store/store.ts";
import { runCliProcess as cli, connectByOAuth, leadingDaemon, writeConfig } from "./support.ts";

const KEY_A = "key-a-0123456789abcdef0123456789abcdef";
const KEY_B = "key-b-fedcba9876543210fedcba9876543210";
const DAY = 86_400_000;
const cleanups: (() => Promise<unknown>)[] = [];
afterEach(async () => {
  for (const c of cleanups.splice(0).reverse()) await c().catch(() => {});
});

/** th_anna connected by OAuth (token stored under KEY_A); every write-back held for a person to decide. */
async function oauthWorld(): Promise<World> {
  const w = await startWorld({
    therapists: ["th_anna"],
    configure: (c) => {
      c.google.oauth = { client_id: "placeholder", client_secret: "placeholder-secret" };
      c.store = { ...c.store, lease_seconds: 2, encryption_key: KEY_A, previous_encryption_keys: [] };
      c.sync = {
        ...c.sync,
        reconcile_cron: "0 0 1 1 *",
        writeback: { cancel_grace_seconds: 0, reschedule_grace_seconds: 0 },
        writeback_guard: { floor: 0, max_ratio: 0 },
      };
      for (const t of c.therapists) {
        t.auth = { type: "oauth" };
        delete t.impersonate;
      }
    },
  });
  cleanups.push(() => w.close());
  await connectByOAuth(w, "th_anna", KEY_A);
  const now = Date.now();
  w.booking.seed({ therapists: w.therapists, count: 3, from: now + DAY, to: now + 5 * DAY });
  return w;
}

const leader = (w: World): Promise<App> => leadingDaemon(w.config, (stop) => cleanups.push(stop));

/** The stored token's row as the store holds it (the envelope names the key it is sealed under). */
async function storedRow(w: World): Promise<unknown> {
  const store = await openStore(w.config.store.url);
  try {
    return await store.table("credentials").get("oauth:th_anna");
  } finally {
    await store.close();
  }
}

/** What the daemon, still on KEY_A only, reads. */
async function daemonReads(w: World): Promise<string | undefined> {
  const store = await openStore(w.config.store.url);
  try {
    const creds = new CredentialStore({ store, box: new SecretBox(KEY_A), reseal: false });
    return (await creds.loadRefreshToken("th_anna"))?.token;
  } finally {
    await store.close();
  }
}

const live = (w: World) => w.google.events(w.calendarOf("th_anna")).filter((e) => e.status !== "cancelled");

describe("writeback held with a rotated key (KEY_B, KEY_A previous) beside a daemon on KEY_A", () => {
  it("lists and restores the hold, and seals no stored token again", async () => {
    const w = await oauthWorld();
    const app = await leader(w);
    expect(live(w)).toHaveLength(3);
    // th_anna deletes an event: the guard holds the cancellation.
    const gone = live(w)[0]!;
    w.google.userDelete(w.calendarOf("th_anna"), String(gone.id));
    await app.poller.poll("th_anna");
    await app.engine.idle();
    expect(await app.sync.guard.held()).toHaveLength(1);
    const before = await storedRow(w);
    expect(before).toBeDefined();

    const file = writeConfig(w, (c) => {
      c.store = { ...c.store, encryption_key: KEY_B, previous_encryption_keys: [KEY_A] };
    });
    const listed = await cli(["writeback", "held", "--json", "--config", file]);
    expect(listed.code, listed.stderr).toBe(0);
    expect(JSON.parse(listed.stdout).held).toHaveLength(1);
    expect(await storedRow(w)).toEqual(before);

    const restored = await cli(["writeback", "held", "--restore", "--config", file]);
    expect(restored.code, restored.stderr).toBe(0);
    expect(live(w)).toHaveLength(3); // the event is back: the command wrote the calendar with the token it read
    expect(await app.sync.guard.held()).toHaveLength(0);
    expect(await storedRow(w)).toEqual(before);
    expect(await daemonReads(w)).toMatch(/^1\/\//);
  }, 60_000);
});
