// Tests an appointment whose event a person deleted and purged (the Bin emptied) before calbridge saw the deletion:
// Google keeps the id unusable (insert 409, get 404). The appointment's next sync failed for good on it (a dead letter
// at every sync and reconciliation) and its event was never written again; it is now written under the next
// generation of the id, and nothing is sent to the booking service (a deletion calbridge never saw is no cancellation).
import { afterEach, expect, it } from "vitest";
import { eventIdFor } from "../../src/calendar/ids.ts";
import { captureLog } from "../support/log-capture.ts";
import { cancels, DAY, daemonHarness, type Harness, liveOf, settle } from "./support.ts";

let h: Harness | undefined;
afterEach(async () => {
  await h?.close();
  h = undefined;
});

it("an event deleted and purged unseen comes back under the next id when the booking changes; nothing is cancelled", async () => {
  const log = captureLog("warn");
  h = await daemonHarness({
    therapists: 1,
    logger: log.logger,
    engine: { maxAttempts: 2, baseMs: 20, maxDelayMs: 50 },
  });
  const start = new Date(Date.now() + 3 * DAY);
  start.setUTCHours(10, 0, 0, 0);
  const appt = h.world.booking.create({ therapist_id: "th_1", start_time: start.toISOString() }, { force: true });
  await settle(h);
  const id = String(appt.id);
  const cal = h.world.calendarOf("th_1");
  expect(liveOf(h, cal, id).map((e) => e.id)).toEqual([eventIdFor(id)]);
  // Deleted and purged before any poll saw it (calbridge stopped, a long hold...); then the booking moves.
  h.world.google.userDelete(cal, eventIdFor(id));
  h.world.google.purgeDeleted(cal);
  const moved = start.getTime() + DAY;
  h.world.booking.move(id, new Date(moved).toISOString(), { force: true });
  await settle(h);

  const live = liveOf(h, cal, id);
  expect(live.map((e) => e.id)).toEqual([eventIdFor(id, 1)]);
  expect(Date.parse(String((live[0]!.start as { dateTime: string }).dateTime))).toBe(moved);
  expect(await h.app.sync.links.get(id)).toMatchObject({ eventId: eventIdFor(id, 1), present: true });
  expect(cancels(h)).toBe(0);
  expect(log.lines.filter((l) => /dead letter/.test(String(l.msg)))).toEqual([]);
});
