// README (data on disk): "the write-ahead log is truncated each time it is reset, so purged details do not linger".
// `PRAGMA journal_size_limit=0` is per connection and applies to the connection whose write restarts the log: the
// notices connection (sqlite-notices.ts) must set it like every store connection, or a notice written first after a
// checkpoint (a standby's notice for a webhook it accepted, a credentials notice, the purge) restarts the log without
// truncating it and old page images of purged rows (customer details) stay in the -wal file.
import { existsSync, mkdtempSync, readFileSync, rmSync, statSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterEach, describe, expect, it } from "vitest";
import { SqliteConnection } from "../../src/store/sqlite-connection.ts";
import { openStore, type Store } from "../../src/store/store.ts";

const dirs: string[] = [];
const stores: Store[] = [];
afterEach(async () => {
  for (const s of stores.splice(0)) await s.close().catch(() => {});
  for (const d of dirs.splice(0)) rmSync(d, { recursive: true, force: true });
});

const SECRET = "Customer-Zelda-Quintessa-Marchbanks";

async function filled(): Promise<{ store: Store; wal: string }> {
  const dir = mkdtempSync(join(tmpdir(), "cb-wal-"));
  dirs.push(dir);
  const file = join(dir, "calbridge.db");
  const store = await openStore(`sqlite://${file}`);
  stores.push(store);
  // ~1.5 MB of rows carrying a customer's name.
  const table = store.table<{ note: string }>("history");
  for (let batch = 0; batch < 3; batch++) {
    await table.setMany(
      Array.from({ length: 50 }, (_, i) => ({
        key: `k${batch}-${i}`,
        value: { note: `${SECRET} `.repeat(300) },
      })),
    );
  }
  // The details are purged (deleted: zeroed in the file by secure_delete) ...
  await table.deleteMany(Array.from({ length: 3 * 50 }, (_, i) => `k${Math.floor(i / 50)}-${i % 50}`));
  // A checkpoint of the whole log (as the auto-checkpoint does once past 1000 pages), with nobody reading: the next
  // write restarts the log from its start.
  const c = await SqliteConnection.open(file, 5000);
  const cp = await c.query("PRAGMA wal_checkpoint(PASSIVE)");
  await c.close();
  expect(cp).toMatchObject([{ busy: 0 }]);
  expect(walHolds(`${file}-wal`)).toBe(true); // the purged rows' old page images, before the restart
  return { store, wal: `${file}-wal` };
}

const walHolds = (wal: string) => existsSync(wal) && readFileSync(wal).includes(Buffer.from(SECRET));

describe("the notices connection and the write-ahead log's truncation", () => {
  it("control: a store write after the checkpoint restarts the log truncated (the secret is gone from -wal)", async () => {
    const { store, wal } = await filled();
    await store.table("meta").set("after", { x: 1 });
    const size = statSync(wal).size;
    expect({ holds: walHolds(wal), small: size < 200_000 }).toEqual({ holds: false, small: true });
  });

  it("a notice as the first write after the checkpoint: purged customer details do not linger in the -wal file", async () => {
    const { store, wal } = await filled();
    await store.notices!.publish("calbridge:inbox:accepted", "evt_1");
    const size = statSync(wal).size;
    expect({ holds: walHolds(wal), small: size < 200_000 }).toEqual({ holds: false, small: true });
  });
});
