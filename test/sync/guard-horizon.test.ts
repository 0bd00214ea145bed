// The write-back guard counts a therapist's write-backs over a sliding window, each from when it was first wanted (the
// deletion seen, before its grace period). Two ways an intent dropped out of its own count, letting the first `floor`
// (3) of a bulk deletion of 10 through to the booking service (customers told) where all 10 are held:
// - a grace period longer than the window (cancel_grace_seconds 7200, window_minutes 60, both within the schema's
//   bounds): when the waits ended, every intent was older than the window, the admitted one among them;
// - a therapist removed while the deletions waited and mapped again after the window (81273f8 keeps a removed
//   therapist's intents within the window, and the reload mapping them again does not prune): the deletions decided
//   again kept their stale times.
// Intents now count for the window plus the longest grace period, and one past that counts afresh when wanted again.
import { afterEach, expect, it } from "vitest";
import { eventIdFor } from "../../src/calendar/ids.ts";
import { ManualClock } from "../../src/clock.ts";
import { cancels, daemonHarness, type Harness, mirroredMany, pass, pollAll, quiet } from "./support.ts";

let h: Harness | undefined;
afterEach(async () => {
  await h?.close();
  h = undefined;
});

for (const grace of [60, 7200]) {
  it(`bulk deletion of 10 events, cancel grace ${grace} s, window 60 min: nothing cancelled, all held`, async () => {
    const clock = new ManualClock(Date.now());
    const x = await daemonHarness({
      therapists: 2,
      clock,
      configure: (c) => {
        c.sync = { ...c.sync, writeback: { ...c.sync?.writeback, cancel_grace_seconds: grace } };
      },
    });
    h = x;
    const ids = await mirroredMany(x, clock, 10);
    const cal = x.world.calendarOf("th_1");
    for (const id of ids) x.world.google.userDelete(cal, eventIdFor(id));
    await pollAll(x);
    await pass(x, clock, (grace + 120) * 1000, 60_000);
    const held = (await x.app.sync.guard.held("th_1")).length;
    expect({ cancels: cancels(x), held }).toEqual({ cancels: 0, held: 10 });
  }, 120_000);
}

for (const extraReload of [true, false]) {
  it(`bulk deletion of 10, th_1 removed during grace, mapped again after the window${extraReload ? " (a reload between, control)" : ""}: nothing cancelled, all held`, async () => {
    const clock = new ManualClock(Date.now());
    const x = await daemonHarness({
      therapists: 2,
      clock,
      configure: (c) => {
        c.sync = { ...c.sync, max_delete_ratio: 1 };
      },
    });
    h = x;
    const original = structuredClone(x.world.config);
    const ids = (await mirroredMany(x, clock, 20)).slice(0, 10); // 10 of 20 deleted: within max_delete_ratio 1
    const cal = x.world.calendarOf("th_1");
    for (const id of ids) x.world.google.userDelete(cal, eventIdFor(id));
    await pollAll(x);
    await pass(x, clock, 5_000);
    expect({ cancels: cancels(x), kept: x.app.sync.guard.intentsKept }).toEqual({ cancels: 0, kept: 1 });
    const unmapped = structuredClone(original);
    unmapped.therapists = unmapped.therapists.filter((t) => t.therapist_id !== "th_1");
    await x.app.reload(unmapped);
    await quiet(x);
    await pass(x, clock, 120_000); // the waits end while th_1 is not mapped: nothing sent, nothing settled
    expect(cancels(x)).toBe(0);
    clock.set(clock.now() + original.sync.writeback_guard.window_minutes * 60_000 + 60_000);
    if (extraReload) await x.app.reload(structuredClone(unmapped));
    await x.app.reload(structuredClone(original));
    await quiet(x);
    await x.app.reconcile();
    await quiet(x);
    await pass(x, clock, 120_000);
    const held = (await x.app.sync.guard.held("th_1")).length;
    expect({ cancels: cancels(x), held }).toEqual({ cancels: 0, held: 10 });
  }, 120_000);
}
