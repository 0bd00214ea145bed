// The last look's comparison (writeback-basis.ts sameState): the state a write-back was decided from against the
// appointment read again. A start_time calbridge cannot read as an instant, unchanged, is no change: the write-back was
// blocked for good (each attempt "changed meanwhile") though nobody had touched the appointment.
import { describe, expect, it } from "vitest";
import type { Appointment } from "../../src/booking/schemas.ts";
import { sameState } from "../../src/sync/writeback-basis.ts";

const appt = (fields: Partial<Appointment>): Appointment => ({
  id: "a1",
  status: "confirmed",
  therapist_id: "th_1",
  ...fields,
});

describe("sameState", () => {
  it("takes an unreadable start_time, the same text on both sides, for the same time", () => {
    const odd = "next Tuesday, 10 o'clock";
    expect(sameState(appt({ start_time: odd }), appt({ start_time: odd }))).toBe(true);
  });

  it("tells two different unreadable start_times apart", () => {
    expect(sameState(appt({ start_time: "soon" }), appt({ start_time: "later" }))).toBe(false);
  });

  it("compares readable times as instants, whatever their spelling", () => {
    const decided = appt({ start_time: "2026-11-29T10:00:00Z" });
    expect(sameState(decided, appt({ start_time: "2026-11-29T11:00:00+01:00" }))).toBe(true);
    expect(sameState(decided, appt({ start_time: "2026-11-29T12:00:00Z" }))).toBe(false);
  });
});
