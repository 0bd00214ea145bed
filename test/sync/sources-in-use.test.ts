import { describe, expect, it } from "vitest";
import { forget, SourcesInUse } from "../../src/sync/apply-order.ts";
import type { PlanEntry } from "../../src/sync/types.ts";

const entry = (appointmentId: string, therapistId: string) =>
  ({ kind: "update", appointmentId, therapistId, reason: "test" }) as unknown as PlanEntry;

describe("SourcesInUse", () => {
  it("hands each planned entry its source and lets a source go after its last entry", () => {
    const sources = new Map([
      ["a", { n: 1 }],
      ["b", { n: 2 }],
    ]);
    // "b" strayed into two calendars: two entries.
    const inUse = new SourcesInUse(sources, [entry("a", "t1"), entry("b", "t1"), entry("b", "t2")]);
    expect(inUse.take("b")).toEqual({ n: 2 });
    expect(sources.has("b")).toBe(true);
    expect(inUse.take("a")).toEqual({ n: 1 });
    expect(sources.has("a")).toBe(false);
    expect(inUse.take("b")).toEqual({ n: 2 });
    expect(sources.size).toBe(0);
    expect(inUse.take("c")).toBeUndefined();
  });

  it("forget empties maps, sets and arrays in place", () => {
    const map = new Map([[1, 1]]);
    const set = new Set([1]);
    const list = [1, 2];
    forget([map, set], [list]);
    expect([map.size, set.size, list.length]).toEqual([0, 0, 0]);
  });
});
