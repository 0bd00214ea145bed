import { mkdtempSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterEach, describe, expect, it } from "vitest";
import { openStore, type Store } from "../src/store/store.ts";
import { redisTestsEnabled, useRedisServer } from "./support/redis.ts";

const opened: Store[] = [];
afterEach(async () => {
  for (const s of opened.splice(0)) await s.close();
});

async function sqlite(path = join(mkdtempSync(join(tmpdir(), "cb-store-")), "s.sqlite")) {
  const store = await openStore(`sqlite://${path}`);
  opened.push(store);
  return { store, path };
}

describe("store (sqlite)", () => {
  it("keeps values per table, lists entries, and survives reopening", async () => {
    const { store, path } = await sqlite();
    await store.table<{ n: number }>("links").set("a1", { n: 1 });
    await store.table<{ n: number }>("links").set("a2", { n: 2 });
    await store.table<string>("tokens").set("a1", "tok");
    const entries: [string, { n: number }][] = [];
    for await (const e of store.table<{ n: number }>("links").entries()) entries.push(e);
    expect(entries.sort()).toEqual([
      ["a1", { n: 1 }],
      ["a2", { n: 2 }],
    ]);
    expect(await store.table("links").getMany(["a2", "zz", "a1"])).toEqual([{ n: 2 }, undefined, { n: 1 }]);
    await store.close();
    opened.pop();
    const { store: again } = await sqlite(path);
    expect(await again.table("tokens").get("a1")).toBe("tok");
    expect(await again.table("links").get("a2")).toEqual({ n: 2 });
  });

  it("expires entries with a ttl", async () => {
    const { store } = await sqlite();
    await store.table("inbox").set("ev1", 1, 1);
    await new Promise((r) => setTimeout(r, 5));
    expect(await store.table("inbox").get("ev1")).toBeUndefined();
  });

  it("removes expired entries nobody reads, from every table, and keeps the rest", async () => {
    const { store, path } = await sqlite();
    await store.table("inbox").set("done_old", { doneAt: "x" }, 1);
    await store.table("dead").set("dead_old", { reason: "x" }, 1);
    await store.table("inbox").set("done_new", { doneAt: "y" }, 60_000);
    await store.table("links").set("a1", { n: 1 });
    await new Promise((r) => setTimeout(r, 5));
    const { default: sqlite3 } = await import("sqlite3");
    const db = new sqlite3.Database(path);
    const sql = (text: string) =>
      new Promise<{ key: string }[]>((resolve, reject) =>
        db.all(text, (err, rows) => (err ? reject(err) : resolve(rows as { key: string }[]))),
      );
    // A row that is not JSON (written by hand, or damaged) is left alone instead of failing the purge.
    await sql("INSERT INTO links (key, value) VALUES ('links:garbled', '{not json')");
    expect(await store.purgeExpired()).toBe(2);
    // Straight from the file: the rows are gone, not merely hidden by keyv's read-time check.
    const rows = await sql("SELECT key FROM inbox UNION ALL SELECT key FROM dead UNION ALL SELECT key FROM links");
    await new Promise((r) => db.close(r));
    expect(rows.map((r) => r.key).sort()).toEqual(["inbox:done_new", "links:a1", "links:garbled"]);
    expect(await store.purgeExpired()).toBe(0);
  });

  it("adopts an earlier build's table of processed webhook ids as the inbox's done marks", async () => {
    const path = join(mkdtempSync(join(tmpdir(), "cb-store-")), "s.sqlite");
    const { default: sqlite3 } = await import("sqlite3");
    const db = new sqlite3.Database(path);
    const run = (text: string) =>
      new Promise<void>((resolve, reject) => db.exec(text, (e) => (e ? reject(e) : resolve())));
    const future = Date.now() + 3_600_000;
    const row = (value: unknown) => JSON.stringify({ value, expires: future }).replaceAll("'", "''");
    // As the earlier build left the file: evt_done processed; evt_both processed but its entry not yet removed
    // (a crash between the two writes); evt_open pending.
    await run(`CREATE TABLE seen(key VARCHAR(255) PRIMARY KEY, value TEXT);
      CREATE TABLE inbox(key VARCHAR(255) PRIMARY KEY, value TEXT);
      INSERT INTO seen VALUES ('seen:evt_done', '${row({ doneAt: "2026-11-20T10:00:00.000Z" })}'),
                              ('seen:evt_both', '${row({ doneAt: "2026-11-20T11:00:00.000Z" })}');
      INSERT INTO inbox VALUES ('inbox:evt_both', '${row({ id: "evt_both", seq: 1, event: {} })}'),
                               ('inbox:evt_open', '${row({ id: "evt_open", seq: 2, event: {} })}');`);
    await new Promise((r) => db.close(r));

    const { store } = await sqlite(path);
    const inbox = store.table<Record<string, unknown>>("inbox");
    expect(await inbox.getMany(["evt_done", "evt_both", "evt_open"])).toEqual([
      { doneAt: "2026-11-20T10:00:00.000Z" },
      { doneAt: "2026-11-20T11:00:00.000Z" },
      { id: "evt_open", seq: 2, event: {} },
    ]);
    // A redelivery of an id the earlier build processed is still a duplicate.
    expect(await inbox.addMany([{ key: "evt_done", value: { id: "evt_done" } }])).toEqual([false]);
    await store.close();
    opened.pop();
    const check = new sqlite3.Database(path);
    const tables = await new Promise<{ name: string }[]>((resolve, reject) =>
      check.all("SELECT name FROM sqlite_master WHERE name = 'seen'", (e, rows) =>
        e ? reject(e) : resolve(rows as { name: string }[]),
      ),
    );
    await new Promise((r) => check.close(r));
    expect(tables).toEqual([]);
    // Opening again finds nothing to adopt and changes nothing.
    const { store: again } = await sqlite(path);
    expect(await again.table("inbox").get("evt_done")).toEqual({ doneAt: "2026-11-20T10:00:00.000Z" });
  });

  it("rejects an unknown scheme", async () => {
    await expect(openStore("mongodb://x")).rejects.toThrow(/unknown scheme/);
  });
});

/**
 * What every caller of a Table relies on, on every backend: the inbox's group commit (setMany), the engine's batch
 * reads (getMany), replay (entries), expiry. A backend whose adapter answers differently (@keyv/redis' setMany
 * answers nothing at all) must still keep this contract.
 */
function tableContract(open: () => Promise<Store>) {
  it("sets, reads, batches, lists, expires and deletes", async () => {
    const t = (await open()).table<{ n: number }>("inbox");
    await t.set("a", { n: 1 });
    // Keys with colons, as the engine writes them ("appt:…"), come back whole.
    await t.set("appt:1", { n: 5 });
    await t.setMany([
      { key: "b", value: { n: 2 } },
      { key: "c", value: { n: 3 }, ttlMs: 60_000 },
      { key: "d", value: { n: 4 }, ttlMs: 1 },
    ]);
    await t.setMany([]);
    await new Promise((r) => setTimeout(r, 10));
    expect(await t.get("a")).toEqual({ n: 1 });
    expect(await t.getMany(["c", "zz", "b", "d"])).toEqual([{ n: 3 }, undefined, { n: 2 }, undefined]);
    expect(await t.getMany([])).toEqual([]);
    const listed: [string, { n: number }][] = [];
    for await (const e of t.entries()) listed.push(e);
    expect(listed.filter(([key]) => key !== "d").sort()).toEqual([
      ["a", { n: 1 }],
      ["appt:1", { n: 5 }],
      ["b", { n: 2 }],
      ["c", { n: 3 }],
    ]);
    await t.setMany([{ key: "a", value: { n: 10 } }]);
    expect(await t.get("a")).toEqual({ n: 10 });
    expect(await t.delete("a")).toBe(true);
    expect(await t.delete("a")).toBe(false);
    await t.deleteMany(["b", "c", "zz"]);
    expect(await t.getMany(["a", "b", "c"])).toEqual([undefined, undefined, undefined]);
  });
}

describe("table contract (sqlite)", () => {
  tableContract(async () => (await sqlite()).store);
});

describe("table contract (memory)", () => {
  tableContract(async () => {
    const store = await openStore("memory://");
    opened.push(store);
    return store;
  });
});

describe.runIf(redisTestsEnabled("store table contract (redis)"))("table contract (redis)", () => {
  const redis = useRedisServer();
  tableContract(async () => {
    const store = await openStore(redis().url);
    opened.push(store);
    await store.redis!.flushAll();
    return store;
  });
});

/** Insert-if-absent, on every backend: what the webhook inbox's duplicate detection stands on. */
function addManyContract(open: () => Promise<{ a: Store; b?: Store }>, racers: "one" | "two") {
  it("writes absent keys, leaves present ones alone, and takes over expired ones", async () => {
    const { a } = await open();
    const t = a.table<{ n: number }>("inbox");
    await t.set("held", { n: 0 });
    await t.set("stale", { n: 0 }, 1);
    await new Promise((r) => setTimeout(r, 5));
    expect(
      await t.addMany([
        { key: "held", value: { n: 1 } },
        { key: "fresh", value: { n: 2 }, ttlMs: 60_000 },
        { key: "stale", value: { n: 3 } },
      ]),
    ).toEqual([false, true, true]);
    expect(await t.getMany(["held", "fresh", "stale"])).toEqual([{ n: 0 }, { n: 2 }, { n: 3 }]);
    expect(await t.addMany([{ key: "fresh", value: { n: 9 } }])).toEqual([false]);
    expect(await t.addMany([])).toEqual([]);
  });

  // Only backends two processes can share race; the memory store lives in one.
  if (racers === "two")
    it("gives each key to exactly one of two stores racing for it", async () => {
      const { a, b } = await open();
      if (!b) throw new Error("this backend was opened once: nothing to race");
      const keys = Array.from({ length: 200 }, (_, i) => `evt_${i}`);
      const batches = (who: string) => {
        const shuffled = [...keys].sort(() => Math.random() - 0.5);
        return [0, 50, 100, 150].map((i) => shuffled.slice(i, i + 50).map((key) => ({ key, value: who })));
      };
      const race = async (store: Store, who: string) => {
        const won: string[] = [];
        await Promise.all(
          batches(who).map(async (batch) => {
            const results = await store.table<string>("inbox").addMany(batch);
            for (const [i, ok] of results.entries()) if (ok) won.push(batch[i]!.key);
          }),
        );
        return won;
      };
      const [wonA, wonB] = await Promise.all([race(a, "a"), race(b, "b")]);
      expect([...wonA, ...wonB].sort()).toEqual([...keys].sort());
      const values = await a.table<string>("inbox").getMany(keys);
      for (const [i, key] of keys.entries()) expect(values[i], key).toBe(wonA.includes(key) ? "a" : "b");
    });
}

describe("addMany (sqlite, two processes' connections on one file)", () => {
  addManyContract(async () => {
    const { store: a, path } = await sqlite();
    const { store: b } = await sqlite(path);
    return { a, b };
  }, "two");
});

describe("addMany (memory)", () => {
  addManyContract(async () => {
    const a = await openStore("memory://");
    opened.push(a);
    return { a };
  }, "one");
});

describe.runIf(redisTestsEnabled("store addMany (redis)"))("addMany (redis, two clients)", () => {
  const redis = useRedisServer();
  addManyContract(async () => {
    const a = await openStore(redis().url);
    const b = await openStore(redis().url);
    opened.push(a, b);
    await a.redis!.flushAll();
    return { a, b };
  }, "two");
});
