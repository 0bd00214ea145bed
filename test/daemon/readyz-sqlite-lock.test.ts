// Tests /readyz while another process holds the SQLite store's write lock (a second calbridge started by hand on the
// same file, a backup tool, an `sqlite3` shell left in a transaction). The write probe waits for the lock up to
// SQLite's busy timeout (10 s) and /readyz gives up on it after 2 s, so it used to say only "no answer within 2000 ms"
// while the one line that named the cause, SQLITE_BUSY, was never shown. The next /readyz now names the late failure.
import { join } from "node:path";
import sqlite3 from "sqlite3";
import { afterEach, expect, it } from "vitest";
import { type App, createApp } from "../../src/daemon/app.ts";
import { silentLogger } from "../../src/log.ts";
import { startWorld } from "../../src/simulator/world.ts";
import { waitFor } from "../support/wait-for.ts";

const cleanups: (() => Promise<unknown>)[] = [];
afterEach(async () => {
  for (const c of cleanups.splice(0).reverse()) await c().catch(() => {});
});

const readyz = async (app: App) => {
  const res = await fetch(`${app.admin!.url}/readyz`);
  const body = (await res.json()) as { checks: Record<string, { ok: boolean; detail: string }> };
  return { status: res.status, write: body.checks["store_write"]! };
};

const exec = (db: sqlite3.Database, sql: string) =>
  new Promise<void>((resolve, reject) => db.exec(sql, (err) => (err ? reject(err) : resolve())));

it("a write lock held by another process is named by the next /readyz: the probe's late SQLITE_BUSY", async () => {
  const world = await startWorld({ therapists: ["th_anna"] });
  cleanups.push(() => world.close());
  const file = join(world.dir, "data", "calbridge.sqlite");
  world.config.store = { ...world.config.store, url: `sqlite://${file}` };
  const app = await createApp(structuredClone(world.config), {
    logger: silentLogger,
    listen: "127.0.0.1:0",
    adminListen: "127.0.0.1:0",
  });
  cleanups.push(() => app.stop(3000));
  await app.start();
  await waitFor("ready", async () => (await readyz(app)).status === 200);

  const other = new sqlite3.Database(file);
  cleanups.push(() => new Promise((r) => other.close(r)));
  await exec(other, "BEGIN IMMEDIATE");
  const first = await readyz(app);
  expect(first.status).toBe(503);
  expect(first.write.detail).toBe("store refuses writes: no answer within 2000 ms");
  // The probe gives up at SQLite's busy timeout, 10 s after its turn came (the connection runs one statement at a
  // time: the lease's renewal may be waiting ahead of it); a later /readyz tells why.
  let detail = "";
  await waitFor(
    "a /readyz naming the late failure",
    async () => {
      detail = (await readyz(app)).write.detail;
      return /the probe before/.test(detail);
    },
    40_000,
  );
  expect(detail).toMatch(
    /^store refuses writes: no answer within 2000 ms \(the probe before failed after \d+\.\d s: .*SQLITE_BUSY: database is locked\)$/,
  );

  await exec(other, "ROLLBACK");
  await waitFor("ready again", async () => (await readyz(app)).status === 200);
  expect((await readyz(app)).write.detail).toBe("store took a write");
}, 70_000);
