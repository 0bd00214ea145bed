// Calendar work paced by Google's quotas, on the manual clock: a backfill far over one therapist's per-minute quota
// gets no usageLimits answer from the emulator (the requests wait before they are sent), and another therapist's
// appointments are written at once instead of after it.
import { afterEach, describe, expect, it } from "vitest";
import { ManualClock } from "../../src/clock.ts";
import { DAY, type Harness, harness } from "./support.ts";

let h: Harness | undefined;
afterEach(async () => {
  await h?.close();
  h = undefined;
});

/**
 * Advances the shared clock a second at a time (letting real I/O happen) until `done()`, or `maxMs` of the clock and
 * 20 s of real time passed (under load the clock runs on while a request is in flight: a clock bound alone ran out).
 */
async function drive(clock: ManualClock, done: () => boolean, maxMs: number): Promise<void> {
  const end = Date.now() + 20_000;
  for (let t = 0; (t < maxMs || Date.now() < end) && !done(); t += 1_000) {
    await clock.advance(1_000);
    await new Promise((r) => setTimeout(r, 3));
  }
}

describe("pacing by Google's quotas", () => {
  it("one therapist's backfill over their quota meets no usageLimits answer and does not hold up another therapist", async () => {
    const clock = new ManualClock(Date.now());
    h = await harness({
      therapists: 2,
      clock,
      google: { limits: { perUserPerMinute: 10, perProjectPerMinute: 1_000 } },
      configure: (c) => {
        c.google.quota = { user_per_minute: 10, project_per_minute: 1_000 };
      },
    });
    const day = clock.now() + 2 * DAY;
    // The busy therapist's appointments come first in the booking service's listing.
    for (let i = 0; i < 30; i++) {
      const start = new Date(day + i * 3_600_000).toISOString();
      h.world.booking.create({ therapist_id: "th_1", start_time: start }, { force: true });
    }
    for (let i = 0; i < 3; i++) {
      const start = new Date(day + 5 * DAY + i * 3_600_000).toISOString();
      h.world.booking.create({ therapist_id: "th_2", start_time: start }, { force: true });
    }
    const started = clock.now();
    let finished = false;
    const run = h.app.reconcile().finally(() => {
      finished = true;
    });
    await drive(clock, () => finished, 10 * 60_000);
    const report = await run;

    expect(report.ok).toBe(true);
    expect(h.live("th_1")).toHaveLength(30);
    expect(h.live("th_2")).toHaveLength(3);
    // th_2's events did not wait for th_1's: they were written while th_1 still spent its first minute's quota (30
    // inserts at 10 a minute take three windows).
    const inserts = h.world.google.requestLog.filter((r) => r.method === "POST" && r.path.endsWith("/events"));
    const th2Last = inserts.findLastIndex((r) => r.quotaUser === "th_2");
    const th1Tenth = inserts.filter((r) => r.quotaUser === "th_1")[9]!;
    expect(th2Last).toBeLessThan(inserts.indexOf(th1Tenth));
    expect(clock.now() - started).toBeGreaterThanOrEqual(2 * 60_000);
    const usage = h.world.google.usage;
    expect(usage.usageLimitAnswers).toBe(0);
    expect(usage.byUser.th_1).toBe(31); // one listing and 30 inserts, none sent twice
  });
});
