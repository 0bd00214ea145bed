// A record whose stored text is not JSON (a damaged page, a truncated write, a value put there by hand or by another
// program): one such record stopped every listing of its table with a bare SyntaxError. The inbox's replay retried
// for ever (no webhook processed again, new ones acknowledged and never synced), and a damaged link or hold ended the
// daemon's start. Now a listing leaves it out and logs it once by table and key (never its content); reading it by
// key is a StoreRecordUnreadableError naming it. SQLite, and Redis (a real redis-server), alike.
import { createClient } from "redis";
import sqlite3 from "sqlite3";
import { afterEach, describe, expect, it } from "vitest";
import { openStore, type Store, StoreRecordUnreadableError } from "../../src/store/store.ts";
import { WebhookInbox } from "../../src/webhooks/inbox.ts";
import { captureLog } from "../support/log-capture.ts";
import { redisTestsEnabled, useRedisServer } from "../support/redis.ts";
import { tmpStorePath } from "../webhooks/support.ts";

const opened: Store[] = [];
afterEach(async () => {
  for (const s of opened.splice(0)) await s.close();
});

const event = (id: string) => ({
  id,
  type: "appointment.created",
  created_at: "2026-11-27T08:00:00Z",
  data: { object: { id: `appt_${id}` } },
});

/** What a truncated write of an inbox entry leaves: the start of its JSON, a customer's name in it. */
const DAMAGED = '{"value":{"id":"evt_bad","data":{"object":{"customer_name":"Zelda Privata","start_time":';

/** Replays the inbox as the processor does, with a log of what the store said. */
async function replayWithDamagedEntry(store: Store, log: ReturnType<typeof captureLog>) {
  const ids: string[] = [];
  for await (const e of new WebhookInbox({ store }).pending()) ids.push(e.id);
  for await (const e of new WebhookInbox({ store }).pending()) ids.push(e.id); // again: logged once
  const lines = log.lines.filter((l) => l["table"] === "inbox");
  expect(ids).toEqual(["evt_good", "evt_good"]);
  expect(lines).toHaveLength(1);
  expect(lines[0]).toMatchObject({ level: 50, key: expect.stringContaining("evt_bad") });
  expect(String(lines[0]!["msg"])).toMatch(/^store: the record inbox\/.*evt_bad cannot be read \(SyntaxError\)/);
  expect(JSON.stringify(log.lines)).not.toContain("Zelda");
}

async function expectNamedOnRead(store: Store, key: string) {
  const table = store.table<unknown>("inbox");
  const err = await table.get(key).catch((e: unknown) => e);
  expect(err).toBeInstanceOf(StoreRecordUnreadableError);
  expect(err).toMatchObject({ table: "inbox", key });
  expect(String((err as Error).message)).not.toContain("Zelda");
  // Read with others, it is named too; the others are not lost with it.
  await expect(table.getMany(["evt_good", key])).rejects.toMatchObject({ key });
  expect((await table.getMany(["evt_good"]))[0]).toBeDefined();
  // A caller that can leave it alone is told of it, and gets the others.
  const told: StoreRecordUnreadableError[] = [];
  const read = await table.getMany(["evt_good", key, "evt_none"], { unreadable: (e) => told.push(e) });
  expect(read[0]).toBeDefined();
  expect(read.slice(1)).toEqual([undefined, undefined]);
  expect(told.map((e) => [e.table, e.key])).toEqual([["inbox", key]]);
}

describe("a record that cannot be read", () => {
  it("SQLite: left out of the inbox's replay and logged once; read by key, named", async () => {
    const path = tmpStorePath();
    const log = captureLog("info");
    const store = await openStore(`sqlite://${path}`, { logger: log.logger });
    opened.push(store);
    expect(await new WebhookInbox({ store }).accept(event("evt_good") as never)).toBe("accepted");
    await new Promise<void>((resolve, reject) => {
      const db = new sqlite3.Database(path, (err) => {
        if (err) return reject(err);
        db.configure("busyTimeout", 5000);
        db.run("INSERT OR REPLACE INTO inbox(key, value) VALUES (?, ?)", ["inbox:evt_bad", DAMAGED], (e) =>
          db.close(() => (e ? reject(e) : resolve())),
        );
      });
    });
    await replayWithDamagedEntry(store, log);
    await expectNamedOnRead(store, "evt_bad");
  });

  describe.skipIf(!redisTestsEnabled("unreadable-record"))("on Redis", () => {
    const redis = useRedisServer();
    it("Redis: left out of the inbox's replay and logged once; read by key, named", async () => {
      const log = captureLog("info");
      const store = await openStore(redis().url, { logger: log.logger });
      opened.push(store);
      const inbox = new WebhookInbox({ store });
      expect(await inbox.accept(event("evt_good") as never)).toBe("accepted");
      expect(await inbox.accept(event("evt_bad") as never)).toBe("accepted");
      const client = createClient({ url: redis().url });
      await client.connect();
      try {
        const [key] = await client.keys("calbridge:inbox:*evt_bad");
        expect(key).toBeDefined();
        await client.set(key!, DAMAGED);
        await replayWithDamagedEntry(store, log);
        await expectNamedOnRead(store, "evt_bad");
      } finally {
        await client.flushAll().catch(() => {});
        await client.quit();
      }
    });
  });
});
