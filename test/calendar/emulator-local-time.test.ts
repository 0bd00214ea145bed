// Tests how the Calendar emulator reads a local dateTime with a timeZone (what Google's UI writes) at a daylight-saving
// change: as RFC 5545 (3.3.5) reads such times, a time that does not occur uses the UTC offset before the gap and one
// that occurs twice is its first occurrence, the same in every zone. Its earlier two-step guess answered by the sign of
// the zone's offset: an hour before the time typed in New York, the second occurrence in Berlin.
import { describe, expect, it } from "vitest";
import { startCalendarEmulator } from "../../src/simulator/calendar/index.ts";
import { localToInstant } from "../../src/simulator/calendar/time.ts";

const utc = (ms: number) => new Date(ms).toISOString();

describe("localToInstant at DST changes", () => {
  it("nonexistent 02:30 (spring forward) uses the offset before the gap, in Berlin and in New York alike", () => {
    // Berlin: 02:30 with +01:00 = 01:30Z (shown 03:30 CEST).
    expect(utc(localToInstant("2026-03-29T02:30:00", "Europe/Berlin"))).toBe("2026-03-29T01:30:00.000Z");
    // New York: 02:30 with -05:00 = 07:30Z (shown 03:30 EDT). It was read as 06:30Z = 01:30 EST, an hour earlier,
    // before the local time written.
    expect(utc(localToInstant("2026-03-08T02:30:00", "America/New_York"))).toBe("2026-03-08T07:30:00.000Z");
  });

  it("ambiguous 02:30 / 01:30 (fall back) is the first occurrence, in Berlin and in New York alike", () => {
    // New York: 01:30 EDT = 05:30Z (first).
    expect(utc(localToInstant("2026-11-01T01:30:00", "America/New_York"))).toBe("2026-11-01T05:30:00.000Z");
    // Berlin: 02:30 CEST = 00:30Z (first). It was read as 01:30Z (the second, CET).
    expect(utc(localToInstant("2026-10-25T02:30:00", "Europe/Berlin"))).toBe("2026-10-25T00:30:00.000Z");
  });

  it("through the API: a person's 02:30 NY event on spring-forward day reads back at 03:30 EDT, not before the time typed", async () => {
    const g = await startCalendarEmulator({});
    try {
      g.createCalendar("c@x", "c@x", { timeZone: "America/New_York" });
      const ev = g.userInsert("c@x", {
        summary: "x",
        start: { dateTime: "2026-03-08T02:30:00", timeZone: "America/New_York" },
        end: { dateTime: "2026-03-08T04:00:00", timeZone: "America/New_York" },
      }) as Record<string, { dateTime: string }> | undefined;
      // What a person sees after typing 02:30 (a time that does not exist): Google shows 03:30 EDT.
      expect(ev?.start?.dateTime).toBe("2026-03-08T03:30:00-04:00");
    } finally {
      await g.close();
    }
  });
});
