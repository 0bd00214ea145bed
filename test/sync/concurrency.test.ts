// How many syncs run at once: the floor while Google answers at once, more as its round trip grows (enough to keep the
// project's budget busy), never more than the ceiling; per therapist, what their own budget can use.
import { describe, expect, it } from "vitest";
import { queueLimits } from "../../src/sync/concurrency.ts";

const google = (latencyMs: number | undefined) => ({ projectPerSecond: 10_000 / 60, userPerSecond: 10, latencyMs });

describe("queueLimits", () => {
  it("keeps the floor before any answer and while answers are instant", () => {
    expect(queueLimits({ min: 4, max: 64, quota: google(undefined) })).toEqual({ concurrency: 4, perGroup: 2 });
    expect(queueLimits({ min: 4, max: 64, quota: google(0) })).toEqual({ concurrency: 4, perGroup: 2 });
  });

  it("grows with the round trip so the project's 10,000 a minute stay in use, and caps one therapist by their 600", () => {
    // 150 ms: 167 requests a second need 25 in flight; a quarter more for variance, plus the floor.
    expect(queueLimits({ min: 4, max: 64, quota: google(150) })).toEqual({ concurrency: 36, perGroup: 4 });
    expect(queueLimits({ min: 4, max: 64, quota: google(600) })).toEqual({ concurrency: 64, perGroup: 10 });
    expect(queueLimits({ min: 4, max: 20, quota: google(150) }).concurrency).toBe(20);
  });
});
