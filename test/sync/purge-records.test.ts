// Which links a purge forgets are only records of appointments calbridge never mirrored (counted apart from links in
// `calbridge purge`'s output): a tombstone naming no calendar, kept for an appointment of a therapist calbridge did not
// sync (apply.ts), unless the purge found an event of that appointment in the calendar.
import { expect, it } from "vitest";
import { neverMirrored } from "../../src/sync/purge.ts";
import type { Link } from "../../src/sync/types.ts";

const tombstone: Link = {
  appointmentId: "apt_1",
  therapistId: "th_cleo",
  calendarId: "",
  eventId: "cb1",
  present: false,
  removedBy: "booking",
  booking: { id: "apt_1", start_time: "2026-01-01T10:00:00Z", status: "confirmed", therapist_id: "th_cleo" },
  sourceAt: 1,
  syncedAt: 1,
};

it("a tombstone naming no calendar is a record never mirrored; a link to an event is not", () => {
  expect(neverMirrored(tombstone)).toBe(true);
  expect(neverMirrored(tombstone, new Set(["apt_2"]))).toBe(true);
  // The purge found an event of the appointment in the calendar: it was mirrored after all.
  expect(neverMirrored(tombstone, new Set(["apt_1"]))).toBe(false);
  expect(neverMirrored({ ...tombstone, calendarId: "th_cleo@clinic.test" })).toBe(false);
  expect(neverMirrored({ ...tombstone, present: true, removedBy: undefined })).toBe(false);
  expect(neverMirrored({ ...tombstone, removedBy: "purge" })).toBe(false);
});
