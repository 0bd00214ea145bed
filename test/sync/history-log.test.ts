// The history's storage on a real SQLite store: batched appends (a burst of entries is a few writes, not one each),
// the bound per appointment, a step repeated in a row counted instead of listed, the retention period on read and in
// the store's purge, a store that fails for a while losing nothing, and the recent list shared through the store.
import { mkdtempSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterEach, describe, expect, it, vi } from "vitest";
import { ManualClock } from "../../src/clock.ts";
import { openStore, type Store, type Table, type TableName } from "../../src/store/store.ts";
import type { HistoryEntry } from "../../src/sync/history-entry.ts";
import { HistoryLog, RECENT } from "../../src/sync/history-log.ts";

const DAY = 86_400_000;
const stores: Store[] = [];
afterEach(async () => {
  vi.useRealTimers();
  for (const s of stores.splice(0)) await s.close();
});

async function sqlite(): Promise<Store> {
  const store = await openStore(`sqlite://${join(mkdtempSync(join(tmpdir(), "calbridge-history-")), "s.sqlite")}`);
  stores.push(store);
  return store;
}

/** The store with its history table's writes counted, and made to fail while `failing` is set. */
function watched(store: Store) {
  const w = { writes: 0, failing: false };
  const away = () => Promise.reject(new Error("store away"));
  const wrap = <T>(t: Table<T>): Table<T> => ({
    get: (key) => (w.failing ? away() : t.get(key)),
    getMany: (keys) => (w.failing ? away() : t.getMany(keys)),
    set: (key, value, ttlMs) => (w.failing ? away() : t.set(key, value, ttlMs)),
    setMany: (entries) => {
      w.writes++;
      return w.failing ? away() : t.setMany(entries);
    },
    delete: (key) => t.delete(key),
    deleteMany: (keys) => t.deleteMany(keys),
    addMany: (entries) => t.addMany(entries),
    replaceIf: (key, expected, value) => t.replaceIf(key, expected, value),
    entries: () => t.entries(),
  });
  const proxy: Store = {
    ...store,
    table: <T>(name: TableName) => (name === "history" ? wrap(store.table<T>(name)) : store.table<T>(name)),
  };
  return { store: proxy, w };
}

const entry = (clock: ManualClock, over: Partial<HistoryEntry> = {}): HistoryEntry => ({
  at: new Date(clock.now()).toISOString(),
  origin: "booking",
  trigger: "appointment.updated",
  kind: "event_updated",
  therapistId: "th_1",
  ...over,
});

describe("history storage", () => {
  it("stores a burst of entries in a few batched writes, each appointment's in order", async () => {
    const clock = new ManualClock(Date.now());
    const { store, w } = watched(await sqlite());
    const log = new HistoryLog({ store, clock, retentionMs: 90 * DAY, maxEntries: 100 });
    for (let i = 0; i < 2_000; i++) {
      log.append(`apt_${i % 1_000}`, entry(clock, { start: `2030-01-01T00:00:0${i < 1_000 ? 0 : 1}.000Z` }));
    }
    await log.flush();
    expect(w.writes).toBeLessThanOrEqual(2);
    const h = await log.read("apt_7");
    expect(h.entries.map((e) => e.start)).toEqual(["2030-01-01T00:00:00.000Z", "2030-01-01T00:00:01.000Z"]);
  });

  it("keeps at most max_entries per appointment, the newest, and says how many were dropped", async () => {
    const clock = new ManualClock(Date.now());
    const log = new HistoryLog({ store: await sqlite(), clock, retentionMs: 90 * DAY, maxEntries: 10 });
    for (let i = 0; i < 15; i++) {
      log.append("apt_1", entry(clock, { start: new Date(DAY * (i + 1)).toISOString() }));
      if (i % 4 === 0) await log.flush();
    }
    await log.flush();
    const h = await log.read("apt_1");
    expect(h.entries).toHaveLength(10);
    expect(h.entries[0]!.start).toBe(new Date(DAY * 6).toISOString());
    expect(h.dropped).toBe(5);
  });

  it("counts a step repeated in a row instead of listing it again", async () => {
    const clock = new ManualClock(Date.now());
    const log = new HistoryLog({ store: await sqlite(), clock, retentionMs: 90 * DAY, maxEntries: 10 });
    const failed = { kind: "dead_letter", code: "invalid_request", side: "booking", attempts: 1 } as const;
    log.append("apt_1", entry(clock, failed));
    await log.flush();
    await clock.advance(15 * 60_000);
    log.append("apt_1", entry(clock, failed));
    await clock.advance(15 * 60_000);
    log.append("apt_1", entry(clock, failed));
    log.append("apt_1", entry(clock, { kind: "event_created" }));
    await log.flush();
    const h = await log.read("apt_1");
    expect(h.entries.map((e) => [e.kind, e.repeats])).toEqual([
      ["dead_letter", 3],
      ["event_created", undefined],
    ]);
    expect(h.entries[0]!.lastAt).toBe(new Date(clock.now()).toISOString());
  });

  it("leaves out entries older than the retention period, and the store's purge removes a history that expired", async () => {
    vi.useFakeTimers({ toFake: ["Date"] });
    const clock = new ManualClock(Date.now());
    const store = await sqlite();
    const log = new HistoryLog({ store, clock, retentionMs: 90 * DAY, maxEntries: 100 });
    log.append("apt_old", entry(clock));
    log.append("apt_both", entry(clock, { kind: "event_created" }));
    await log.flush();
    await clock.advance(60 * DAY);
    vi.setSystemTime(clock.now());
    log.append("apt_both", entry(clock));
    await log.flush();
    await clock.advance(31 * DAY);
    vi.setSystemTime(clock.now());
    // 91 days after the first entries: the purge removes the history with nothing newer, and a read leaves out the
    // old entry of the other.
    expect(await store.purgeExpired()).toBe(1);
    const rows: string[] = [];
    for await (const [key] of store.table("history").entries()) rows.push(key);
    expect(rows).toEqual(["apt_both"]);
    expect((await log.read("apt_both")).entries.map((e) => e.kind)).toEqual(["event_updated"]);
    expect((await log.read("apt_old")).entries).toEqual([]);
  });

  it("a store that fails for a while loses nothing: the entries are stored when it answers again", async () => {
    const clock = new ManualClock(Date.now());
    const { store, w } = watched(await sqlite());
    const log = new HistoryLog({ store, clock, retentionMs: 90 * DAY, maxEntries: 100 });
    w.failing = true;
    log.append("apt_1", entry(clock, { kind: "event_created" }));
    await log.flush();
    log.append("apt_1", entry(clock));
    await log.flush();
    w.failing = false;
    await log.flush();
    const fresh = new HistoryLog({ store, clock, retentionMs: 90 * DAY, maxEntries: 100 });
    expect((await fresh.read("apt_1")).entries.map((e) => e.kind)).toEqual(["event_created", "event_updated"]);
  });

  it("lists the appointments with the newest entries, and another process reads the same list from the store", async () => {
    const clock = new ManualClock(Date.now());
    const store = await sqlite();
    const log = new HistoryLog({ store, clock, retentionMs: 90 * DAY, maxEntries: 100 });
    for (let i = 0; i < RECENT + 5; i++) log.append(`apt_${i}`, entry(clock));
    log.append("apt_3", entry(clock, { kind: "event_deleted", origin: "calendar" }));
    await log.flush();
    const recent = log.recent();
    expect(recent).toHaveLength(RECENT);
    expect(recent[0]).toMatchObject({ appointmentId: "apt_3", kind: "event_deleted", origin: "calendar" });
    expect(recent[1]!.appointmentId).toBe(`apt_${RECENT + 4}`);
    const standby = new HistoryLog({ store, clock, retentionMs: 90 * DAY, maxEntries: 100 });
    await standby.loadRecent();
    expect(standby.recent()).toEqual(recent);
  });
});
