// A calendar change whose sync fails for now (the booking service answers 500 to the cancellation) waits for the
// engine's retry, which lives in memory only. The poll saved the calendar's sync token past it anyway, so a stop
// before the retry (a deploy) forgot the therapist's deletion for good where no reconciliation reaches: an appointment
// beyond sync.window.future_days stayed booked with its event deleted. Now the token stays until every change of the
// poll is settled: the next poll, or the next daemon's, reads the deletion again. Nor is a token saved by a poll that
// a reload re-pointing the therapist overtook: it was the old calendar's, put back after the reload forgot it.
import { afterEach, expect, it } from "vitest";
import { eventIdFor } from "../../src/calendar/ids.ts";
import type { Config } from "../../src/config/schema.ts";
import { DAY, daemonHarness, type Harness, harness, quiet } from "./support.ts";

let h: Harness | undefined;
afterEach(async () => {
  await h?.close();
  h = undefined;
});

it("keeps the sync token while a deletion's write-back is being retried, and reads the deletion again", async () => {
  const x = await daemonHarness({
    therapists: 1,
    engine: { maxAttempts: 5, baseMs: 600_000, maxDelayMs: 600_000 }, // the engine's own retry is not due in the test
    configure: (c) => {
      c.sync = { ...c.sync, writeback: { cancel_grace_seconds: 0, reschedule_grace_seconds: 0 } };
    },
  });
  h = x;
  const start = new Date(Date.now() + 120 * DAY); // beyond sync.window.future_days (90): no reconciliation reads it
  start.setUTCHours(10, 0, 0, 0);
  const id = String(x.world.booking.create({ therapist_id: "th_1", start_time: start.toISOString() }).id);
  await quiet(x);
  const cal = x.world.calendarOf("th_1");
  await x.app.poller.poll("th_1");
  await quiet(x);
  const tokens = x.app.store.table<string>("tokens");
  const before = await tokens.get("th_1");

  x.world.google.userDelete(cal, eventIdFor(id));
  x.world.booking.faults.failNext(20, 500, { path: /\/cancel$/ });
  expect((await x.app.poller.poll("th_1")).changes).toBe(1);
  await quiet(x);
  expect(x.world.booking.get(id)?.status).toBe("confirmed"); // not sent yet: retried later
  expect(await tokens.get("th_1")).toBe(before); // was: past the deletion, which then lived in memory only

  x.world.booking.faults.reset();
  expect((await x.app.poller.poll("th_1")).changes).toBe(1); // read again
  await quiet(x);
  expect(x.world.booking.get(id)?.status).toBe("cancelled");
  expect(await tokens.get("th_1")).not.toBe(before);
  expect((await x.app.poller.poll("th_1")).changes).toBe(0);
});

it("saves no token when a reload re-pointed the therapist while the poll read the old calendar", async () => {
  const x = await harness({ therapists: 2 });
  h = x;
  const old = x.world.calendarOf("th_1");
  const fresh = "th1.sessions@clinic.test";
  x.world.google.createCalendar(fresh, old, { timeZone: "Europe/Berlin" });
  await x.app.poller.poll("th_1");
  const tokens = x.app.store.table<string>("tokens");
  expect(await tokens.get("th_1")).toBeDefined();
  const next = structuredClone(x.world.config) as Config;
  next.therapists[0]!.calendar_id = fresh;
  // A change of the therapist's own (none of calbridge's, whose handling checked the mapping's version).
  x.world.google.userInsert(old, {
    summary: "lunch",
    start: { dateTime: new Date(Date.now() + DAY).toISOString() },
    end: { dateTime: new Date(Date.now() + DAY + 3_600_000).toISOString() },
  });
  let reloaded = false;
  x.world.google.faults.holdNext(new RegExp(`^GET .*/calendars/${encodeURIComponent(old)}/events$`), async () => {
    await x.app.reload(next);
    reloaded = true;
  });
  await x.app.poller.poll("th_1").catch(() => {});
  expect(reloaded).toBe(true);
  expect(x.app.config.therapists[0]!.calendar_id).toBe(fresh);
  expect(await tokens.get("th_1")).toBeUndefined(); // the reload forgot it; the old calendar's is not put back
});
