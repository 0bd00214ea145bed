// Tests the store checks of /readyz (and doctor) while another process holds the SQLite store's write lock (a second
// calbridge started by hand on the same file, a backup tool, an `sqlite3` shell left in a transaction). The write probe
// waits for the lock up to SQLite's busy timeout (10 s) and the check gives up on it after 2 s, so /readyz said only
// "no answer within 2000 ms" while the one error that named the cause, SQLITE_BUSY, was never shown. The next check now
// names the probe's late failure. And a check while a probe is still out waits for that one instead of sending another:
// one more write per /readyz queued up behind the lock without end.
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import sqlite3 from "sqlite3";
import { afterEach, expect, it } from "vitest";
import { checkStoreWrite } from "../../src/daemon/health.ts";
import { openStore, probeWrite } from "../../src/store/store.ts";
import { waitFor } from "../support/wait-for.ts";

const cleanups: (() => Promise<unknown>)[] = [];
afterEach(async () => {
  for (const c of cleanups.splice(0).reverse()) await c().catch(() => {});
});

const exec = (db: sqlite3.Database, sql: string) =>
  new Promise<void>((resolve, reject) => db.exec(sql, (err) => (err ? reject(err) : resolve())));

it("a write lock held by another process: one probe at a time, and the next check names its late SQLITE_BUSY", async () => {
  const dir = mkdtempSync(join(tmpdir(), "calbridge-readyz-lock-"));
  cleanups.push(async () => rmSync(dir, { recursive: true, force: true }));
  const file = join(dir, "calbridge.sqlite");
  const store = await openStore(`sqlite://${file}`);
  cleanups.push(() => store.close());
  let probes = 0;
  const source = {
    storeWrite: () => {
      probes++;
      return probeWrite(store, "readyz-test");
    },
  };
  expect(await checkStoreWrite(source, 2000)).toEqual({ ok: true, detail: "store took a write" });

  const other = new sqlite3.Database(file);
  cleanups.push(() => new Promise((r) => other.close(r)));
  await exec(other, "BEGIN IMMEDIATE");
  const before = probes;
  expect(await checkStoreWrite(source, 300)).toEqual({
    ok: false,
    detail: "store refuses writes: no answer within 300 ms",
  });
  // Checks while that probe waits for the lock send no other write.
  for (let i = 0; i < 3; i++) expect((await checkStoreWrite(source, 300)).ok).toBe(false);
  expect(probes - before).toBe(1);
  // The probe gives up at SQLite's busy timeout (10 s); the next check says why.
  let detail = "";
  await waitFor(
    "a check naming the probe's late failure",
    async () => {
      detail = (await checkStoreWrite(source, 300)).detail;
      return /the probe before/.test(detail);
    },
    30_000,
    200,
  );
  expect(detail).toMatch(
    /^store refuses writes: no answer within 300 ms \(the probe before failed after \d+\.\d s: SQLITE_BUSY: database is locked\)$/,
  );

  await exec(other, "ROLLBACK");
  await waitFor("writes again", async () => (await checkStoreWrite(source, 2000)).ok, 15_000);
  expect(await checkStoreWrite(source, 2000)).toEqual({ ok: true, detail: "store took a write" });
}, 60_000);
