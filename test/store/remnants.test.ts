// What the SQLite store deletes is gone from the file: a purged row (customer details in it) is not left readable
// in the free pages of the database once the write-ahead log is checkpointed.
import { readFileSync } from "node:fs";
import { afterEach, describe, expect, it } from "vitest";
import type { Store } from "../../src/store/store.ts";
import { openTestStore, tmpStorePath } from "../webhooks/support.ts";

const opened: Store[] = [];
afterEach(async () => {
  for (const s of opened.splice(0)) await s.close();
});

/** Checkpoints the write-ahead log into the database file from a connection of its own, as SQLite does in time. */
async function checkpoint(path: string): Promise<void> {
  const { default: sqlite3 } = await import("sqlite3");
  await new Promise<void>((resolve, reject) => {
    const db = new sqlite3.Database(path);
    db.exec("PRAGMA wal_checkpoint(TRUNCATE);", (err) => db.close(() => (err ? reject(err) : resolve())));
  });
}

describe("SQLite store remnants", () => {
  it("leaves no trace of purged rows in the database file", async () => {
    const path = tmpStorePath();
    const store = await openTestStore(path);
    opened.push(store);
    const links = store.table("links");
    for (let i = 0; i < 500; i++) {
      await links.set(`apt_${i}`, { customer_name: `Erika Mustermann ${i}`, notes: "Diagnosis: migraine" }, 1);
    }
    await links.set("kept", { n: 1 });
    await new Promise((r) => setTimeout(r, 5));
    expect(await store.purgeExpired()).toBe(500);
    await checkpoint(path);
    const file = readFileSync(path).toString("latin1");
    expect(file).not.toContain("Mustermann");
    expect(file).not.toContain("migraine");
    expect(await links.get("kept")).toEqual({ n: 1 });
  });
});
