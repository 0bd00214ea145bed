// Each therapist's write-backs count for the window plus that therapist's own longest grace period (of the kinds they
// have on), not the longest of all therapists: one therapist given a 1-day cancel grace (allowed) made every other's
// count for 25 hours, and a therapist with the defaults who cancels 4 appointments 2 hours apart (a normal day) had the
// 4th held, the hold saying "within 60 min". Control: nobody with a long grace.
import { afterEach, expect, it } from "vitest";
import { eventIdFor } from "../../src/calendar/ids.ts";
import { ManualClock } from "../../src/clock.ts";
import { cancels, daemonHarness, type Harness, mirroredMany, pass, pollAll, quiet } from "./support.ts";

let h: Harness | undefined;
afterEach(async () => {
  await h?.close();
  h = undefined;
});

const HOUR = 3_600_000;

for (const otherGrace of [undefined, 86_400]) {
  for (const [n, gapH] of [
    [3, 1],
    [4, 2],
  ] as const) {
    it(`th_1 (defaults) cancels ${n} appointments ${gapH} h apart${otherGrace ? `, th_2 has cancel grace ${otherGrace} s` : ""}: all sent`, async () => {
      const clock = new ManualClock(Date.now());
      const x = await daemonHarness({
        therapists: 2,
        clock,
        configure: (c) => {
          if (otherGrace)
            c.therapists = c.therapists.map((t) =>
              t.therapist_id === "th_2" ? { ...t, writeback: { cancel_grace_seconds: otherGrace } } : t,
            );
        },
      });
      h = x;
      const ids = await mirroredMany(x, clock, 10); // 10 managed events: limit max(3, 20% of 10) = 3
      const cal = x.world.calendarOf("th_1");
      for (const [i, id] of ids.slice(0, n).entries()) {
        if (i > 0) {
          await clock.advance(gapH * HOUR - 180_000);
          await quiet(x);
        }
        x.world.google.userDelete(cal, eventIdFor(id));
        await pollAll(x);
        await pass(x, clock, 180_000, 30_000); // the 60 s grace, and then some
      }
      const held = await x.app.sync.guard.held("th_1");
      expect({ cancels: cancels(x), held: held.map((e) => e.reason) }).toEqual({ cancels: n, held: [] });
    }, 120_000);
  }
}
