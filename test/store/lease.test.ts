// Tests the leader lease: on a SQLite file shared by two stores (ManualClock), and against a real redis-server: one
// leader, takeover on lapse, handover on release, no split brain.
import { mkdtempSync, readlinkSync, rmSync } from "node:fs";
import { hostname, tmpdir } from "node:os";
import { join } from "node:path";
import { performance } from "node:perf_hooks";
import { afterEach, beforeEach, describe, expect, it } from "vitest";
import { type Clock, ManualClock, systemClock } from "../../src/clock.ts";
import { LeaderLease } from "../../src/store/lease.ts";
import { openStore, type Store } from "../../src/store/store.ts";
import { type FreezableProxy, redisTestsEnabled, startProxy, useRedisServer } from "../support/redis.ts";

interface Change {
  t: number;
  name: string;
  leader: boolean;
}

async function waitFor(what: string, predicate: () => boolean, timeoutMs: number): Promise<number> {
  const start = performance.now();
  while (!predicate()) {
    if (performance.now() - start > timeoutMs) throw new Error(`timed out after ${timeoutMs} ms waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 2));
  }
  return performance.now() - start;
}

/** Fails if two onChange(true) periods ever overlap. */
function expectNoOverlap(timeline: Change[]): void {
  const leaders = new Set<string>();
  for (const c of timeline) {
    if (c.leader) {
      expect([...leaders], `${c.name} became leader at ${c.t.toFixed(0)} while others led`).toEqual([]);
      leaders.add(c.name);
    } else leaders.delete(c.name);
  }
}

describe("LeaderLease on a single-process store", () => {
  it("is always leader on a memory store, and at once on a SQLite file nobody else holds", async () => {
    for (const url of ["memory://", "sqlite://:memory:"]) {
      const store = await openStore(url);
      const changes: boolean[] = [];
      const lease = new LeaderLease({ store, holderId: "solo", leaseMs: 900, onChange: (v) => changes.push(v) });
      expect(lease.isLeader).toBe(false);
      await lease.start();
      expect(lease.isLeader).toBe(true);
      await lease.stop();
      expect(lease.isLeader).toBe(false);
      expect(changes).toEqual([true, false]);
      await store.close();
    }
  });
});

describe("LeaderLease on one SQLite file shared by two stores (ManualClock)", () => {
  const L = 3000;
  const cleanups: (() => Promise<unknown>)[] = [];
  afterEach(async () => {
    for (const c of cleanups.splice(0).reverse()) await c().catch(() => {});
  });

  async function file(): Promise<string> {
    const dir = mkdtempSync(join(tmpdir(), "calbridge-lease-"));
    cleanups.push(async () => rmSync(dir, { recursive: true, force: true }));
    return `sqlite://${join(dir, "store.sqlite")}`;
  }

  async function lease(url: string, holderId: string, clock: ManualClock): Promise<LeaderLease> {
    const store = await openStore(url);
    const l = new LeaderLease({ store, holderId, leaseMs: L, clock });
    cleanups.push(async () => {
      await l.stop();
      await store.close();
    });
    return l;
  }

  /** Moves the clock in steps, letting each step's SQLite statements complete (real I/O) before the next. */
  async function advance(clock: ManualClock, ms: number, step = 50, each?: () => void): Promise<void> {
    for (let done = 0; done < ms; done += step) {
      await clock.advance(Math.min(step, ms - done));
      await new Promise((r) => setTimeout(r, 15));
      each?.();
    }
  }

  it("one leads at once and keeps it; the other stands by; a release hands over at the standby's next read", async () => {
    const url = await file();
    const clock = new ManualClock();
    const a = await lease(url, "a", clock);
    const b = await lease(url, "b", clock);
    await a.start();
    expect(a.isLeader).toBe(true);
    await b.start();
    expect(b.isLeader).toBe(false);
    let both = false;
    await advance(clock, 4 * L, 100, () => (both ||= a.isLeader && b.isLeader));
    expect([a.isLeader, b.isLeader, both]).toEqual([true, false, false]);
    await a.stop();
    await advance(clock, 1000);
    // The standby's read falls due within that second of the clock; under load its SQLite statement may still be
    // running when the last step ends, so give it real time to finish without moving the clock further.
    await waitFor("the standby to lead", () => b.isLeader, 5000);
    expect([a.isLeader, b.isLeader]).toEqual([false, true]);
  });

  it("a holder that stopped renewing is taken over once its lease lapses, not before", async () => {
    const url = await file();
    const clock = new ManualClock();
    const a = await lease(url, "a", clock);
    const b = await lease(url, "b", clock);
    await a.start();
    await b.start();
    await advance(clock, L / 2); // a renewal in between
    await a.stop({ release: false }); // still "running" in this process: as a stalled holder
    const store = await openStore(url);
    const until = (await store.leaseRow!.read())!.until;
    await store.close();
    let takenAt: number | undefined;
    await advance(clock, 2 * L, 50, () => {
      if (b.isLeader) takenAt ??= clock.now();
    });
    expect(takenAt).toBeDefined();
    expect(takenAt!).toBeGreaterThanOrEqual(until);
    expect(takenAt! - until).toBeLessThanOrEqual(1100);
  });

  it("takes a row at once from a daemon of this host that is gone, and waits for one on another host", async () => {
    const url = await file();
    const clock = new ManualClock();
    const gonePid = 2 ** 22 + 17;
    const pidNs = (() => {
      try {
        return readlinkSync("/proc/self/ns/pid");
      } catch {
        return undefined;
      }
    })();
    for (const [host, leadsAtOnce] of [
      [hostname(), true],
      ["another-host", false],
    ] as const) {
      const store = await openStore(url);
      const until = clock.now() + L;
      const row = { holder: `${host}:${gonePid}:x`, host, pid: gonePid, ...(pidNs ? { pidNs } : {}), until };
      expect(await store.leaseRow!.claim(row)).toBe(true);
      await store.close();
      const l = await lease(url, `c-${host}`, clock);
      await l.start();
      expect(l.isLeader).toBe(leadsAtOnce);
      if (!leadsAtOnce) {
        await advance(clock, L - 100);
        expect(l.isLeader).toBe(false);
        await advance(clock, 1200);
        await waitFor("the lapsed row to be taken", () => l.isLeader, 5000); // the clock stands still meanwhile
        expect(l.isLeader).toBe(true);
      }
      await l.stop();
    }
  });
});

describe("LeaderLease on one SQLite file when the host's wall clock steps (its monotonic clock does not)", () => {
  // The row's `until` is the holder's wall clock; a standby judged it by its own, so an NTP step (a resumed VM) gave
  // two leaders (forward) or none for as long as the step (back). Now a standby claims a row only once it saw it
  // unchanged for a whole lease of its own monotonic time. Both stores share one steppable clock: one host.
  const cleanups: (() => Promise<unknown>)[] = [];
  afterEach(async () => {
    for (const c of cleanups.splice(0).reverse()) await c().catch(() => {});
  });

  async function pair(L: number) {
    const dir = mkdtempSync(join(tmpdir(), "cb-lease-step-"));
    cleanups.push(async () => rmSync(dir, { recursive: true, force: true }));
    const url = `sqlite://${join(dir, "store.sqlite")}`;
    const host = { offset: 0 };
    const clock: Clock = { ...systemClock, now: () => Date.now() + host.offset };
    const mk = async (id: string) => {
      const store = await openStore(url);
      const l = new LeaderLease({ store, holderId: id, leaseMs: L, clock });
      cleanups.push(async () => {
        await l.stop();
        await store.close();
      });
      return l;
    };
    const a = await mk("a");
    const b = await mk("b");
    await a.start();
    await b.start();
    expect([a.isLeader, b.isLeader]).toEqual([true, false]);
    return { a, b, host };
  }

  it("a forward step makes no second leader", async () => {
    // Renewals every 3 s; the standby reads the row every second, so it reads it between the step and the next one.
    const L = 9000;
    const { a, b, host } = await pair(L);
    await new Promise((r) => setTimeout(r, 300));
    host.offset = 2 * L;
    let both = 0;
    const start = performance.now();
    while (performance.now() - start < 3000) {
      if (a.isLeader && b.isLeader) both++;
      await new Promise((r) => setTimeout(r, 10));
    }
    expect(both, "samples at which both counted themselves leader").toBe(0);
    expect(a.isLeader).toBe(true);
  });

  it("a backward step does not keep the standby from taking over a stalled holder within about a lease", async () => {
    const L = 2000;
    const { a, b, host } = await pair(L);
    await a.stop({ release: false }); // stalled: renews no more, its process still there
    host.offset = -60_000;
    await waitFor("the standby to lead", () => b.isLeader, 2 * L);
  });
});

describe.skipIf(!redisTestsEnabled("lease"))("LeaderLease on Redis", () => {
  const redis = useRedisServer();
  let key: string;
  let n = 0;
  let timeline: Change[];
  const cleanups: (() => Promise<void>)[] = [];

  beforeEach(() => {
    key = `test:leader:${++n}`;
    timeline = [];
  });
  afterEach(async () => {
    for (const cleanup of cleanups.splice(0).reverse()) await cleanup().catch(() => {});
  });

  interface Replica {
    name: string;
    store: Store;
    lease: LeaderLease;
    proxy?: FreezableProxy;
  }

  async function replica(
    name: string,
    options: { leaseMs?: number; viaProxy?: boolean; clock?: Clock } = {},
  ): Promise<Replica> {
    const proxy = options.viaProxy ? await startProxy(redis().port) : undefined;
    const store = await openStore(proxy?.url ?? redis().url);
    const lease = new LeaderLease({
      store,
      key,
      holderId: name,
      leaseMs: options.leaseMs ?? 900,
      ...(options.clock ? { clock: options.clock } : {}),
      onChange: (leader) => timeline.push({ t: performance.now(), name, leader }),
    });
    cleanups.push(async () => {
      proxy?.thaw();
      await lease.stop();
      await store.close();
      await proxy?.close();
    });
    return { name, store, lease, ...(proxy ? { proxy } : {}) };
  }

  async function holder(): Promise<string | null> {
    const store = await openStore(redis().url);
    try {
      return await store.redis!.get(key);
    } finally {
      await store.close();
    }
  }

  function changeOf(name: string, leader: boolean): Change {
    const c = timeline.find((x) => x.name === name && x.leader === leader);
    if (!c) throw new Error(`${name} never changed to ${leader}`);
    return c;
  }

  it("elects exactly one of two replicas and keeps it", async () => {
    const a = await replica("a");
    const b = await replica("b");
    await Promise.all([a.lease.start(), b.lease.start()]);
    // The winner of a fresh key holds it 2/3 of the lease before leading (Redis may have lost a leader's key).
    await waitFor("a leader", () => a.lease.isLeader || b.lease.isLeader, 1000);
    const leaders = [a, b].filter((r) => r.lease.isLeader);
    expect(leaders).toHaveLength(1);
    expect(await holder()).toBe(leaders[0]!.name);
    // Several renewal periods later nothing has changed.
    await new Promise((r) => setTimeout(r, 2000));
    expect([a, b].filter((r) => r.lease.isLeader).map((r) => r.name)).toEqual([leaders[0]!.name]);
    expect(timeline).toHaveLength(1);
  });

  it("lets the standby take over within the lease when the leader's client stops", async () => {
    const a = await replica("a");
    await a.lease.start();
    await waitFor("a to lead", () => a.lease.isLeader, 1000);
    const b = await replica("b");
    await b.lease.start();
    expect([a.lease.isLeader, b.lease.isLeader]).toEqual([true, false]);
    const t0 = performance.now();
    await a.store.close();
    await waitFor("b to lead", () => b.lease.isLeader, 3000);
    const lost = changeOf("a", false).t - t0;
    const gained = changeOf("b", true).t - t0;
    expect(lost).toBeLessThanOrEqual(600 + 150); // given up at 2/3 of the lease without a renewal
    expect(gained).toBeLessThanOrEqual(900 + 600 + 250); // the key lapses within one lease, then is held 2/3 of it
    expect(lost).toBeLessThan(gained);
    expect(a.lease.isLeader).toBe(false);
  });

  it("gives leadership up before the lease expires when Redis stops answering", async () => {
    const a = await replica("a", { viaProxy: true });
    await a.lease.start();
    await waitFor("a to lead", () => a.lease.isLeader, 1000);
    const b = await replica("b");
    await b.lease.start();
    expect(a.lease.isLeader).toBe(true);
    const t0 = performance.now();
    a.proxy!.freeze();
    await waitFor("b to lead", () => b.lease.isLeader, 3000);
    const lost = changeOf("a", false).t;
    const gained = changeOf("b", true).t;
    expect(lost - t0).toBeLessThanOrEqual(600 + 150);
    expect(gained - t0).toBeLessThanOrEqual(900 + 600 + 250);
    // At least 1/3 of the lease lies between the old leader stopping and the new one starting.
    expect(gained - lost).toBeGreaterThan(100);
    a.proxy!.thaw();
    await new Promise((r) => setTimeout(r, 1200));
    expect([a.lease.isLeader, b.lease.isLeader]).toEqual([false, true]);
    expect(await holder()).toBe("b");
    expectNoOverlap(timeline);
  });

  it("gives leadership up in time when its wall clock is stepped back while Redis is out of its reach", async () => {
    // NTP steps the wall clock (a resumed VM, chrony's makestep); the lease's own limits must not move with it. They
    // were wall-clock instants: a minute's step back kept the cut-off leader leading a minute beside the next one.
    let offset = 0;
    const stepped: Clock = { ...systemClock, now: () => Date.now() + offset };
    const a = await replica("a", { viaProxy: true, clock: stepped });
    await a.lease.start();
    await waitFor("a to lead", () => a.lease.isLeader, 3000);
    const b = await replica("b");
    await b.lease.start();
    a.proxy!.freeze();
    offset = -60_000;
    await waitFor("b to lead", () => b.lease.isLeader, 5000);
    expect([a.lease.isLeader, b.lease.isLeader]).toEqual([false, true]);
    expectNoOverlap(timeline);
  });

  it("hands over at once when the leader releases on stop", async () => {
    // A 3 s lease: polling alone would take up to a second; the release notice makes it near-instant.
    const a = await replica("a", { leaseMs: 3000 });
    await a.lease.start();
    await waitFor("a to lead", () => a.lease.isLeader, 2500);
    const b = await replica("b", { leaseMs: 3000 });
    await b.lease.start();
    await new Promise((r) => setTimeout(r, 100));
    const t0 = performance.now();
    await a.lease.stop();
    const took = await waitFor("b to lead", () => b.lease.isLeader, 3000);
    expect(performance.now() - t0).toBeLessThan(250);
    expect(took).toBeLessThan(250);
    expect(await holder()).toBe("b");
    expectNoOverlap(timeline);
  });

  it("never has two leaders across a sequence of handovers", async () => {
    const replicas: Replica[] = [];
    let seq = 0;
    const add = async () => {
      const r = await replica(`r${++seq}`, { leaseMs: 600, viaProxy: true });
      replicas.push(r);
      await r.lease.start();
    };
    for (let i = 0; i < 3; i++) await add();
    let maxLeaders = 0;
    const sampler = setInterval(() => {
      maxLeaders = Math.max(maxLeaders, replicas.filter((r) => r.lease.isLeader).length);
    }, 1);
    try {
      const ways = ["stop", "freeze", "close", "stop", "freeze", "close"] as const;
      for (const way of ways) {
        // Under load a leader may give up early (a slow renewal) and take the lease back a moment later.
        await waitFor("a leader before the handover", () => replicas.some((r) => r.lease.isLeader), 3000);
        const leader = replicas.find((r) => r.lease.isLeader);
        if (way === "stop") await leader!.lease.stop();
        else if (way === "freeze") leader!.proxy!.freeze();
        else await leader!.store.close();
        await waitFor(`a successor after ${way}`, () => replicas.some((r) => r !== leader && r.lease.isLeader), 3000);
        // Retire the old leader for good and bring a fresh replica in.
        replicas.splice(replicas.indexOf(leader!), 1);
        leader!.proxy?.thaw();
        await leader!.lease.stop();
        await add();
      }
      await new Promise((r) => setTimeout(r, 1000));
      expect(replicas.filter((r) => r.lease.isLeader)).toHaveLength(1);
    } finally {
      clearInterval(sampler);
    }
    expect(maxLeaders).toBe(1);
    expectNoOverlap(timeline);
    expect(timeline.filter((c) => c.leader).length).toBeGreaterThanOrEqual(7);
  });
});
