// Tests the leader lease against a real redis-server: one leader, takeover on lapse, handover on release, no split brain.
import { performance } from "node:perf_hooks";
import { afterEach, beforeEach, describe, expect, it } from "vitest";
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

describe("LeaderLease on a single-replica store", () => {
  it("is always leader on memory and sqlite stores", async () => {
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

  async function replica(name: string, options: { leaseMs?: number; viaProxy?: boolean } = {}): Promise<Replica> {
    const proxy = options.viaProxy ? await startProxy(redis().port) : undefined;
    const store = await openStore(proxy?.url ?? redis().url);
    const lease = new LeaderLease({
      store,
      key,
      holderId: name,
      leaseMs: options.leaseMs ?? 900,
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
