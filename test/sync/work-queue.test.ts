// The keyed work queue on the manual clock: one run per key, merging, lanes, and retries that hold no worker.
import { describe, expect, it } from "vitest";
import { ManualClock } from "../../src/clock.ts";
import { type RunVerdict, WorkQueue } from "../../src/sync/work-queue.ts";

interface Req {
  key: string;
  tags: string[];
}

function deferred<T = void>() {
  let resolve!: (v: T) => void;
  const promise = new Promise<T>((r) => {
    resolve = r;
  });
  return { promise, resolve };
}

const turn = () => new Promise((r) => setImmediate(r));

function queue(opts: {
  concurrency?: number;
  laneLimits?: number[];
  run?: (key: string, r: Req, attempt: number) => Promise<RunVerdict>;
}) {
  const clock = new ManualClock();
  const runs: { key: string; tags: string[]; attempt: number }[] = [];
  let active = 0;
  let maxActive = 0;
  const perKey = new Map<string, number>();
  let maxPerKey = 0;
  const q = new WorkQueue<Req>({
    concurrency: opts.concurrency ?? 2,
    lanes: 3,
    ...(opts.laneLimits ? { laneLimits: opts.laneLimits } : {}),
    clock,
    merge: (a, b) => ({ key: a.key, tags: [...a.tags, ...b.tags] }),
    run: async (key, r, attempt) => {
      runs.push({ key, tags: r.tags, attempt });
      active++;
      maxActive = Math.max(maxActive, active);
      perKey.set(key, (perKey.get(key) ?? 0) + 1);
      maxPerKey = Math.max(maxPerKey, perKey.get(key)!);
      try {
        return opts.run ? await opts.run(key, r, attempt) : { done: true };
      } finally {
        active--;
        perKey.set(key, perKey.get(key)! - 1);
      }
    },
  });
  return { q, clock, runs, stats: () => ({ maxActive, maxPerKey }) };
}

describe("WorkQueue", () => {
  it("runs one key at a time, and different keys in parallel up to the concurrency", async () => {
    const gates = new Map<string, ReturnType<typeof deferred<RunVerdict>>>();
    const { q, runs, stats } = queue({
      concurrency: 2,
      run: (key) => {
        const g = deferred<RunVerdict>();
        gates.set(key, g);
        return g.promise;
      },
    });
    q.add("a", { key: "a", tags: ["a1"] });
    q.add("b", { key: "b", tags: ["b1"] });
    q.add("c", { key: "c", tags: ["c1"] });
    await turn();
    expect(runs.map((r) => r.key)).toEqual(["a", "b"]);
    q.add("a", { key: "a", tags: ["a2"] }); // a is running: it runs again afterwards
    gates.get("a")!.resolve({ done: true });
    await turn();
    await turn();
    expect(runs.map((r) => r.key)).toEqual(["a", "b", "c"]);
    gates.get("b")!.resolve({ done: true });
    gates.get("c")!.resolve({ done: true });
    await turn();
    await turn();
    expect(runs.map((r) => `${r.key}:${r.tags.join("+")}`)).toEqual(["a:a1", "b:b1", "c:c1", "a:a2"]);
    gates.get("a")!.resolve({ done: true });
    await q.drained();
    expect(stats()).toEqual({ maxActive: 2, maxPerKey: 1 });
  });

  it("merges requests for a key that waits its turn into one run", async () => {
    const { q, runs } = queue({ concurrency: 1 });
    q.add("x", { key: "x", tags: ["1"] });
    q.add("x", { key: "x", tags: ["2"] });
    q.add("x", { key: "x", tags: ["3"] });
    await q.drained();
    expect(runs).toEqual([{ key: "x", tags: ["1", "2", "3"], attempt: 1 }]);
  });

  it("serves the higher lane first", async () => {
    const gate = deferred<RunVerdict>();
    const { q, runs } = queue({
      concurrency: 1,
      run: (key) => (key === "first" ? gate.promise : Promise.resolve({ done: true })),
    });
    q.add("first", { key: "first", tags: [] }, 2);
    await turn();
    q.add("low1", { key: "low1", tags: [] }, 2);
    q.add("low2", { key: "low2", tags: [] }, 2);
    q.add("mid", { key: "mid", tags: [] }, 1);
    q.add("high", { key: "high", tags: [] }, 0);
    q.add("low2", { key: "low2", tags: ["promoted"] }, 0); // a waiting key asked for again at a higher priority
    gate.resolve({ done: true });
    await q.drained();
    expect(runs.map((r) => r.key)).toEqual(["first", "high", "low2", "mid", "low1"]);
  });

  it("runs at most a lane's limit from that lane at once; the other workers serve the other lanes", async () => {
    const gates = new Map<string, ReturnType<typeof deferred<RunVerdict>>>();
    const { q, runs } = queue({
      concurrency: 3,
      laneLimits: [Number.POSITIVE_INFINITY, Number.POSITIVE_INFINITY, 1],
      run: (key) => {
        const g = deferred<RunVerdict>();
        gates.set(key, g);
        return g.promise;
      },
    });
    for (const k of ["e1", "e2", "e3"]) q.add(k, { key: k, tags: [] }, 2);
    await turn();
    expect(runs.map((r) => r.key)).toEqual(["e1"]);
    q.add("w1", { key: "w1", tags: [] }, 0);
    q.add("w2", { key: "w2", tags: [] }, 1);
    q.add("w3", { key: "w3", tags: [] }, 0);
    await turn();
    expect(runs.map((r) => r.key)).toEqual(["e1", "w1", "w3"]);
    gates.get("e1")!.resolve({ done: true });
    await turn();
    await turn();
    // The freed worker serves the higher lane first; the limited lane's next key waits for a worker of its own.
    expect(runs.map((r) => r.key)).toEqual(["e1", "w1", "w3", "w2"]);
    gates.get("w1")!.resolve({ done: true });
    await turn();
    await turn();
    expect(runs.map((r) => r.key)).toEqual(["e1", "w1", "w3", "w2", "e2"]);
    // With a worker free and e2 running, e3 still waits: the lane's limit, not the concurrency, holds it.
    gates.get("w3")!.resolve({ done: true });
    await turn();
    await turn();
    expect(runs.map((r) => r.key)).toEqual(["e1", "w1", "w3", "w2", "e2"]);
    for (const k of ["w2", "e2"]) gates.get(k)!.resolve({ done: true });
    await turn();
    await turn();
    expect(runs.map((r) => r.key).at(-1)).toBe("e3");
    gates.get("e3")!.resolve({ done: true });
    await q.drained();
  });

  it("a key waiting to retry holds no worker, and runs again when its time comes", async () => {
    let failures = 2;
    const { q, runs, clock } = queue({
      concurrency: 1,
      run: async (key) => (key === "sick" && failures-- > 0 ? { done: false, retryInMs: 10_000 } : { done: true }),
    });
    q.add("sick", { key: "sick", tags: [] });
    await q.idle();
    expect(q.waiting).toBe(1);
    q.add("well", { key: "well", tags: [] });
    await q.idle();
    expect(runs.map((r) => r.key)).toEqual(["sick", "well"]);
    await clock.advance(10_000);
    await q.idle();
    await clock.advance(10_000);
    await q.drained();
    expect(runs.map((r) => `${r.key}#${r.attempt}`)).toEqual(["sick#1", "well#1", "sick#2", "sick#3"]);
  });

  it("a new request for a waiting key runs it at once, merged, and the attempts go on counting", async () => {
    let failures = 1;
    const { q, runs, clock } = queue({
      concurrency: 1,
      run: async () => (failures-- > 0 ? { done: false, retryInMs: 60_000 } : { done: true }),
    });
    q.add("k", { key: "k", tags: ["old"] });
    await q.idle();
    expect(q.waiting).toBe(1);
    q.add("k", { key: "k", tags: ["new"] });
    await q.drained();
    expect(clock.waiting).toBe(0);
    expect(runs).toEqual([
      { key: "k", tags: ["old"], attempt: 1 },
      { key: "k", tags: ["old", "new"], attempt: 2 },
    ]);
  });

  it("stop() cancels the waits, finishes what runs, and returns what never ran to the end", async () => {
    const gate = deferred<RunVerdict>();
    const { q, clock } = queue({
      concurrency: 1,
      run: async (key) => (key === "slow" ? gate.promise : { done: false, retryInMs: 5_000 }),
    });
    q.add("retrying", { key: "retrying", tags: ["r"] });
    await q.idle();
    q.add("slow", { key: "slow", tags: ["s"] });
    q.add("queued", { key: "queued", tags: ["q"] });
    await turn();
    const stopping = q.stop();
    gate.resolve({ done: true });
    const left = await stopping;
    expect(left.map((r) => r.tags[0]).sort()).toEqual(["q", "r"]);
    expect(clock.waiting).toBe(0);
    expect(q.add("late", { key: "late", tags: [] })).toBe(false);
  });

  it("dropParked() removes only the keys waiting after a run that sent nothing, and cancels their waits", async () => {
    const { q, clock } = queue({
      concurrency: 2,
      run: async (key) =>
        key === "parked" ? { done: false, retryInMs: 5_000, parked: true } : { done: false, retryInMs: 5_000 },
    });
    q.add("parked", { key: "parked", tags: ["p"] });
    q.add("retrying", { key: "retrying", tags: ["r"] });
    await q.idle();
    expect(q.waiting).toBe(2);
    expect(q.dropParked().map((r) => r.tags[0])).toEqual(["p"]);
    expect(q.has("parked")).toBe(false);
    expect(q.has("retrying")).toBe(true);
    expect(clock.waiting).toBe(1);
    expect((await q.stop()).map((r) => r.tags[0])).toEqual(["r"]);
  });

  it("pause() waits for the runs in flight and starts nothing new until resume(); requests are kept and merged", async () => {
    const gate = deferred<RunVerdict>();
    const { q, runs } = queue({ concurrency: 2, run: async (key) => (key === "busy" ? gate.promise : { done: true }) });
    q.add("busy", { key: "busy", tags: ["b"] });
    await turn();
    let paused = false;
    const pausing = q.pause().then(() => (paused = true));
    q.add("a", { key: "a", tags: ["1"] });
    q.add("a", { key: "a", tags: ["2"] });
    await turn();
    expect(paused).toBe(false); // "busy" still runs
    gate.resolve({ done: true });
    await pausing;
    await turn();
    expect(runs.map((r) => r.key)).toEqual(["busy"]); // "a" waits
    q.resume();
    await q.drained();
    expect(runs).toEqual([
      { key: "busy", tags: ["b"], attempt: 1 },
      { key: "a", tags: ["1", "2"], attempt: 1 },
    ]);
  });
});

describe("WorkQueue: groups take turns", () => {
  function grouped(limits: { concurrency: number; perGroup: number }) {
    const started: string[] = [];
    const gates = new Map<string, ReturnType<typeof deferred<RunVerdict>>>();
    const q = new WorkQueue<Req>({
      concurrency: 99,
      limits: () => limits,
      group: (r) => r.tags[0] ?? "",
      lanes: 3,
      clock: new ManualClock(),
      merge: (a) => a,
      run: (key) => {
        started.push(key);
        const g = deferred<RunVerdict>();
        gates.set(key, g);
        return g.promise;
      },
    });
    const finish = async (key: string) => {
      gates.get(key)!.resolve({ done: true });
      await turn();
      await turn();
    };
    return { q, started, finish };
  }

  it("serves a lane round-robin over groups, so one group's thousands of keys do not hold up another's one", async () => {
    const { q, started, finish } = grouped({ concurrency: 2, perGroup: 9 });
    for (let i = 0; i < 50; i++) q.add(`a${i}`, { key: `a${i}`, tags: ["anna"] }, 2);
    q.add("b0", { key: "b0", tags: ["ben"] }, 2);
    await turn();
    expect(started).toEqual(["a0", "b0"]);
    await finish("a0");
    await finish("b0");
    expect(started).toEqual(["a0", "b0", "a1", "a2"]);
  });

  it("caps the runs of one group, and leaves keys without a group uncapped", async () => {
    const { q, started, finish } = grouped({ concurrency: 6, perGroup: 2 });
    for (let i = 0; i < 5; i++) q.add(`a${i}`, { key: `a${i}`, tags: ["anna"] }, 2);
    for (let i = 0; i < 3; i++) q.add(`x${i}`, { key: `x${i}`, tags: [] }, 2);
    await turn();
    expect(started.filter((k) => k.startsWith("a"))).toEqual(["a0", "a1"]);
    expect(started.filter((k) => k.startsWith("x"))).toEqual(["x0", "x1", "x2"]);
    expect(q.running).toBe(5);
    // A live change of another group in a higher lane starts at once; anna's next key waits for one of hers.
    q.add("b0", { key: "b0", tags: ["ben"] }, 0);
    await turn();
    expect(started.at(-1)).toBe("b0");
    await finish("x0");
    expect(started).not.toContain("a2");
    await finish("a0");
    expect(started.at(-1)).toBe("a2");
  });
});
