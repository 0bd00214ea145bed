// Tests the write-back guard's horizon for a therapist who may hand appointments over but not cancel from the
// calendar (writeback.cancel off, writeback.reassign on). A move to a colleague's calendar is seen as a deletion
// first (decide.ts: `cancel || reassign`) and waits cancel_grace_seconds; the guard counted that grace only with
// cancel on, so with a grace longer than the window (7200 s, 60 min) every intent of a bulk move had dropped out when
// the waits ended, and the first 3 of 10 were reassigned at the booking service (customers told) where all 10 are held.
import { afterEach, expect, it } from "vitest";
import { eventIdFor } from "../../src/calendar/ids.ts";
import { ManualClock } from "../../src/clock.ts";
import { daemonHarness, type Harness, mirroredMany, pass, pollAll } from "./support.ts";

let h: Harness | undefined;
afterEach(async () => {
  await h?.close();
  h = undefined;
});

for (const cancel of [true, false]) {
  it(`bulk move of 10 events to a colleague's calendar, reassign on, cancel ${cancel ? "on" : "off"}, cancel grace 7200 s: all held`, async () => {
    const clock = new ManualClock(Date.now());
    const x = await daemonHarness({
      therapists: 2,
      clock,
      configure: (c) => {
        c.sync = { ...c.sync, writeback: { ...c.sync?.writeback, cancel, reassign: true, cancel_grace_seconds: 7200 } };
      },
    });
    h = x;
    const ids = await mirroredMany(x, clock, 10);
    const cal = x.world.calendarOf("th_1");
    const to = x.world.calendarOf("th_2");
    for (const id of ids) x.world.google.userMove(cal, eventIdFor(id), to);
    await pollAll(x);
    await pass(x, clock, 300_000, 60_000);
    const reassigned = () => ids.filter((id) => x.world.booking.get(id)?.therapist_id === "th_2").length;
    expect(reassigned()).toBe(0);
    await pass(x, clock, 7200_000, 60_000);
    const held = (await x.app.sync.guard.held("th_1")).length;
    expect({ reassigned: reassigned(), held }).toEqual({ reassigned: 0, held: 10 });
  }, 180_000);
}
