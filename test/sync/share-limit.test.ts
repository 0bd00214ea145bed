// Tests the guards' share limits where the share of the events is a whole number: "more than the share" is held, so
// exactly the share passes. Math.floor(ratio × count) fell one short wherever the binary product does (0.7 × 90 is
// 62.99999999999999): the write-back guard held the 63rd of 90 calendar changes at max_ratio 0.7, and a
// reconciliation removing 29 of 50 events at max_delete_ratio 0.58 tripped the mass-deletion guard, and so did
// `calbridge purge` of a therapist with 29 of calbridge's 50 events.
import { afterEach, expect, it } from "vitest";
import { runPurge } from "../../src/cli/purge.ts";
import { ManualClock } from "../../src/clock.ts";
import { silentLogger } from "../../src/log.ts";
import { openStore } from "../../src/store/store.ts";
import { type HeldWriteback, WritebackGuard } from "../../src/sync/writeback-guard.ts";
import { DAY, type Harness, harness } from "./support.ts";

let h: Harness | undefined;
afterEach(async () => {
  await h?.close();
  h = undefined;
});

it.each([
  [0.7, 90, 63],
  [0.58, 50, 29],
  [0.29, 100, 29],
  [0.2, 10, 3], // the floor
])(
  "the write-back guard at max_ratio %s of %s managed events sends %s write-backs, and holds one more",
  async (ratio, managed, allowed) => {
    const store = await openStore("memory://");
    const guard = new WritebackGuard({
      holds: store.table<HeldWriteback>("holds"),
      limits: { windowMs: 3_600_000, maxRatio: ratio, floor: 3 },
      managedCount: () => managed,
      clock: new ManualClock(Date.parse("2026-11-23T08:00:00Z")),
      logger: silentLogger,
    });
    expect(guard.limit("th_1")).toBe(allowed);
    for (let i = 0; i < allowed - 1; i++) guard.note("th_1", `apt_${i}`);
    expect(await guard.admit({ appointmentId: `apt_${allowed - 1}`, therapistId: "th_1", kind: "cancel" })).toBe(
      "send",
    );
    expect(await guard.admit({ appointmentId: `apt_${allowed}`, therapistId: "th_1", kind: "cancel" })).toBe("held");
    expect((await guard.held("th_1")).map((w) => w.reason)).toEqual([
      `${allowed + 1} calendar changes of th_1 would be written back within 60 min (limit ${allowed})`,
    ]);
    await store.close();
  },
);

it("a reconciliation removing exactly max_delete_ratio of the managed events is not held by the mass-deletion guard", async () => {
  h = await harness({
    therapists: 1,
    configure: (c) => {
      c.sync = { ...c.sync, max_delete_ratio: 0.58 };
    },
  });
  const x = h;
  const ids: string[] = [];
  for (let i = 0; i < 50; i++) {
    const s = new Date(Date.now() + (2 + (i % 25)) * DAY);
    s.setUTCHours(9 + Math.floor(i / 25) * 2, 0, 0, 0);
    ids.push(String(x.world.booking.create({ therapist_id: "th_1", start_time: s.toISOString() }, { force: true }).id));
  }
  await x.app.reconcile();
  expect(x.live("th_1")).toHaveLength(50);
  for (const id of ids.slice(0, 29)) x.world.booking.cancel(id);
  const run = await x.app.reconcile();
  expect(run.guard).toMatchObject({ tripped: false, destructive: 29, managed: 50, limit: 29 });
  expect(x.live("th_1")).toHaveLength(21);
});

it("a purge of exactly max_delete_ratio of calbridge's events is not held by the mass-deletion guard; one more is", async () => {
  h = await harness({
    therapists: 2,
    configure: (c) => {
      c.sync = { ...c.sync, max_delete_ratio: 0.58 };
    },
  });
  const x = h;
  // th_1 29 events, th_2 21: 50 in all.
  for (let i = 0; i < 50; i++) {
    const s = new Date(Date.now() + (2 + (i % 25)) * DAY);
    s.setUTCHours(9 + Math.floor(i / 25) * 2, 0, 0, 0);
    const therapist_id = i < 29 ? "th_1" : "th_2";
    x.world.booking.create({ therapist_id, start_time: s.toISOString() }, { force: true });
  }
  await x.app.reconcile();
  const dry = (therapist: string) => runPurge(x.world.config, { therapist, dryRun: true }, silentLogger);
  const exactly = await dry("th_1");
  expect(exactly.text).toContain("29 calbridge events to delete");
  expect(exactly.text).not.toContain("mass-deletion guard");
  x.world.booking.create(
    { therapist_id: "th_1", start_time: new Date(Date.now() + 30 * DAY).toISOString() },
    { force: true },
  );
  await x.app.reconcile();
  // 30 of 51 is more than 0.58 of them (29.58).
  expect((await dry("th_1")).text).toContain(
    "mass-deletion guard: 30 events are more than sync.max_delete_ratio of calbridge's 51 events (limit 29)",
  );
});
