// Two ways a one-shot command refused beside a leading daemon still acted in its place (SQLite, real processes, real
// HTTP):
// - `purge` compared calendar ids as strings: an OAuth therapist mapped with `calendar_id: primary` (the watch ledger
//   holds `primary`) purged with `--calendar their@address` (the same Google calendar), or the reverse, was not
//   refused, and the leader took the deletions for the therapist's own.
// - a refused `reconcile` (or `purge`) had already sealed the stored tokens again under the key of its own file: run
//   with a rotated key the daemon does not have yet, that locks the daemon out of them, although the command said
//   "nothing was written".
import { afterEach, describe, expect, it } from "vitest";
import type { Config } from "../../src/config/schema.ts";
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

/** th_anna connected by OAuth (token stored under KEY_A), her calendar named `calendarId` in the mapping. */
async function oauthWorld(calendarId: (address: string) => string): Promise<World> {
  const w = await startWorld({
    therapists: ["th_anna"],
    configure: (c) => {
      c.google.oauth = { client_id: "placeholder", client_secret: "placeholder-secret" };
      c.store = { ...c.store, lease_seconds: 2, encryption_key: KEY_A, previous_encryption_keys: [] };
      c.sync = { ...c.sync, reconcile_cron: "0 0 1 1 *" };
      for (const t of c.therapists) {
        t.auth = { type: "oauth" };
        delete t.impersonate;
        t.calendar_id = calendarId(t.calendar_id);
      }
    },
  });
  cleanups.push(() => w.close());
  await connectByOAuth(w, "th_anna", KEY_A);
  const now = Date.now();
  w.booking.seed({ therapists: w.therapists, count: 3, from: now + DAY, to: now + 5 * DAY });
  return w;
}

const leader = (config: Config): Promise<App> => leadingDaemon(config, (stop) => cleanups.push(stop));

const live = (w: World) => w.google.events(w.calendarOf("th_anna")).filter((e) => e.status !== "cancelled");

describe("purge beside a leader: `primary` and the account's address are the same calendar", () => {
  for (const [mapped, given] of [
    ["primary", "address"],
    ["address", "primary"],
    ["address", "ADDRESS"], // an address in other case: the same calendar to Google (addresses ignore case)
  ] as const) {
    it(`refuses: mapped as ${mapped}, purged with --calendar ${given}`, async () => {
      const w = await oauthWorld((address) => (mapped === "primary" ? "primary" : address));
      const app = await leader(w.config);
      expect(live(w)).toHaveLength(3);
      const file = writeConfig(w);
      const address = w.calendarOf("th_anna");
      const calendar = given === "primary" ? "primary" : given === "ADDRESS" ? address.toUpperCase() : address;
      const res = await cli(["purge", "--therapist", "th_anna", "--calendar", calendar, "--force", "--config", file]);
      const cancelsBefore = w.booking.requests.filter((r) => r.route.endsWith("/cancel")).length;
      await app.reconcile().catch(() => {});
      await app.engine.idle();
      const cancels = w.booking.requests.filter((r) => r.route.endsWith("/cancel")).length - cancelsBefore;
      expect({ code: res.code, stdout: res.stdout, cancels }).toEqual({ code: 1, stdout: "", cancels: 0 });
      expect(res.stderr).toMatch(/a calbridge daemon leads this store .* nothing was deleted/);
      expect(live(w)).toHaveLength(3);
    }, 60_000);
  }
});

describe("a one-shot command refused beside a leader writes nothing, not even a token sealed again", () => {
  /** The stored token's row as the store holds it (the envelope names the key it is sealed under). */
  async function storedRow(w: World): Promise<unknown> {
    const store = await openStore(w.config.store.url);
    try {
      return await store.table("credentials").get("oauth:th_anna");
    } finally {
      await store.close();
    }
  }

  for (const command of ["reconcile", "purge"] as const) {
    it(`${command} with a rotated key (KEY_B, KEY_A previous) beside a daemon on KEY_A`, async () => {
      const w = await oauthWorld((address) => address);
      await leader(w.config);
      const before = await storedRow(w);
      expect(before).toBeDefined();
      const file = writeConfig(w, (c) => {
        c.store = { ...c.store, encryption_key: KEY_B, previous_encryption_keys: [KEY_A] };
        // purge: th_anna left the file (her stored token is what purge signs in with), the leader still syncs her.
        if (command === "purge") {
          c.therapists = [
            {
              ...c.therapists[0]!,
              therapist_id: "th_ben",
              calendar_id: "th_ben@clinic.test",
              auth: { type: "service_account" },
            },
          ];
        }
      });
      const args = command === "reconcile" ? ["reconcile"] : ["purge", "--therapist", "th_anna", "--force"];
      const res = await cli([...args, "--config", file]);
      expect(res.code, res.stderr).toBe(1);
      expect(res.stderr).toMatch(/a calbridge daemon leads this store .* nothing was (written|deleted)/);
      expect(await storedRow(w)).toEqual(before);
      // The daemon, still on KEY_A, can read it.
      const store = await openStore(w.config.store.url);
      try {
        const token = await new CredentialStore({ store, box: new SecretBox(KEY_A), reseal: false }).loadRefreshToken(
          "th_anna",
        );
        expect(token?.token).toMatch(/^1\/\//);
      } finally {
        await store.close();
      }
    }, 60_000);
  }
});
