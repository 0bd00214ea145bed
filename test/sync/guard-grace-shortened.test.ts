// A therapist's cancel grace (7200 s, longer than the 60 min window) is shortened by a reload while a bulk deletion of
// 10 waits. The waits end when they were due (t0 + 7200 s); counted by the NEW horizon (window + 60 s), every intent
// from t0 had dropped out and each admission counted only itself: the first 3 cancelled. An intent counts for the
// longer of its horizon when noted and the therapist's now.
import { afterEach, expect, it } from "vitest";
import { eventIdFor } from "../../src/calendar/ids.ts";
import { ManualClock } from "../../src/clock.ts";
import { cancels, daemonHarness, type Harness, mirroredMany, pass, pollAll } from "./support.ts";

let h: Harness | undefined;
afterEach(async () => {
  await h?.close();
  h = undefined;
});

for (const otherKeepsLong of [true, false]) {
  it(`bulk deletion of 10, th_1's cancel grace 7200 s shortened to 60 s by a reload mid-wait${otherKeepsLong ? " (th_2 keeps 7200 s)" : ""}: all held`, async () => {
    const clock = new ManualClock(Date.now());
    const x = await daemonHarness({
      therapists: 2,
      clock,
      configure: (c) => {
        c.therapists = c.therapists.map((t) => ({ ...t, writeback: { cancel_grace_seconds: 7200 } }));
      },
    });
    h = x;
    const ids = await mirroredMany(x, clock, 10);
    const cal = x.world.calendarOf("th_1");
    for (const id of ids) x.world.google.userDelete(cal, eventIdFor(id));
    await pollAll(x);
    await pass(x, clock, 300_000, 60_000);
    expect(cancels(x)).toBe(0);
    const next = structuredClone(x.world.config);
    next.therapists = next.therapists.map((t) =>
      t.therapist_id === "th_1" || !otherKeepsLong ? { ...t, writeback: { cancel_grace_seconds: 60 } } : t,
    );
    await x.app.reload(next);
    await pass(x, clock, 7200_000, 60_000);
    const held = (await x.app.sync.guard.held("th_1")).length;
    expect({ cancels: cancels(x), held }).toEqual({ cancels: 0, held: 10 });
  }, 180_000);
}
