// "A deletion that fails keeps its link, so running it again finishes the job" (README, purge), also when the event
// whose deletion fails is not the one the link names: a series Google split off the appointment's event ("This and
// following events", `<event id>_R<time>`). Its link was forgotten all the same (only a failure of the link's own event
// id kept it), and the purge run again found no calendar of the therapist's: exit 2, the series left for good.
import { afterEach, expect, it } from "vitest";
import { eventIdFor } from "../../src/calendar/ids.ts";
import { startWorld } from "../../src/simulator/world.ts";
import { reconcileOnce, runCli, writeConfig } from "./support.ts";

const DAY = 86_400_000;
const HOUR = 3_600_000;
const iso = (ms: number) => new Date(ms).toISOString();
const cleanups: (() => Promise<unknown>)[] = [];
afterEach(async () => {
  for (const c of cleanups.splice(0).reverse()) await c().catch(() => {});
});

it("a split-off series whose deletion failed keeps the link: the purge run again deletes it", async () => {
  const w = await startWorld({ therapists: ["th_anna", "th_ben"] });
  cleanups.push(() => w.close());
  const start = new Date(Date.now() + 2 * DAY);
  start.setUTCHours(9, 0, 0, 0);
  const id = String(w.booking.create({ therapist_id: "th_ben", start_time: start.toISOString() }, { force: true }).id);
  await reconcileOnce(w.config);
  const cal = w.calendarOf("th_ben");
  const ev = eventIdFor(id);
  // th_ben makes the session weekly, then moves it on from the third week with "This and following events".
  w.google.userEdit(cal, ev, { recurrence: ["RRULE:FREQ=WEEKLY;COUNT=6"] });
  const third = start.getTime() + 14 * DAY;
  const tail = String(
    w.google.userSplitSeries(cal, ev, third, {
      start: { dateTime: iso(third + HOUR) },
      end: { dateTime: iso(third + 2 * HOUR) },
    }).id,
  );
  const live = () =>
    w.google
      .events(cal)
      .filter((e) => e.status !== "cancelled")
      .map((e) => String(e.id));
  expect(live().sort()).toEqual([ev, tail].sort());
  const file = writeConfig(w, (c) => {
    c.therapists = c.therapists.filter((t) => t.therapist_id !== "th_ben");
  });
  // The series' deletion is refused (403 forbidden: not tried again); the event itself goes.
  w.google.faults.next(1, { status: 403, reason: "forbidden", match: new RegExp(`^DELETE .*${tail}`) });

  const first = await runCli("purge", "--therapist", "th_ben", "--config", file);
  expect(first.code).toBe(1);
  expect(first.stdout).toContain("deleted 1 events (0 were gone already), forgot 0 links; 1 not deleted");
  expect(first.stdout).toContain("run it again");
  expect(live()).toEqual([tail]);

  const again = await runCli("purge", "--therapist", "th_ben", "--config", file);
  expect(again.code, again.stdout + again.stderr).toBe(0);
  expect(again.stdout).toContain(`calbridge purge th_ben: calendar ${cal}`);
  expect(again.stdout).toContain("deleted 1 events (0 were gone already), forgot 1 links");
  expect(live()).toEqual([]);
});
