// Tests an event id a person deleted whose deletion was purged (the Bin emptied, or 30 days passed) before calbridge
// wrote the event again. Google keeps such an id unusable: insert answers 409 duplicate, get 404
// (google-api-ruby-client #1811, google-api-python-client #846; the emulator does the same). upsert used to fail with
// an "unknown" error, so the appointment failed for good at every sync and reconciliation, its event never written.
// It is now a refusal of the id (the next generation is used), unless the insert may have landed on an attempt whose
// answer was lost: then it is transient, tried again later rather than written twice.
import { afterEach, beforeEach, expect, it } from "vitest";
import { CalendarError, RestoreRefusedError } from "../../src/calendar/errors.ts";
import { body, CALENDAR_ID, type Fixture, setup } from "./helpers.ts";

let f: Fixture;
beforeEach(async () => {
  f = await setup();
});
afterEach(async () => {
  await f.close();
});

it("an id unusable after a purged deletion is refused (next generation); after a lost answer it is transient", async () => {
  await f.gateway.upsert("purged0001", body("Session", "2026-12-01T09:00:00Z", "2026-12-01T10:00:00Z"));
  f.emulator.userDelete(CALENDAR_ID, "purged0001");
  expect(f.emulator.purgeDeleted(CALENDAR_ID)).toBe(1);

  f.emulator.faults.dropResponseNext(1);
  const lost = await f.gateway
    .upsert("purged0001", body("Session", "2026-12-01T09:00:00Z", "2026-12-01T10:00:00Z"))
    .catch((e: unknown) => e);
  expect(lost).toBeInstanceOf(CalendarError);
  expect(lost).not.toBeInstanceOf(RestoreRefusedError);
  expect((lost as CalendarError).kind).toBe("transient");

  const refused = await f.gateway
    .upsert("purged0001", body("Session", "2026-12-01T09:00:00Z", "2026-12-01T10:00:00Z"))
    .catch((e: unknown) => e);
  expect(refused).toBeInstanceOf(RestoreRefusedError);
  expect((refused as CalendarError).message).toMatch(
    /purged0001: Google reported a duplicate id but has no such event/,
  );
});
