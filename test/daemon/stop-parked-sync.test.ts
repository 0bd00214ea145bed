// A stop (SIGTERM: app.stop) while an appointment's sync waits for its therapist's calendar to be usable again (paused
// after Google's quotaExceeded; likewise revoked credentials): the sync sent nothing that was applied and only waits
// for a retry, so the stop gives it up at once instead of waiting its whole grace ("stop grace exceeded … webhook
// events in flight", and on Redis a lease left for the standby to wait out); its webhook event stays in the inbox.
import { afterEach, expect, it } from "vitest";
import { eventIdFor } from "../../src/calendar/ids.ts";
import { ManualClock } from "../../src/clock.ts";
import { captureLog } from "../support/log-capture.ts";
import { DAY, daemonHarness, type Harness } from "../sync/support.ts";

let h: Harness | undefined;
afterEach(async () => {
  await h?.close();
  h = undefined;
});
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

it("a stop gives up at once a webhook sync waiting for a paused calendar; its event stays in the inbox", async () => {
  const clock = new ManualClock(Date.now());
  const log = captureLog();
  const x = await daemonHarness({ therapists: 2, clock, logger: log.logger });
  h = x;
  const start = new Date(clock.now() + 3 * DAY);
  start.setUTCHours(10, 0, 0, 0);
  const id = String(
    x.world.booking.create({ therapist_id: "th_1", start_time: start.toISOString() }, { force: true }).id,
  );
  for (let i = 0; i < 2; i++) {
    await x.world.booking.webhooksIdle();
    await x.app.processor.idle();
    await x.app.engine.idle();
  }
  const cal = x.world.calendarOf("th_1");
  expect(x.world.google.event(cal, eventIdFor(id))?.status).toBe("confirmed");

  // th_1's next request is answered quotaExceeded: the calendar is paused and the sync of the move waits for it.
  x.world.google.faults.next(1, { status: 403, reason: "quotaExceeded", match: /th_1/ });
  x.world.booking.move(id, new Date(start.getTime() + 2 * 3_600_000), { force: true });
  await x.world.booking.webhooksIdle();
  for (let i = 0; i < 100 && !log.lines.some((l) => l.msg === "calendar not available; the sync waits"); i++) {
    await sleep(20);
  }
  expect(log.lines.some((l) => l.msg === "calendar not available; the sync waits")).toBe(true);
  expect(x.app.engine.queueDepth, "the sync waits to retry").toBe(1);
  const sent = x.world.google.requestLog.length;

  const began = Date.now();
  await x.app.stop(4_000);
  const took = Date.now() - began;
  const exceeded = log.lines.find((l) => String(l.msg).includes("stop grace exceeded"));
  expect(exceeded?.unfinished ?? [], "work the stop waited for until its grace ran out").toEqual([]);
  expect(took, "ms the stop took").toBeLessThan(2_000);
  expect(log.lines.filter((l) => String(l.msg).startsWith("webhook event not finished")).length).toBe(1);
  expect(log.lines.filter((l) => /dead letter|sync failed/.test(String(l.msg)))).toEqual([]);
  expect(x.world.google.requestLog.length, "nothing sent after the stop").toBe(sent);
}, 30_000);
