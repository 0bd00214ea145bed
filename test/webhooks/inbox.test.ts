// Tests the inbox on its own: deliveries of one event racing over several batches get one acceptance; entries it cannot
// read back (written by another version, or damaged) are set aside in the dead letters and marked done (their marks
// stored together), and the readable ones are replayed in order.
import { describe, expect, it } from "vitest";
import { WebhookInbox } from "../../src/webhooks/inbox.ts";
import { collect, openTestStore, tmpStorePath } from "./support.ts";

const stored = (id: string, seq: number, event: unknown) => ({
  id,
  type: "appointment.created",
  receivedAt: "2026-11-22T09:00:00.000Z",
  seq,
  attempts: 0,
  event,
});

describe("inbox replay of unreadable entries", () => {
  it("sets each aside and marks it done, replaying the readable ones in order", async () => {
    const store = await openTestStore(tmpStorePath());
    try {
      const table = store.table<unknown>("inbox");
      await table.set("evt_ok_2", stored("evt_ok_2", 20, { id: "evt_ok_2", type: "appointment.created", data: {} }));
      await table.set("evt_ok_1", stored("evt_ok_1", 10, { id: "evt_ok_1", type: "appointment.created", data: {} }));
      for (let i = 0; i < 30; i++) await table.set(`evt_bad_${i}`, stored(`evt_bad_${i}`, 100 + i, { type: 5 }));
      const inbox = new WebhookInbox({ store });
      expect((await collect(inbox.pending())).map((e) => e.id)).toEqual(["evt_ok_1", "evt_ok_2"]);
      const dead = await collect(inbox.deadLetters());
      expect(dead).toHaveLength(30);
      expect(dead[0]![1]).toMatchObject({ reason: "unreadable inbox entry", type: "appointment.created" });
      // Done, not pending: gone from the next replay, and a redelivery of the id is a duplicate.
      expect((await collect(new WebhookInbox({ store }).pending())).map((e) => e.id)).toEqual(["evt_ok_1", "evt_ok_2"]);
      expect(await inbox.accept({ id: "evt_bad_7", type: "appointment.created", data: { object: { id: "a" } } })).toBe(
        "duplicate",
      );
    } finally {
      await store.close();
    }
  });
});

describe("inbox acceptance", () => {
  it("answers one acceptance for deliveries of one event spread over batches in flight, on a real SQLite file", async () => {
    const store = await openTestStore(tmpStorePath());
    try {
      const inbox = new WebhookInbox({ store });
      const e = {
        id: "evt_spread",
        type: "appointment.created",
        data: { object: { id: "apt_1", status: "confirmed" } },
      };
      const answers: Promise<string>[] = [];
      // Some wait for the same batch, some for the next while the first is being stored, some come after.
      for (let wave = 0; wave < 4; wave++) {
        for (let i = 0; i < 3; i++) answers.push(inbox.accept(e as never));
        await new Promise((r) => setImmediate(r));
      }
      const results = await Promise.all(answers);
      expect(results.filter((r) => r === "accepted")).toHaveLength(1);
      expect(results.filter((r) => r === "duplicate")).toHaveLength(11);
      expect((await collect(inbox.pending())).map((p) => p.id)).toEqual(["evt_spread"]);
    } finally {
      await store.close();
    }
  });
});
