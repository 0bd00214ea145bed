// The write-back gate's last words before a write-back is sent: an administrator's "no" (`calbridge writeback held
// --restore`) is never sent, also when there is no event to put back (the therapist's mapping changed since); and a
// replica that no longer holds the leader lease sends nothing, leaving the write-back in the store for the next leader.
import { describe, expect, it } from "vitest";
import { ManualClock } from "../../src/clock.ts";
import { ConfigSchema } from "../../src/config/schema.ts";
import { silentLogger } from "../../src/log.ts";
import { openStore } from "../../src/store/store.ts";
import { Mapping } from "../../src/sync/mapping.ts";
import { PendingWritebacks } from "../../src/sync/pending-writebacks.ts";
import { Planner } from "../../src/sync/planner.ts";
import type { Action, Link } from "../../src/sync/types.ts";
import { NotLeadingError, WritebackGate } from "../../src/sync/writeback-gate.ts";
import { type HeldWriteback, WritebackGuard } from "../../src/sync/writeback-guard.ts";

const config = ConfigSchema.parse({
  booking: { base_url: "https://booking.example", api_key: "key-1" },
  webhooks: { signing_secrets: ["whsec_1"] },
  google: { auth: { type: "service_account", key_file: "/sa.json" } },
  therapists: [{ therapist_id: "th_anna", calendar_id: "anna@clinic.example" }],
});

/** The gate's collaborators, real, on a store in memory. */
async function parts() {
  const store = await openStore("memory://");
  const clock = new ManualClock(Date.parse("2026-11-23T08:00:00Z"));
  const mapping = new Mapping(config, new Map());
  const guard = new WritebackGuard({
    holds: store.table<HeldWriteback>("holds"),
    limits: { windowMs: 600_000, maxRatio: 0.2, floor: 3 },
    managedCount: () => 10,
    clock,
    logger: silentLogger,
  });
  return { store, clock, mapping, guard };
}

describe("an administrator's restore", () => {
  it("never sends the write-back, also when there is no event to put back", async () => {
    const { store, clock, mapping, guard } = await parts();
    const gate = new WritebackGate({ guard, mapping, planner: new Planner(mapping), clock });
    const start = "2026-11-25T09:00:00Z";
    const appt = { id: "apt_1", therapist_id: "th_ben", status: "confirmed", start_time: start, end_time: start };
    // Ben's event, held; Ben is no longer in the mapping, so no event of his can be rendered to put back.
    const link = { appointmentId: "apt_1", therapistId: "th_ben", eventId: "e1", present: true } as unknown as Link;
    const cancel: Action = { kind: "writeback_cancel", appointmentId: "apt_1", therapistId: "th_ben", reason: "x" };
    const passed = await gate.pass(cancel, {
      known: { appt, full: true } as never,
      link,
      event: undefined,
      override: "restore",
      state: {},
    });
    expect(passed.kind).toBe("none");
    await store.close();
  });
});

describe("a replica that no longer leads", () => {
  it("sends no write-back, and leaves it in the store for the next leader", async () => {
    const { store, clock, mapping, guard } = await parts();
    const pending = new PendingWritebacks(store, clock);
    let leads = true;
    const gate = new WritebackGate({
      guard,
      mapping,
      planner: new Planner(mapping),
      clock,
      pending,
      leading: () => leads,
    });
    const cancel: Action = { kind: "writeback_cancel", appointmentId: "apt_2", therapistId: "th_anna", reason: "x" };
    const input = { known: null, link: undefined, event: undefined, override: undefined, state: {} };
    // The default grace period (60 s) is waited out first.
    await expect(gate.pass(cancel, input)).rejects.toMatchObject({ why: "grace" });
    await clock.advance(61_000);
    leads = false; // the lease ran out while the write-back waited
    await expect(gate.pass(cancel, input)).rejects.toBeInstanceOf(NotLeadingError);
    expect(await new PendingWritebacks(store, clock).all()).toEqual([
      { appointmentId: "apt_2", therapistId: "th_anna" },
    ]);
    leads = true;
    expect((await gate.pass(cancel, input)).kind).toBe("writeback_cancel");
    await store.close();
  });
});
