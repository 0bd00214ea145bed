import { mkdtempSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterEach, describe, expect, it } from "vitest";
import { openStore, type Store } from "../src/store/store.ts";

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
    await store.table("seen").set("ev1", 1, 1);
    await new Promise((r) => setTimeout(r, 5));
    expect(await store.table("seen").get("ev1")).toBeUndefined();
  });

  it("rejects an unknown scheme", async () => {
    await expect(openStore("mongodb://x")).rejects.toThrow(/unknown scheme/);
  });
});
