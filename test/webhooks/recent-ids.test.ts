import { describe, expect, it } from "vitest";
import { RecentIds } from "../../src/webhooks/recent-ids.ts";

describe("RecentIds", () => {
  it("remembers at least the last `size` ids and forgets older ones", () => {
    const recent = new RecentIds(100);
    for (let i = 0; i < 1_000; i++) recent.add(`id_${i}`);
    for (let i = 900; i < 1_000; i++) expect(recent.has(`id_${i}`)).toBe(true);
    // Never more than twice the size.
    for (let i = 0; i < 800; i++) expect(recent.has(`id_${i}`)).toBe(false);
    expect(recent.has("never")).toBe(false);
  });

  it("forgets a whole generation at a time: right after a turn over, exactly the last `size` ids are known", () => {
    const recent = new RecentIds(10_000);
    for (let i = 0; i < 200_000; i++) recent.add(`evt_${i}`);
    expect(recent.has("evt_199999")).toBe(true);
    expect(recent.has("evt_190000")).toBe(true);
    expect(recent.has("evt_189999")).toBe(false);
  });

  it("refuses a size that is not a positive integer", () => {
    expect(() => new RecentIds(0)).toThrow(RangeError);
    expect(() => new RecentIds(1.5)).toThrow(RangeError);
  });
});
