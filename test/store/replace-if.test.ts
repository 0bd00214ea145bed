// A write made only over the entry as it was read (Table.replaceIf), on each backend: what lets the key rotation
// seal a stored refresh token again without writing it back over a newer one stored meanwhile (a connect,
// `calbridge authorize`, another replica), which lost the therapist's fresh consent.
import { afterEach, describe, expect, it } from "vitest";
import { CredentialStore, SecretBox } from "../../src/store/secrets.ts";
import { openStore, type Store, type TableName } from "../../src/store/store.ts";
import { captureLog } from "../support/log-capture.ts";
import { redisTestsEnabled, useRedisServer } from "../support/redis.ts";
import { tmpStorePath } from "../webhooks/support.ts";

const OLD = "old-key-0123456789abcdef0123456789abcdef";
const NEW = "new-key-fedcba9876543210fedcba9876543210";
const opened: Store[] = [];
afterEach(async () => {
  for (const s of opened.splice(0)) await s.close();
});

async function replaces(store: Store) {
  opened.push(store);
  const t = store.table<{ refresh_token: string; at: number; meta?: { via: string } }>("credentials");
  const read = { refresh_token: "enc:1", at: 5, meta: { via: "connect" } };
  await t.set("oauth:th_a", read);
  const stored = (await t.get("oauth:th_a"))!;
  expect(await t.replaceIf("oauth:th_a", stored, { ...stored, refresh_token: "enc:2" })).toBe(true);
  expect((await t.get("oauth:th_a"))?.refresh_token).toBe("enc:2");
  // Read before that write: no longer what is stored.
  expect(await t.replaceIf("oauth:th_a", stored, { ...stored, refresh_token: "enc:3" })).toBe(false);
  expect((await t.get("oauth:th_a"))?.refresh_token).toBe("enc:2");
  expect(await t.replaceIf("oauth:th_nobody", stored, stored)).toBe(false);
  expect(await t.get("oauth:th_nobody")).toBeUndefined();
}

describe("replaceIf", () => {
  it("memory", async () => replaces(await openStore("memory://")));
  it("SQLite", async () => replaces(await openStore(`sqlite://${tmpStorePath()}`)));
  describe.skipIf(!redisTestsEnabled("replace-if"))("on Redis", () => {
    const redis = useRedisServer();
    it("Redis", async () => replaces(await openStore(redis().url)));
  });
});

it("a token stored while the daemon seals the read one again under the new key is kept, not overwritten", async () => {
  const store = await openStore(`sqlite://${tmpStorePath()}`);
  opened.push(store);
  await new CredentialStore({ store, box: new SecretBox(OLD) }).saveRefreshToken("th_ben", "1//read-under-old-key");
  const authorize = new CredentialStore({ store, box: new SecretBox(NEW, [OLD]) });
  // The daemon's store: `calbridge authorize` stores the therapist's new consent just before its write lands.
  const racing: Store = {
    ...store,
    table<T>(name: TableName) {
      const t = store.table<T>(name);
      return {
        ...t,
        get: (k: string) => t.get(k),
        getMany: (k: string[]) => t.getMany(k),
        set: (k: string, v: T, ttl?: number) => t.set(k, v, ttl),
        setMany: (e: { key: string; value: T; ttlMs?: number }[]) => t.setMany(e),
        delete: (k: string) => t.delete(k),
        deleteMany: (k: string[]) => t.deleteMany(k),
        addMany: (e: { key: string; value: T; ttlMs?: number }[]) => t.addMany(e),
        entries: () => t.entries(),
        replaceIf: async (k: string, expected: T, value: T) => {
          await authorize.saveRefreshToken("th_ben", "1//fresh-consent");
          return t.replaceIf(k, expected, value);
        },
      };
    },
  };
  const log = captureLog("info");
  const daemon = new CredentialStore({ store: racing, box: new SecretBox(NEW, [OLD]), logger: log.logger });
  expect((await daemon.loadRefreshToken("th_ben"))?.token).toBe("1//read-under-old-key"); // used this once
  expect((await authorize.loadRefreshToken("th_ben"))?.token).toBe("1//fresh-consent");
  expect(log.find((l) => String(l.msg).startsWith("refresh token not sealed again: a newer one"))).toBeDefined();
  // With nothing in between, it is sealed again.
  await new CredentialStore({ store, box: new SecretBox(OLD) }).saveRefreshToken("th_ben", "1//read-under-old-key");
  expect(await new CredentialStore({ store, box: new SecretBox(NEW, [OLD]) }).resealAll()).toEqual({
    resealed: 1,
    failed: 0,
    unreadable: 0,
  });
});
