// A therapist removed from the mapping by a reload and mapped again before their deletions' grace periods end (an
// administrator's mistake put right within the minute): the bulk deletion still counts as a whole and is held. The
// reload used to forget the guard's intents of every removed therapist, deletions in their grace period among them:
// each wait then counted only itself, and the first `floor` cancellations reached the booking service (customers told).
// What a removed therapist leaves in the guard is what one window holds: gone at the first reload after it (and the
// grace period).
import { afterEach, expect, it } from "vitest";
import { eventIdFor } from "../../src/calendar/ids.ts";
import { ManualClock } from "../../src/clock.ts";
import { cancels, daemonHarness, type Harness, mirroredMany, pass, pollAll, quiet } from "./support.ts";

let h: Harness | undefined;
afterEach(async () => {
  await h?.close();
  h = undefined;
});

for (const reload of [false, true]) {
  it(`bulk deletion of 10 events${reload ? ", th_1 removed and mapped again during the grace period" : ""}: nothing cancelled, all held`, async () => {
    const clock = new ManualClock(Date.now());
    const x = await daemonHarness({ therapists: 2, clock });
    h = x;
    const original = structuredClone(x.world.config);
    const ids = await mirroredMany(x, clock, 10);
    const cal = x.world.calendarOf("th_1");
    for (const id of ids) x.world.google.userDelete(cal, eventIdFor(id));
    await pollAll(x);
    await pass(x, clock, 5_000);
    if (reload) {
      const unmapped = structuredClone(original);
      unmapped.therapists = unmapped.therapists.filter((t) => t.therapist_id !== "th_1");
      await x.app.reload(unmapped);
      await x.app.reload(structuredClone(original));
      await quiet(x);
    }
    await pass(x, clock, 120_000);
    const held = (await x.app.sync.guard.held("th_1")).length;
    expect({ cancels: cancels(x), held }).toEqual({ cancels: 0, held: 10 });
  }, 60_000);
}

it("a removed therapist's write-backs wanted lately are forgotten at the first reload after the window", async () => {
  const clock = new ManualClock(Date.now());
  const x = await daemonHarness({ therapists: 2, clock });
  h = x;
  const original = structuredClone(x.world.config);
  const ids = await mirroredMany(x, clock, 2);
  const cal = x.world.calendarOf("th_1");
  for (const id of ids) x.world.google.userDelete(cal, eventIdFor(id));
  await pollAll(x);
  await pass(x, clock, 5_000);
  // Both deletions wait out their grace period (60 s): wanted, not sent.
  expect({ cancels: cancels(x), kept: x.app.sync.guard.intentsKept }).toEqual({ cancels: 0, kept: 1 });
  const unmapped = structuredClone(original);
  unmapped.therapists = unmapped.therapists.filter((t) => t.therapist_id !== "th_1");
  await x.app.reload(unmapped);
  expect(x.app.sync.guard.intentsKept).toBe(1); // within the window: kept, should th_1 come back
  // Intents count for the window and the longest grace period (the cancellation's 60 s here; see guard-horizon).
  clock.set(clock.now() + original.sync.writeback_guard.window_minutes * 60_000 + 60_000 + 1);
  await x.app.reload(structuredClone(unmapped));
  expect(x.app.sync.guard.intentsKept).toBe(0);
}, 60_000);
