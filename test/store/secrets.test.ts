// Secrets at rest: AES-256-GCM envelopes under store.encryption_key, and the stored refresh tokens (CredentialStore):
// never in clear on disk, a clear error naming the therapist, the setting and the fix when one cannot be decrypted,
// an earlier build's clear tokens read and then encrypted, and key rotation through previous_encryption_keys.
import { readFileSync } from "node:fs";
import { afterEach, describe, expect, it } from "vitest";
import {
  CredentialDecryptError,
  CredentialStore,
  EncryptionKeyMissingError,
  matchesDigest,
  SecretBox,
  SecretDecryptError,
  tokenDigest,
} from "../../src/store/secrets.ts";
import type { Store, Table, TableName } from "../../src/store/store.ts";
import { captureLog } from "../support/log-capture.ts";
import { openTestStore, tmpStorePath } from "../webhooks/support.ts";

const KEY_A = "key-a-0123456789abcdef0123456789abcdef";
const KEY_B = "key-b-fedcba9876543210fedcba9876543210";
const TOKEN = "1//refresh-token-Quokka7Wombat3Platypus";

const opened: Store[] = [];
afterEach(async () => {
  for (const s of opened.splice(0)) await s.close();
});

async function sqlite() {
  const path = tmpStorePath();
  const store = await openTestStore(path);
  opened.push(store);
  return { store, path };
}

/** The database file and its write-ahead log as text, as someone reading the disk would see them. */
function onDisk(path: string): string {
  const read = (p: string) => {
    try {
      return readFileSync(p).toString("latin1");
    } catch {
      return "";
    }
  };
  return read(path) + read(`${path}-wal`);
}

/** The store as a full disk leaves it: reads work, every write fails. */
function refusingWrites(inner: Store): Store {
  const full = () => Promise.reject(new Error("SQLITE_FULL: database or disk is full"));
  return {
    ...inner,
    table<T>(name: TableName): Table<T> {
      const t = inner.table<T>(name);
      return {
        get: (k) => t.get(k),
        getMany: (k) => t.getMany(k),
        entries: () => t.entries(),
        delete: (k) => t.delete(k),
        deleteMany: (k) => t.deleteMany(k),
        addMany: full,
        replaceIf: full,
        set: full,
        setMany: full,
      };
    },
  };
}

const failure = async (work: Promise<unknown>) =>
  work.then(
    () => {
      throw new Error("expected a failure");
    },
    (e: unknown) => e,
  );

describe("SecretBox", () => {
  it("seals into a versioned envelope that opens only with its key and in its context", () => {
    const box = new SecretBox(KEY_A);
    const one = box.seal(TOKEN, "credentials/oauth/th_ben");
    const two = box.seal(TOKEN, "credentials/oauth/th_ben");
    expect(one).toMatch(/^enc:v1:[0-9a-f]{12}:[\w-]+:[\w-]+:[\w-]+$/);
    expect(one).not.toBe(two); // a salt and an IV of its own
    expect(one).not.toContain(TOKEN);
    expect(box.open(one, "credentials/oauth/th_ben")).toBe(TOKEN);
    expect(() => box.open(one, "credentials/oauth/th_anna")).toThrow(SecretDecryptError);
    const tampered = one.slice(0, -2) + (one.endsWith("AA") ? "BB" : "AA");
    expect(() => box.open(tampered, "credentials/oauth/th_ben")).toThrow(/damaged or altered/);
    const other = new SecretBox(KEY_B);
    expect(() => other.open(one, "credentials/oauth/th_ben")).toThrow(
      expect.objectContaining({ reason: "unknown_key", keyId: box.keyId }),
    );
    // While rotating, the earlier key still opens what it sealed, and the envelope is known to be stale.
    const rotating = new SecretBox(KEY_B, [KEY_A]);
    expect(rotating.open(one, "credentials/oauth/th_ben")).toBe(TOKEN);
    expect(rotating.isStale(one)).toBe(true);
    expect(rotating.isStale(rotating.seal("x", "c"))).toBe(false);
  });

  it("digests bearer tokens for comparison only", () => {
    const digest = tokenDigest("channel-token-1");
    expect(digest).toMatch(/^[0-9a-f]{64}$/);
    expect(matchesDigest("channel-token-1", digest)).toBe(true);
    expect(matchesDigest("channel-token-2", digest)).toBe(false);
    expect(matchesDigest("channel-token-1", "abc")).toBe(false);
  });
});

describe("CredentialStore", () => {
  it("stores a refresh token encrypted: it is nowhere on disk in clear, and reads back", async () => {
    const { store, path } = await sqlite();
    const credentials = new CredentialStore({ store, box: new SecretBox(KEY_A) });
    await credentials.saveRefreshToken("th_ben", TOKEN, { source: "authorize" });
    expect(await credentials.loadRefreshToken("th_ben")).toEqual({
      token: TOKEN,
      savedAt: expect.any(Number),
      meta: { source: "authorize" },
    });
    expect(onDisk(path)).not.toContain(TOKEN);
    expect(onDisk(path)).toContain("enc:v1:");
    expect(await credentials.loadRefreshToken("th_anna")).toBeUndefined();
  });

  it("refuses to store a token without a key, with the fix", async () => {
    const { store } = await sqlite();
    const err = await failure(new CredentialStore({ store }).saveRefreshToken("th_ben", TOKEN));
    expect(err).toBeInstanceOf(EncryptionKeyMissingError);
    expect(String(err)).toMatch(/store\.encryption_key is not set/);
    expect(String(err)).toMatch(/openssl rand -base64 32/);
    expect(await store.table("credentials").get("oauth:th_ben")).toBeUndefined();
  });

  it("names the therapist, store.encryption_key and the fix when a token cannot be decrypted", async () => {
    const { store } = await sqlite();
    await new CredentialStore({ store, box: new SecretBox(KEY_A) }).saveRefreshToken("th_ben", TOKEN);
    for (const [box, pattern] of [
      [new SecretBox(KEY_B), /encrypted under another key \(key id [0-9a-f]{12}\) than store\.encryption_key/],
      [undefined, /it is encrypted and store\.encryption_key is not set/],
    ] as const) {
      const err = await failure(new CredentialStore({ store, box }).loadRefreshToken("th_ben"));
      expect(err).toBeInstanceOf(CredentialDecryptError);
      expect(String(err)).toMatch(/therapist th_ben: the stored OAuth refresh token cannot be decrypted/);
      expect(String(err)).toMatch(pattern);
      expect(String(err)).toContain("run `calbridge authorize --therapist th_ben` again");
      expect(String(err)).not.toContain(TOKEN);
    }
    // An envelope copied into another therapist's row does not decrypt there.
    const row = await store.table<{ refresh_token: string; at: number }>("credentials").get("oauth:th_ben");
    await store.table("credentials").set("oauth:th_anna", row);
    const err = await failure(new CredentialStore({ store, box: new SecretBox(KEY_A) }).loadRefreshToken("th_anna"));
    expect(String(err)).toMatch(/therapist th_anna: .*damaged or altered/);
  });

  it("reads a token an earlier build stored in clear, and encrypts it once a key is configured", async () => {
    const { store, path } = await sqlite();
    await store.table("credentials").set("oauth:th_ben", { refresh_token: TOKEN, at: 1_700_000_000_000 });
    const log = captureLog();
    const keyless = new CredentialStore({ store, logger: log.logger });
    expect((await keyless.loadRefreshToken("th_ben"))?.token).toBe(TOKEN);
    expect((await keyless.loadRefreshToken("th_ben"))?.token).toBe(TOKEN);
    const warned = log.lines.filter((l) => String(l["msg"]).startsWith("refresh token stored in clear"));
    expect(warned).toHaveLength(1); // once
    expect(warned[0]).toMatchObject({ level: 40, therapist_id: "th_ben" });

    const keyed = new CredentialStore({ store, box: new SecretBox(KEY_A), logger: log.logger });
    expect(await keyed.loadRefreshToken("th_ben")).toEqual({ token: TOKEN, savedAt: 1_700_000_000_000, meta: {} });
    expect(await keyed.loadRefreshToken("th_ben")).toMatchObject({ token: TOKEN });
    const row = await store.table<{ refresh_token: string }>("credentials").get("oauth:th_ben");
    expect(row?.refresh_token).toMatch(/^enc:v1:/);
    expect(
      log.lines.filter(
        (l) =>
          l["msg"] === "refresh token stored in clear by an earlier build: now encrypted with store.encryption_key",
      ),
    ).toHaveLength(1);
    await store.close();
    opened.pop();
    // Once the log is checkpointed into the database file, the clear copy is gone from both.
    const { default: sqlite3 } = await import("sqlite3");
    await new Promise<void>((resolve, reject) => {
      const db = new sqlite3.Database(path);
      db.exec("PRAGMA wal_checkpoint(TRUNCATE);", (err) => db.close(() => (err ? reject(err) : resolve())));
    });
    expect(onDisk(path)).not.toContain(TOKEN);
  });

  it("rotates keys: a token sealed under a previous key is read and sealed again under the current one", async () => {
    const { store } = await sqlite();
    await new CredentialStore({ store, box: new SecretBox(KEY_A) }).saveRefreshToken("th_ben", TOKEN);
    const log = captureLog();
    const rotating = new CredentialStore({ store, box: new SecretBox(KEY_B, [KEY_A]), logger: log.logger });
    expect((await rotating.loadRefreshToken("th_ben"))?.token).toBe(TOKEN);
    expect(log.find((l) => String(l["msg"]).startsWith("refresh token sealed under a previous key"))).toBeDefined();
    // From now on the new key alone reads it.
    expect((await new CredentialStore({ store, box: new SecretBox(KEY_B) }).loadRefreshToken("th_ben"))?.token).toBe(
      TOKEN,
    );
  });

  it("seals every stale or clear token again at once, read or not, logging each by therapist id only", async () => {
    const { store } = await sqlite();
    const old = new CredentialStore({ store, box: new SecretBox(KEY_A) });
    await old.saveRefreshToken("th_ben", `${TOKEN}-ben`, { source: "authorize" }, 1_700_000_000_000);
    await old.saveRefreshToken("th_dora", `${TOKEN}-dora`);
    await store.table("credentials").set("oauth:th_anna", { refresh_token: `${TOKEN}-anna`, at: 5 }); // in clear
    const KEY_C = "key-c-00112233445566778899aabbccddeeff";
    await new CredentialStore({ store, box: new SecretBox(KEY_C) }).saveRefreshToken("th_cleo", `${TOKEN}-cleo`);
    await new CredentialStore({ store, box: new SecretBox(KEY_B) }).saveRefreshToken("th_eve", `${TOKEN}-eve`);
    const eveBefore = await store.table<{ refresh_token: string }>("credentials").get("oauth:th_eve");

    const log = captureLog();
    const rotating = new CredentialStore({ store, box: new SecretBox(KEY_B, [KEY_A]), logger: log.logger });
    expect(await rotating.resealAll()).toEqual({ resealed: 3, failed: 0, unreadable: 1 });
    const said = (start: string) =>
      log.lines
        .filter((l) => String(l["msg"]).startsWith(start))
        .map((l) => l["therapist_id"])
        .sort();
    expect(said("refresh token sealed under a previous key: now encrypted")).toEqual(["th_ben", "th_dora"]);
    expect(said("refresh token stored in clear by an earlier build: now encrypted")).toEqual(["th_anna"]);
    expect(said("stored refresh token not sealed again")).toEqual(["th_cleo"]); // under a key not configured: left
    expect(JSON.stringify(log.lines)).not.toContain(TOKEN);
    // Already current: not written again; a second pass finds nothing to do.
    expect(await store.table("credentials").get("oauth:th_eve")).toEqual(eveBefore);
    expect(await rotating.resealAll()).toEqual({ resealed: 0, failed: 0, unreadable: 1 });

    // The previous key removed: every token still reads, with its time and metadata, none in clear.
    const current = new CredentialStore({ store, box: new SecretBox(KEY_B) });
    expect(await current.loadRefreshToken("th_ben")).toEqual({
      token: `${TOKEN}-ben`,
      savedAt: 1_700_000_000_000,
      meta: { source: "authorize" },
    });
    for (const id of ["dora", "anna", "eve"])
      expect((await current.loadRefreshToken(`th_${id}`))?.token).toBe(`${TOKEN}-${id}`);
    for await (const [key, row] of store.table<{ refresh_token: string }>("credentials").entries())
      if (key !== "oauth:th_cleo") expect(row.refresh_token).toMatch(/^enc:v1:/);
  });

  it("leaves every token readable when the store refuses the writes of sealing them all again", async () => {
    const { store } = await sqlite();
    await new CredentialStore({ store, box: new SecretBox(KEY_A) }).saveRefreshToken("th_dora", TOKEN);
    const log = captureLog();
    const full = new CredentialStore({
      store: refusingWrites(store),
      box: new SecretBox(KEY_B, [KEY_A]),
      logger: log.logger,
    });
    expect(await full.resealAll()).toEqual({ resealed: 0, failed: 1, unreadable: 0 });
    expect(log.find((l) => l["therapist_id"] === "th_dora" && l["level"] === 40)).toBeDefined();
    expect(
      (await new CredentialStore({ store, box: new SecretBox(KEY_B, [KEY_A]) }).loadRefreshToken("th_dora"))?.token,
    ).toBe(TOKEN);
  });

  it("still answers a token it could not seal again while the store refuses writes, and seals it later", async () => {
    const { store } = await sqlite();
    await new CredentialStore({ store, box: new SecretBox(KEY_A) }).saveRefreshToken("th_ben", TOKEN);
    await store.table("credentials").set("oauth:th_anna", { refresh_token: TOKEN, at: 1 }); // an earlier build's
    const log = captureLog();
    const full = new CredentialStore({
      store: refusingWrites(store),
      box: new SecretBox(KEY_B, [KEY_A]),
      logger: log.logger,
    });
    expect((await full.loadRefreshToken("th_ben"))?.token).toBe(TOKEN);
    expect((await full.loadRefreshToken("th_anna"))?.token).toBe(TOKEN);
    const warned = log.lines.filter((l) => l["level"] === 40 && String(l["msg"]).includes("at the next read or start"));
    expect(warned.map((l) => l["therapist_id"]).sort()).toEqual(["th_anna", "th_ben"]);
    expect(warned.every((l) => String(l["err"]).includes("SQLITE_FULL"))).toBe(true);
    expect(JSON.stringify(log.lines)).not.toContain(TOKEN);
    // Once the store takes writes again, the next read seals them under the current key.
    const rotating = new CredentialStore({ store, box: new SecretBox(KEY_B, [KEY_A]) });
    for (const id of ["th_ben", "th_anna"]) expect((await rotating.loadRefreshToken(id))?.token).toBe(TOKEN);
    const current = new CredentialStore({ store, box: new SecretBox(KEY_B) });
    for (const id of ["th_ben", "th_anna"]) expect((await current.loadRefreshToken(id))?.token).toBe(TOKEN);
  });
});
