// Webhook dead letters keep the event's id, type, attempts and the reason, never the body (customer details), and
// expire: 30 days by default (webhooks.dead_letter_days), removed by the store's purge; an earlier build's dead
// letters, which kept bodies forever, are rewritten at start.
import { afterEach, describe, expect, it } from "vitest";
import type { Store } from "../../src/store/store.ts";
import { DEFAULT_DEAD_LETTER_TTL_MS, WebhookInbox } from "../../src/webhooks/inbox.ts";
import { harness as syncHarness } from "../sync/support.ts";
import { collect, openTestStore, tmpStorePath } from "./support.ts";

const stores: Store[] = [];
afterEach(async () => {
  for (const s of stores.splice(0)) await s.close();
});

async function store(): Promise<Store> {
  const s = await openTestStore(tmpStorePath());
  stores.push(s);
  return s;
}

describe("webhook dead letters", () => {
  it("keep the event id, type, attempts, size and reason, not the body", async () => {
    const s = await store();
    const inbox = new WebhookInbox({ store: s });
    await inbox.deadLetter("evt_1", {
      reason: "processing failed",
      error: `mapping is missing ${"x".repeat(2000)}`,
      eventId: "evt_1",
      type: "appointment.created",
      attempts: 8,
    });
    const letters = await collect(inbox.deadLetters());
    expect(letters).toHaveLength(1);
    const [key, letter] = letters[0]!;
    expect(key).toBe("evt_1");
    expect(letter).toMatchObject({ reason: "processing failed", eventId: "evt_1", attempts: 8 });
    expect(String(letter["error"])).toHaveLength(500);
    expect(letter).not.toHaveProperty("body");
  });

  it("expire after 30 days by default, or the configured time, and the purge removes them", async () => {
    const s = await store();
    const dead = s.table("dead");
    const ttls: (number | undefined)[] = [];
    const set = dead.set.bind(dead);
    dead.set = (key, value, ttl) => {
      ttls.push(ttl);
      return set(key, value, ttl);
    };
    await new WebhookInbox({ store: s }).deadLetter("evt_a", { reason: "x" });
    expect(ttls).toEqual([DEFAULT_DEAD_LETTER_TTL_MS]);
    expect(DEFAULT_DEAD_LETTER_TTL_MS).toBe(30 * 86_400_000);

    const short = new WebhookInbox({ store: s, deadLetterTtlMs: 1 });
    await short.deadLetter("evt_b", { reason: "x" });
    await new Promise((r) => setTimeout(r, 5));
    expect(await s.purgeExpired()).toBeGreaterThanOrEqual(1);
    expect((await collect(short.deadLetters())).map(([k]) => k)).toEqual(["evt_a"]);
  });

  it("rewrites an earlier build's dead letters without their bodies, to expire from when they were written", async () => {
    const s = await store();
    const dead = s.table<Record<string, unknown>>("dead");
    const day = 86_400_000;
    const body = JSON.stringify({ id: "evt_old", data: { object: { customer_name: "Erika Mustermann" } } });
    await dead.set("evt_old", {
      reason: "processing failed",
      eventId: "evt_old",
      body,
      encoding: "utf8",
      receivedAt: new Date(Date.now() - 2 * day).toISOString(),
      deadAt: new Date(Date.now() - 2 * day).toISOString(),
    });
    await dead.set("malformed:abc", {
      reason: "malformed: body is not JSON",
      body: "Erika Mustermann",
      encoding: "utf8",
      receivedAt: new Date(Date.now() - 40 * day).toISOString(),
      deadAt: new Date(Date.now() - 40 * day).toISOString(),
    });
    // The sync engine's own dead letters are not the inbox's.
    await dead.set("appt:apt_1", { appointmentId: "apt_1", error: "x", attempts: 5 });
    const inbox = new WebhookInbox({ store: s });
    expect(await inbox.minimiseDeadLetters()).toBe(2);
    const left = Object.fromEntries(await collect(dead.entries()));
    expect(Object.keys(left).sort()).toEqual(["appt:apt_1", "evt_old"]);
    expect(left["evt_old"]).toEqual({
      reason: "processing failed",
      eventId: "evt_old",
      receivedAt: expect.any(String),
      deadAt: expect.any(String),
    });
    expect(JSON.stringify(left)).not.toContain("Mustermann");
    expect(await inbox.minimiseDeadLetters()).toBe(0);
  });

  it("webhooks.dead_letter_days reaches the daemon's inbox", async () => {
    const h = await syncHarness({
      therapists: 1,
      configure: (c) => {
        c.webhooks.dead_letter_days = 2;
      },
    });
    try {
      const dead = h.app.store.table("dead");
      const ttls: (number | undefined)[] = [];
      const set = dead.set.bind(dead);
      dead.set = (key, value, ttl) => {
        ttls.push(ttl);
        return set(key, value, ttl);
      };
      await h.app.inbox.deadLetter("evt_cfg", { reason: "x" });
      expect(ttls).toEqual([2 * 86_400_000]);
    } finally {
      await h.close();
    }
  });
});
