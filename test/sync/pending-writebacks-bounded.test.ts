// A daemon that runs for weeks keeps in memory only the write-back waits whose store record can still be there: a wait
// that never ends in this process (held by the guard after its grace period and decided with `calbridge writeback
// held`, failed for good, or left to the next leader) was remembered for the process's whole life, one appointment id
// per such write-back. The real gate, guard and pending record on a store, days of held write-backs on a clock.
import { describe, expect, it } from "vitest";
import { ManualClock } from "../../src/clock.ts";
import { ConfigSchema } from "../../src/config/schema.ts";
import { silentLogger } from "../../src/log.ts";
import { openStore } from "../../src/store/store.ts";
import { Mapping } from "../../src/sync/mapping.ts";
import { PendingWritebacks } from "../../src/sync/pending-writebacks.ts";
import { Planner } from "../../src/sync/planner.ts";
import type { Action } from "../../src/sync/types.ts";
import { WritebackGate } from "../../src/sync/writeback-gate.ts";
import { type HeldWriteback, WritebackGuard } from "../../src/sync/writeback-guard.ts";

const DAY = 86_400_000;
const PER_DAY = 30;
const DAYS = 60;

const config = ConfigSchema.parse({
  booking: { base_url: "https://booking.example", api_key: "key-1" },
  webhooks: { signing_secrets: ["whsec_1"] },
  google: { auth: { type: "service_account", key_file: "/sa.json" } },
  therapists: [{ therapist_id: "th_anna", calendar_id: "anna@clinic.example" }],
});

describe("write-back waits kept in memory", () => {
  it("are bounded by their record's lifetime when their end never comes here, and still end the record when it does", async () => {
    const store = await openStore("memory://");
    const clock = new ManualClock(Date.parse("2026-11-23T08:00:00Z"));
    const mapping = new Mapping(config, new Map());
    const holds = store.table<HeldWriteback>("holds");
    // Every write-back is held once its grace period is over (a guard with no allowance).
    const guard = new WritebackGuard({
      holds,
      limits: { windowMs: 600_000, maxRatio: 0, floor: 0 },
      managedCount: () => 10,
      clock,
      logger: silentLogger,
    });
    const pending = new PendingWritebacks(store, clock);
    const gate = new WritebackGate({ guard, mapping, planner: new Planner(mapping), clock, pending });
    const input = () => ({ known: null, link: undefined, event: undefined, override: undefined, state: {} });
    const cancel = (id: string): Action => ({
      kind: "writeback_cancel",
      appointmentId: id,
      therapistId: "th_anna",
      reason: "x",
    });

    let n = 0;
    let largest = 0;
    for (let day = 0; day < DAYS; day++) {
      for (let i = 0; i < PER_DAY; i++) {
        const id = `apt_${++n}`;
        const state = input();
        await expect(gate.pass(cancel(id), state)).rejects.toMatchObject({ why: "grace" });
        await clock.advance(61_000);
        await expect(gate.pass(cancel(id), state)).rejects.toMatchObject({ why: "held" });
        // An administrator decides it from another process: this one's engine never ends the wait.
        await holds.delete(id);
      }
      largest = Math.max(largest, pending.size);
      await clock.advance(DAY - PER_DAY * 61_000);
    }
    expect(n).toBe(DAYS * PER_DAY);
    // Waits within a record's lifetime (14 days) and the day's sweep: never the 1,800 of the whole run.
    expect(largest).toBeLessThanOrEqual(16 * PER_DAY);

    // A wait whose end does come here, days later, still removes its record from the store.
    const id = "apt_last";
    const state = input();
    await expect(gate.pass(cancel(id), state)).rejects.toMatchObject({ why: "grace" });
    await clock.advance(3 * DAY);
    expect(await pending.has(id)).toBe(true);
    await gate.done({ kind: "none", appointmentId: id, reason: "the event came back" }, undefined);
    expect(await pending.has(id)).toBe(false);
    await store.close();
  });
});
