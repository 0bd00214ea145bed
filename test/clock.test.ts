import { afterEach, describe, expect, it, vi } from "vitest";
import { isoFormatter, longTimeout, MAX_TIMER_MS, ManualClock, systemClock } from "../src/clock.ts";

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

describe("sleeping longer than one timer can wait", () => {
  afterEach(() => {
    vi.useRealTimers();
  });

  // Node fires a timer over 2^31-1 ms after 1 ms (TimeoutOverflowWarning): a poller sleeping a 3,000,000 s interval
  // woke every millisecond, found its calendar not due and slept again (review18).
  it("systemClock.sleep does not wake early, nor warn", async () => {
    const warnings: string[] = [];
    const onWarning = (w: Error) => warnings.push(w.name);
    process.on("warning", onWarning);
    try {
      const ac = new AbortController();
      let woke = false;
      const slept = systemClock.sleep(3_000_000_000, ac.signal).then(
        () => {
          woke = true;
        },
        () => {},
      );
      await new Promise((r) => setTimeout(r, 50));
      expect(woke).toBe(false);
      ac.abort(new Error("stop"));
      await slept;
      expect(woke).toBe(false);
      await new Promise((r) => setImmediate(r));
      expect(warnings).not.toContain("TimeoutOverflowWarning");
    } finally {
      process.off("warning", onWarning);
    }
  });

  it("longTimeout waits in steps of at most 2^31-1 ms, and its cancel holds between steps", () => {
    vi.useFakeTimers();
    const spy = vi.spyOn(globalThis, "setTimeout");
    const fired: string[] = [];
    longTimeout(() => fired.push("long"), 2 * MAX_TIMER_MS + 5);
    const cancel = longTimeout(() => fired.push("cancelled"), 2 * MAX_TIMER_MS);
    for (const [, delay] of spy.mock.calls) expect(delay).toBeLessThanOrEqual(MAX_TIMER_MS);
    vi.advanceTimersByTime(MAX_TIMER_MS);
    cancel();
    vi.advanceTimersByTime(MAX_TIMER_MS);
    expect(fired).toEqual([]);
    vi.advanceTimersByTime(5);
    expect(fired).toEqual(["long"]);
    for (const [, delay] of spy.mock.calls) expect(delay).toBeLessThanOrEqual(MAX_TIMER_MS);
    longTimeout(() => fired.push("nan"), Number.NaN);
    longTimeout(() => fired.push("negative"), -5);
    vi.advanceTimersByTime(0);
    expect(fired).toEqual(["long", "nan", "negative"]);
  });
});
