// Redis losing the lease key (restart without persistence, FLUSHALL, failover to a replica that lacked it) must not
// give two leaders: the old one leads until its next renewal, so the standby that wins the fresh key waits 2L/3.
import { performance } from "node:perf_hooks";
import { afterEach, describe, expect, it } from "vitest";
import { LeaderLease } from "../../src/store/lease.ts";
import { openStore } from "../../src/store/store.ts";
import { redisTestsEnabled, useRedisServer } from "../support/redis.ts";

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

describe.skipIf(!redisTestsEnabled("lease"))("LeaderLease when Redis loses the key", () => {
  const redis = useRedisServer();
  const cleanups: (() => Promise<void>)[] = [];
  afterEach(async () => {
    for (const c of cleanups.splice(0).reverse()) await c().catch(() => {});
  });

  it("never has two leaders after a FLUSHALL, and a standby still takes over", async () => {
    const leases: LeaderLease[] = [];
    for (const name of ["a", "b"]) {
      const store = await openStore(redis().url);
      const lease = new LeaderLease({ store, key: "test:leader:flush", holderId: name, leaseMs: 900 });
      cleanups.push(async () => {
        await lease.stop();
        await store.close();
      });
      await lease.start();
      leases.push(lease);
    }
    const [a, b] = leases as [LeaderLease, LeaderLease];
    const admin = await openStore(redis().url);
    cleanups.push(() => admin.close());
    let overlapMs = 0;
    for (let trial = 0; trial < 4; trial++) {
      await sleep(97 * trial); // a different phase against the renewals each time
      await admin.redis!.flushAll();
      const until = performance.now() + 1500;
      let since: number | undefined;
      while (performance.now() < until) {
        const both = a.isLeader && b.isLeader;
        if (both) since ??= performance.now();
        else if (since !== undefined) overlapMs = Math.max(overlapMs, performance.now() - since);
        if (!both) since = undefined;
        await sleep(2);
      }
      expect(
        [a, b].filter((l) => l.isLeader),
        "one leader again after the flush",
      ).toHaveLength(1);
    }
    expect(Math.round(overlapMs)).toBe(0);
  });
});
