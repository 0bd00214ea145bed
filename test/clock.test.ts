import { describe, expect, it } from "vitest";
import { ManualClock } from "../src/clock.ts";

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
