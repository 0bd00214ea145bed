// Unit tests of the keyed queue: order per key, parallel keys under a limit, retries that hold no slot, stop.
import { describe, expect, it } from "vitest";
import { KeyedQueue, type RunResult } from "../../src/webhooks/keyed-queue.ts";

const tick = () => new Promise((r) => setImmediate(r));

describe("KeyedQueue", () => {
  it("runs items of one key in order, one at a time, and keys in parallel up to the limit", async () => {
    const log: string[] = [];
    let running = 0;
    let peak = 0;
    const queue = new KeyedQueue<string>({
      concurrency: 2,
      run: async (item) => {
        running++;
        peak = Math.max(peak, running);
        await tick();
        log.push(item);
        running--;
        return { done: true };
      },
    });
    for (const item of ["a1", "a2", "b1", "c1", "a3", "b2"]) queue.push(item[0]!, item);
    await queue.idle();
    expect(peak).toBe(2);
    expect(log.filter((x) => x.startsWith("a"))).toEqual(["a1", "a2", "a3"]);
    expect(log.filter((x) => x.startsWith("b"))).toEqual(["b1", "b2"]);
    expect(log).toHaveLength(6);
  });

  it("retries the head of a key after its wait without holding a slot, and keeps later items behind it", async () => {
    const log: string[] = [];
    let release!: () => void;
    const wait = new Promise<void>((r) => {
      release = r;
    });
    let failedOnce = false;
    const queue = new KeyedQueue<string>({
      concurrency: 1,
      run: async (item): Promise<RunResult> => {
        if (item === "a1" && !failedOnce) {
          failedOnce = true;
          return { done: false, retryAfter: wait };
        }
        log.push(item);
        return { done: true };
      },
    });
    queue.push("a", "a1");
    queue.push("a", "a2");
    queue.push("b", "b1");
    for (let i = 0; i < 5; i++) await tick();
    expect(log).toEqual(["b1"]);
    release();
    await queue.idle();
    expect(log).toEqual(["b1", "a1", "a2"]);
  });

  it("treats a throwing run as done, and stop() waits for runs in flight only", async () => {
    let finish!: () => void;
    const queue = new KeyedQueue<string>({
      concurrency: 1,
      run: (item) => {
        if (item === "boom") return Promise.reject(new Error("boom"));
        return new Promise((r) => {
          finish = () => r({ done: true });
        });
      },
    });
    queue.push("k", "boom");
    queue.push("k", "slow");
    queue.push("j", "never");
    for (let i = 0; i < 5; i++) await tick();
    expect(queue.running).toBe(1);
    let stopped = false;
    const stopping = queue.stop().then(() => {
      stopped = true;
    });
    await tick();
    expect(stopped).toBe(false);
    finish();
    await stopping;
    expect(queue.size).toBe(1);
  });
});
