import { describe, expect, it } from "vitest";
import { isoFormatter, ManualClock } from "../src/clock.ts";

describe("ManualClock", () => {
  it("wakes sleepers only when time is advanced past their deadline", async () => {
    const clock = new ManualClock(0);
    const woke: number[] = [];
    void clock.sleep(100).then(() => woke.push(100));
    void clock.sleep(50).then(() => woke.push(50));
    await clock.advance(40);
    expect(woke).toEqual([]);
    await clock.advance(60);
    expect(woke).toEqual([50, 100]);
    expect(clock.now()).toBe(100);
  });
});

describe("isoFormatter", () => {
  it("formats as Date#toISOString does, for each millisecond it is given, in any order", () => {
    const iso = isoFormatter();
    const at = Date.UTC(2026, 10, 22, 9, 0, 0, 123);
    for (const ms of [at, at, at + 1, at, 0, -1, at + 86_400_000, at + 86_400_000]) {
      expect(iso(ms)).toBe(new Date(ms).toISOString());
    }
  });
});
