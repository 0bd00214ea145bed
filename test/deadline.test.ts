// Tests the time limit of one request: it aborts at its limit, or with its parent, and never once ended.
import { describe, expect, it } from "vitest";
import { deadline, RequestTimeoutError } from "../src/deadline.ts";

const wait = (ms: number) => new Promise((r) => setTimeout(r, ms));

describe("deadline", () => {
  it("aborts its signal with a RequestTimeoutError once the limit passes", async () => {
    const limit = deadline(20);
    expect(limit.signal.aborted).toBe(false);
    await wait(60);
    expect(limit.signal.aborted).toBe(true);
    expect(limit.expired).toBe(true);
    expect(limit.signal.reason).toBeInstanceOf(RequestTimeoutError);
    expect(limit.signal.reason).toMatchObject({ name: "TimeoutError", timeoutMs: 20 });
    limit.end();
  });

  it("never aborts once ended: the request is over, its limit with it", async () => {
    const parent = new AbortController();
    const limit = deadline(20, parent.signal);
    limit.end();
    await wait(60);
    parent.abort(new Error("stopping"));
    expect(limit.signal.aborted).toBe(false);
    expect(limit.expired).toBe(false);
  });

  it("a limit longer than one timer can wait does not expire at once", async () => {
    // Node fires a timer over 2^31-1 ms after 1 ms: such a limit aborted the request at once (review18).
    const limit = deadline(3_000_000_000);
    await wait(30);
    expect(limit.signal.aborted).toBe(false);
    expect(limit.expired).toBe(false);
    limit.end();
  });

  it("aborts with the parent's reason, which is not an expiry", () => {
    const parent = new AbortController();
    const limit = deadline(10_000, parent.signal);
    const reason = new Error("stopping");
    parent.abort(reason);
    expect(limit.signal.reason).toBe(reason);
    expect(limit.expired).toBe(false);
    limit.end();
    const already = deadline(10_000, parent.signal);
    expect(already.signal.reason).toBe(reason);
    already.end();
  });
});
