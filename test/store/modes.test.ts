// The SQLite store's files on disk: 0600 for the database and its -wal/-shm companions, 0700 for a folder calbridge
// creates, a warning (and no chmod) for an existing folder open to others, and an earlier build's 0644 file tightened.
import { chmodSync, mkdirSync, mkdtempSync, statSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterEach, describe, expect, it } from "vitest";
import { openStore, type Store } from "../../src/store/store.ts";
import { captureLog } from "../support/log-capture.ts";

const opened: Store[] = [];
afterEach(async () => {
  for (const s of opened.splice(0)) await s.close();
});

const modeOf = (path: string) => statSync(path).mode & 0o777;

async function open(file: string) {
  const log = captureLog("debug");
  const store = await openStore(`sqlite://${file}`, { logger: log.logger });
  opened.push(store);
  // A write puts the -wal and -shm files beside the database (WAL mode).
  await store.table("links").set("a1", { n: 1 });
  return { store, log };
}

describe("SQLite store file modes", () => {
  it("creates its folders 0700 and the database, -wal and -shm 0600", async () => {
    const root = mkdtempSync(join(tmpdir(), "cb-modes-"));
    const file = join(root, "data", "nested", "calbridge.sqlite");
    const { log } = await open(file);
    expect(modeOf(join(root, "data"))).toBe(0o700);
    expect(modeOf(join(root, "data", "nested"))).toBe(0o700);
    for (const f of [file, `${file}-wal`, `${file}-shm`]) expect(modeOf(f), f).toBe(0o600);
    expect(log.lines.filter((l) => l["level"] === 40)).toEqual([]);
  });

  it("warns about an existing folder open to other users and leaves its mode alone", async () => {
    const folder = join(mkdtempSync(join(tmpdir(), "cb-modes-")), "shared");
    mkdirSync(folder);
    chmodSync(folder, 0o755);
    const file = join(folder, "calbridge.sqlite");
    const { log } = await open(file);
    expect(modeOf(folder)).toBe(0o755);
    expect(modeOf(file)).toBe(0o600);
    const warning = log.find((l) => String(l["msg"]).startsWith("the store's folder is open to other users"));
    expect(warning).toMatchObject({ level: 40, folder, mode: "0755", fix: `chmod 700 ${folder}` });
  });

  it("says nothing about an existing 0700 folder", async () => {
    const folder = mkdtempSync(join(tmpdir(), "cb-modes-"));
    chmodSync(folder, 0o700);
    const { log } = await open(join(folder, "calbridge.sqlite"));
    expect(log.lines.filter((l) => l["level"] === 40)).toEqual([]);
  });

  it("tightens a database file an earlier build left 0644, and its companions", async () => {
    const folder = mkdtempSync(join(tmpdir(), "cb-modes-"));
    chmodSync(folder, 0o700);
    const file = join(folder, "calbridge.sqlite");
    const first = await openStore(`sqlite://${file}`);
    await first.table("links").set("a1", { n: 1 });
    await first.close();
    chmodSync(file, 0o644);
    writeFileSync(`${file}-journal`, "");
    chmodSync(`${file}-journal`, 0o644);
    const { store, log } = await open(file);
    expect(await store.table("links").get("a1")).toEqual({ n: 1 });
    expect(modeOf(file)).toBe(0o600);
    expect(modeOf(`${file}-journal`)).toBe(0o600);
    expect(
      log.lines.filter((l) => l["msg"] === "store file was readable by other users: now 0600").map((l) => l["file"]),
    ).toEqual([file, `${file}-journal`]);
  });
});
