// The reconciliation window's past edge. Google's listing (timeMin/timeMax) returns the events that overlap the window;
// the booking listing kept only the appointments that start in it, so an appointment in progress at the window's start
// had an event without a listed appointment (a stray) and cost a booking read on every reconciliation.
import { afterEach, expect, it } from "vitest";
import { ManualClock } from "../../src/clock.ts";
import { DAY, type Harness, harness } from "./support.ts";

let h: Harness | undefined;
afterEach(async () => {
  await h?.close();
  h = undefined;
});

const MIN = 60_000;
const reads = (x: Harness) => x.world.booking.requests.filter((r) => r.route === "GET /v1/appointments/:id").length;

/** One reconciliation: what it planned, and the booking reads it cost. */
async function run(x: Harness): Promise<{ plan: number; reads: number }> {
  const before = reads(x);
  const report = await x.app.reconcile();
  await x.app.engine.idle();
  return { plan: report.plan.length, reads: reads(x) - before };
}

it("an appointment in progress at the window's past edge is listed on both sides: no booking read, nothing planned", async () => {
  const clock = new ManualClock(Date.parse("2027-03-10T12:00:00Z"));
  const x = await harness({ therapists: 1, clock });
  h = x;
  // One hour long, starting 10 minutes after the window's past edge (7 days back).
  const start = new Date(clock.now() - 7 * DAY + 10 * MIN).toISOString();
  x.world.booking.create({ therapist_id: "th_1", service_id: "svc_massage_60", start_time: start }, { force: true });
  await run(x);
  expect(x.live("th_1")).toHaveLength(1);

  // 20 and 35 minutes on, it started before the window and ends after the window's start: still in both listings.
  await clock.advance(20 * MIN);
  expect(await run(x)).toEqual({ plan: 0, reads: 0 });
  await clock.advance(15 * MIN);
  expect(await run(x)).toEqual({ plan: 0, reads: 0 });

  // Once it has ended before the window's start it is in neither listing: left alone, and still not read.
  await clock.advance(60 * MIN);
  expect(await run(x)).toEqual({ plan: 0, reads: 0 });
  expect(x.live("th_1")).toHaveLength(1);
});
