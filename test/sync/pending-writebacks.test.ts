// A write-back waiting out its grace period is in the shared store while it waits, so the next leader resumes it
// (app.ts resumeWritebacks), also when this replica noted the same appointment before and another replica resumed and
// ended that earlier wait (removing its record) meanwhile.
import { afterEach, describe, expect, it } from "vitest";
import { ManualClock } from "../../src/clock.ts";
import { openStore, type Store } from "../../src/store/store.ts";
import { PendingWritebacks } from "../../src/sync/pending-writebacks.ts";
import { useRedisServer } from "../support/redis.ts";

describe("pending write-backs across leader changes", () => {
  const redis = useRedisServer();
  const stores: Store[] = [];
  afterEach(async () => {
    for (const s of stores.splice(0)) await s.close().catch(() => {});
  });

  it("a replica leading again records its new grace wait in the store", async () => {
    const clock = new ManualClock();
    const storeA = await openStore(redis().url);
    const storeB = await openStore(redis().url);
    stores.push(storeA, storeB);
    const a = new PendingWritebacks(storeA, clock); // replica A's sync core
    const b = new PendingWritebacks(storeB, clock); // replica B's sync core

    // Term 1, A leads: the therapist moves the event; the write-back waits its grace period. A loses the lease
    // (engine.abandon: the wait stays in the store for the next leader).
    await a.note("appt_1", "th_a");
    // B leads: resumeWritebacks finds it, syncs it, the write-back is sent -> gate.done() clears it.
    expect(await b.all()).toEqual([{ appointmentId: "appt_1", therapistId: "th_a" }]);
    await b.clear("appt_1");
    expect(await b.all()).toEqual([]);

    // Later A leads again; the therapist now deletes that event: a new grace wait for the same appointment.
    await a.note("appt_1", "th_a");
    // A stops (or loses the lease) during the wait: the next leader must find it.
    expect(await b.all()).toEqual([{ appointmentId: "appt_1", therapistId: "th_a" }]);
  });
});
