// A correctly signed body nested 200,000 levels deep: set aside on its own in the dead letters and acknowledged (an
// error answer would have the sender retry it until it disables the endpoint), with an error line saying it is
// authentic, while deliveries arriving with it are stored; and group commit drops an entry the store cannot
// serialize from its batch instead of failing the batch.
import { describe, expect, it } from "vitest";
import { openStore, UnstorableValueError } from "../../src/store/store.ts";
import { BatchedAdder, BatchedWriter } from "../../src/webhooks/batched-writer.ts";
import { MAX_JSON_DEPTH, nestedDeeperThan } from "../../src/webhooks/event.ts";
import { collect, event, openTestStore, startHarness, tmpStorePath } from "./support.ts";

const DEPTH = 200_000;

/** A value nested `depth` arrays deep, built without recursion. */
function deepValue(depth: number): unknown {
  let v: unknown = [];
  for (let i = 0; i < depth; i++) v = [v];
  return v;
}

describe("deeply nested webhook bodies", () => {
  it("measures nesting outside strings, in one pass", () => {
    const at = (text: string) => nestedDeeperThan(Buffer.from(text), 2);
    expect(at('{"a":{"b":1}}')).toBe(false);
    expect(at('{"a":{"b":[1]}}')).toBe(true);
    expect(at('{"a":"[[[[{{{{","b":"\\\\"}')).toBe(false);
    expect(at('{"a":"\\"[[[[","b":[1]}')).toBe(false);
    expect(nestedDeeperThan(Buffer.from("[".repeat(DEPTH) + "]".repeat(DEPTH)), MAX_JSON_DEPTH)).toBe(true);
  });

  it("sets a signed body nested too deep aside on its own and acknowledges it; the deliveries beside it are stored", async () => {
    const h = await startHarness({ processor: false, handler: { maxBodyBytes: 1024 * 1024 } });
    try {
      const deep = `{"id":"evt_deep","type":"appointment.created","data":{"object":{"id":"apt_d","x":${"[".repeat(DEPTH)}${"]".repeat(DEPTH)}}}}`;
      const good = Array.from({ length: 20 }, (_, i) => event(`evt_${i}`, "appointment.created", { id: `apt_${i}` }));
      const [setAside, ...others] = await Promise.all([h.post(deep, { raw: true }), ...good.map((e) => h.post(e))]);
      expect(setAside.status).toBe(200);
      expect(others.map((r) => r.status)).toEqual(good.map(() => 200));
      for (const e of good) expect(await h.inbox.get(e.id), e.id).toBeDefined();
      expect(await h.inbox.get("evt_deep")).toBeUndefined();
      const dead = await collect(h.inbox.deadLetters());
      expect(dead.map(([, d]) => d)).toEqual([
        expect.objectContaining({
          reason: `over a limit: JSON nested deeper than ${MAX_JSON_DEPTH} levels`,
          eventId: "evt_deep",
        }),
      ]);
      const line = h.log.find((l) => String(l["msg"]).startsWith("correctly signed webhook that cannot be processed"));
      expect(line).toMatchObject({
        level: 50,
        event_id: "evt_deep",
        reason: "over a limit: JSON nested deeper than 32 levels",
      });
      expect(String(line?.["msg"])).toContain("authentic");
      expect(await h.registry.metrics()).toContain('calbridge_webhooks_total{result="unprocessable"} 1');
    } finally {
      await h.close();
    }
  });

  it.each([
    ["memory", async () => openStore("memory://")],
    ["sqlite", async () => openTestStore(tmpStorePath())],
  ])("group commit on %s fails only the entry the store cannot serialize", async (_name, open) => {
    const store = await open();
    try {
      const adder = new BatchedAdder<unknown>(store.table("inbox"));
      const results = await Promise.allSettled([
        adder.add("a", { n: 1 }),
        adder.add("deep", deepValue(DEPTH)),
        adder.add("b", { n: 2 }),
      ]);
      expect(results.map((r) => r.status)).toEqual(["fulfilled", "rejected", "fulfilled"]);
      expect((results[1] as PromiseRejectedResult).reason).toBeInstanceOf(UnstorableValueError);
      expect((results[1] as PromiseRejectedResult).reason.keys).toEqual(["deep"]);
      expect(results.map((r) => (r.status === "fulfilled" ? r.value : "x"))).toEqual([true, "x", true]);
      expect(await store.table("inbox").getMany(["a", "deep", "b"])).toEqual([{ n: 1 }, undefined, { n: 2 }]);

      const writer = new BatchedWriter<unknown>(store.table("meta"));
      const written = await Promise.allSettled([
        writer.set("c", 3),
        writer.set("deep", deepValue(DEPTH)),
        writer.set("d", 4),
      ]);
      expect(written.map((r) => r.status)).toEqual(["fulfilled", "rejected", "fulfilled"]);
      expect(await store.table("meta").getMany(["c", "deep", "d"])).toEqual([3, undefined, 4]);
    } finally {
      await store.close();
    }
  });
});
