// Tests reading the booking service's timestamps ("ISO 8601 strings in UTC"): with Z, an offset, no designator (UTC,
// whatever the process's TZ), and an offset of hours alone (ISO 8601's ±hh), which Date.parse refuses: such an
// appointment's event could not be rendered at all and ended a dead letter.
import { expect, it } from "vitest";
import { bookingInstant } from "../../src/booking/instant.ts";

it("reads Z, ±hh:mm, ±hhmm, ±hh and no designator as the same instant; garbage is NaN", () => {
  const at = Date.UTC(2026, 10, 29, 9, 0, 0);
  for (const text of [
    "2026-11-29T09:00:00Z",
    "2026-11-29T10:00:00+01:00",
    "2026-11-29T10:00:00+0100",
    "2026-11-29T10:00:00+01",
    "2026-11-29T07:00-02",
    "2026-11-29T09:00:00.000+00",
    "2026-11-29T09:00:00",
    " 2026-11-29 09:00 ",
  ]) {
    expect(bookingInstant(text), text).toBe(at);
  }
  for (const text of ["", "tomorrow", "2026-11-29T10:00:00+1", "2026-11-29T10:00:00+01:0", undefined, null]) {
    expect(bookingInstant(text), String(text)).toBeNaN();
  }
});
