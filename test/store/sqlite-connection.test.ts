import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterEach, describe, expect, it } from "vitest";
import { serializeForKeyv } from "../../src/store/serialize.ts";
import { SqliteConnection } from "../../src/store/sqlite-connection.ts";
import { openStore, type Store } from "../../src/store/store.ts";

const dirs: string[] = [];
const stores: Store[] = [];
afterEach(async () => {
  for (const store of stores.splice(0)) await store.close();
  for (const dir of dirs.splice(0)) rmSync(dir, { recursive: true, force: true });
});

function tempFile(): string {
  const dir = mkdtempSync(join(tmpdir(), "cb-sqlite-conn-"));
  dirs.push(dir);
  return join(dir, "store.sqlite");
}

describe("SqliteConnection", () => {
  it("keeps answering once more distinct statements ran than it keeps, and closes with none left unfinalized", async () => {
    const connection = await SqliteConnection.open(tempFile(), 1000);
    await connection.query("CREATE TABLE t(key TEXT PRIMARY KEY, value TEXT)");
    for (let i = 0; i < 50; i++) {
      // 50 texts: the first ones are finalized while the later ones are kept.
      await connection.query(`INSERT INTO t (key, value) VALUES (?, ?) /* ${i} */`, `k${i}`, `v${i}`);
    }
    const rows = (await connection.query("SELECT count(*) AS n FROM t WHERE key LIKE ?", "k%")) as { n: number }[];
    expect(rows[0]!.n).toBe(50);
    // An early text again (finalized before): prepared anew.
    await connection.query("INSERT INTO t (key, value) VALUES (?, ?) /* 0 */", "again", "x");
    // SQLite refuses to close a connection with statements left: close() would reject.
    await expect(connection.close()).resolves.toBeUndefined();
    await expect(connection.query("SELECT 1 WHERE 1 = ?", 1)).rejects.toThrow(/closed/);
  });

  it("does not keep a statement that failed to compile: the same text works once the table exists", async () => {
    const connection = await SqliteConnection.open(tempFile(), 1000);
    const sql = "SELECT value FROM later WHERE key = ?";
    await expect(connection.query(sql, "a")).rejects.toThrow(/no such table: later/);
    await connection.query("CREATE TABLE later(key TEXT PRIMARY KEY, value TEXT)");
    await connection.query("INSERT INTO later (key, value) VALUES (?, ?)", "a", "found");
    expect(await connection.query(sql, "a")).toEqual([{ value: "found" }]);
    await connection.close();
  });

  it("passes parameters given as one array, as @keyv/sqlite's listing does", async () => {
    const connection = await SqliteConnection.open(":memory:", 1000);
    expect(await connection.query("SELECT ? AS a, ? AS b", ["x", 2])).toEqual([{ a: "x", b: 2 }]);
    await connection.close();
  });
});

describe("multi-row writes through the store", () => {
  // A lone surrogate or a NUL would not cross the JSON array a batch is sent in unchanged (SQLite writes a surrogate's
  // bytes as they are, and json_extract ends text at NUL), so such a batch is bound row by row: the keys come back.
  const awkward = ["lone\ud800surrogate", "nul\u0000inside", "plain", "é😀\u2028"];

  for (const url of ["sqlite://FILE", "sqlite://:memory:"]) {
    it(`stores and finds keys with lone surrogates and NUL through setMany and addMany (${url.includes(":memory:") ? "memory" : "file"})`, async () => {
      const store = await openStore(url.replace("FILE", tempFile()));
      stores.push(store);
      const links = store.table<{ n: number }>("links");
      await links.setMany(awkward.map((key, n) => ({ key, value: { n } })));
      for (const [n, key] of awkward.entries()) expect(await links.get(key)).toEqual({ n });
      expect(await links.getMany(awkward)).toEqual(awkward.map((_, n) => ({ n })));

      const inbox = store.table<{ n: number }>("inbox");
      expect(await inbox.addMany(awkward.map((key, n) => ({ key, value: { n } })))).toEqual(awkward.map(() => true));
      // Added again: every key is taken, so none is written.
      expect(await inbox.addMany(awkward.map((key) => ({ key, value: { n: -1 } })))).toEqual(awkward.map(() => false));
      for (const [n, key] of awkward.entries()) expect(await inbox.get(key)).toEqual({ n });
    });
  }

  it("reads and deletes 40,000 keys at once, one of them awkward, past SQLite's limit of bound parameters", async () => {
    const store = await openStore(`sqlite://${tempFile()}`);
    stores.push(store);
    const links = store.table<number>("links");
    const keys = Array.from({ length: 40_000 }, (_, i) => (i === 7 ? "odd\ud800key" : `k${i}`));
    await links.setMany(keys.map((key, i) => ({ key, value: i })));
    const read = await links.getMany(keys);
    expect(read[7]).toBe(7);
    expect(read.every((v, i) => v === i)).toBe(true);
    await links.deleteMany(keys);
    expect(await links.getMany(["k0", keys[7]!, "k39999"])).toEqual([undefined, undefined, undefined]);
  });

  it("stores each value's text exactly as the serializer wrote it, through setMany and addMany", async () => {
    const file = tempFile();
    const store = await openStore(`sqlite://${file}`);
    stores.push(store);
    const tricky = [
      {
        s: 'quote " backslash \\ newline \n tab \t ctl \u0001 sep \u2028 é 😀 ∑',
        n: [1, 1.5, 0, 1e21, 1e-7, 0.1 + 0.2],
      },
      { deep: { a: [{ b: null }, true, false, ""], "": "empty key", ":colon": "::double" }, big: 2 ** 53 + 2 },
      { id: "evt_1", at: "2026-11-23T09:00:00.000Z", lone: "\ud800", nul: "a\u0000b" },
    ].map((value) => JSON.parse(JSON.stringify(value)) as Record<string, unknown>);
    const links = store.table<Record<string, unknown>>("links");
    const inbox = store.table<Record<string, unknown>>("inbox");
    await links.setMany(tricky.map((value, i) => ({ key: `k${i}`, value })));
    expect(await inbox.addMany(tricky.map((value, i) => ({ key: `k${i}`, value, ttlMs: 60_000 })))).toEqual([
      true,
      true,
      true,
    ]);
    for (const [i, value] of tricky.entries()) {
      expect(await links.get(`k${i}`)).toEqual(value);
      expect(await inbox.get(`k${i}`)).toEqual(value);
    }
    const raw = await SqliteConnection.open(file, 1000);
    try {
      const rows = (await raw.query("SELECT key, value FROM links WHERE key LIKE ? ORDER BY key", "links:k%")) as {
        value: string;
      }[];
      expect(rows.map((r) => r.value)).toEqual(tricky.map((value) => serializeForKeyv({ value })));
      const added = (await raw.query("SELECT value FROM inbox WHERE key LIKE ? ORDER BY key", "inbox:k%")) as {
        value: string;
      }[];
      for (const [i, row] of added.entries()) {
        expect(row.value).toMatch(/^\{"value":.*,"expires":\d+\}$/s);
        expect(row.value.replace(/,"expires":\d+\}$/, "}")).toBe(serializeForKeyv({ value: tricky[i] }));
      }
    } finally {
      await raw.close();
    }
  });

  it("keeps the later value of a key written twice in one batch", async () => {
    const store = await openStore(`sqlite://${tempFile()}`);
    stores.push(store);
    const links = store.table<string>("links");
    await links.setMany([
      { key: "a", value: "first" },
      { key: "b", value: "only" },
      { key: "a", value: "second" },
    ]);
    expect(await links.getMany(["a", "b"])).toEqual(["second", "only"]);
  });

  for (const url of ["sqlite://", "memory://"]) {
    it(`writes setMany and addMany rows the way keyv's own set does (${url})`, async () => {
      const store = await openStore(url === "sqlite://" ? `sqlite://${tempFile()}` : url);
      stores.push(store);
      const inbox = store.table<{ n: number } | string>("inbox");
      await inbox.setMany([
        { key: "forever", value: { n: 1 }, ttlMs: 0 },
        { key: "gone", value: "x", ttlMs: -1 },
        { key: "inbox:prefixed", value: "p" },
        { key: "colon", value: ":starts with a colon" },
      ]);
      // ttl 0 keeps it (as keyv's set), a past expiry reads as absent, and a key that already carries the table's
      // prefix is the row keyv's get and set use (keyv's getMany would prefix it again: not used with such keys).
      expect(await inbox.getMany(["forever", "gone", "colon"])).toEqual([{ n: 1 }, undefined, ":starts with a colon"]);
      expect([await inbox.get("inbox:prefixed"), await inbox.get("prefixed")]).toEqual(["p", "p"]);
      await inbox.set("inbox:added", "by set");
      expect(
        await inbox.addMany([
          { key: "inbox:added", value: "again" },
          { key: "gone", value: "back" },
        ]),
      ).toEqual([false, true]);
      expect([await inbox.get("added"), await inbox.get("gone")]).toEqual(["by set", "back"]);
    });
  }
});
