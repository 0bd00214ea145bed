// The times mark calbridge writes into an event (calbridge_times): made by rendering, stamped by each write, read back.
import { describe, expect, it } from "vitest";
import { fingerprint } from "../../src/calendar/fingerprint.ts";
import { renderEvent } from "../../src/calendar/render.ts";
import { markedTimes, markOf, stampWrite, timesMark } from "../../src/calendar/times-mark.ts";

const mapping = { therapist_id: "th_anna", timezone: "Europe/Berlin", calendar_id: "c" };
const config = {
  title: "{service_name}",
  description: "Booking {id}",
  include_customer_contact: false,
  colors: {},
  cancelled_events: "delete" as const,
};
const render = (start: string, end: string) =>
  renderEvent({ id: "apt_1", service_name: "Massage", start_time: start, end_time: end }, mapping, config)!;

describe("times mark", () => {
  it("names the rendered times as an ISO 8601 interval in UTC: instants only, nothing of the customer", () => {
    const body = render("2026-11-23T10:00:00+01:00", "2026-11-23T11:00:00+01:00");
    expect(markOf(body)).toBe("2026-11-23T09:00:00Z/2026-11-23T10:00:00Z");
    expect(timesMark("2026-11-23T09:00:00Z", "2026-11-23T10:00:00Z")).toBe(markOf(body));
  });

  it("is stamped with the moment of each write, so two writes at the same times carry different marks", () => {
    const body = render("2026-11-23T09:00:00Z", "2026-11-23T10:00:00Z");
    const one = stampWrite(body, Date.UTC(2026, 10, 20, 8));
    const two = stampWrite(one, Date.UTC(2026, 10, 20, 9));
    expect(markOf(one)).toBe("2026-11-23T09:00:00Z/2026-11-23T10:00:00Z@2026-11-20T08:00:00.000Z");
    expect(markOf(two)).toBe("2026-11-23T09:00:00Z/2026-11-23T10:00:00Z@2026-11-20T09:00:00.000Z");
    expect(markOf(body)).toBe("2026-11-23T09:00:00Z/2026-11-23T10:00:00Z"); // the rendering itself is not changed
    expect(one.extendedProperties.private.calbridge_appointment_id).toBe("apt_1");
    // Outside the fingerprint: neither the mark nor its stamp makes an event differ from its rendering.
    expect(fingerprint(one)).toBe(fingerprint(body));
    const { extendedProperties: _, ...unmarked } = body;
    expect(fingerprint(two)).toBe(fingerprint(unmarked));
  });

  it("leaves a body without a mark as it is", () => {
    const body = { summary: "x", extendedProperties: { private: { other: "1" } } };
    expect(stampWrite(body, 1)).toBe(body);
  });

  it("reads the marked times back in whole seconds, as Google keeps an event's times", () => {
    const body = stampWrite(render("2026-11-23T09:00:00.250Z", "2026-11-23T10:00:00.750Z"), 5);
    expect(markedTimes(body)).toEqual({
      mark: markOf(body),
      start: Date.UTC(2026, 10, 23, 9),
      end: Date.UTC(2026, 10, 23, 10),
      at: 5, // the moment of the write its stamp names
    });
  });

  it("reads nothing from an event without a mark, or with one that is no interval", () => {
    expect(markedTimes({})).toBeUndefined();
    expect(markedTimes(null)).toBeUndefined();
    for (const mark of ["", "garbage", "2026-11-23T09:00:00Z", "2026-11-23T09:00:00Z/x@y"]) {
      expect(markedTimes({ extendedProperties: { private: { calbridge_times: mark } } })).toBeUndefined();
    }
  });
});
