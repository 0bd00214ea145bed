// Tests the appointment → event mapping: statuses, cancelled policy, templates, privacy, time zone, fingerprint.
import { describe, expect, it } from "vitest";
import type { Appointment } from "../../src/booking/schemas.ts";
import {
  type EventConfig,
  fingerprint,
  type RenderableAppointment,
  RenderError,
  renderEvent,
  sameTime,
} from "../../src/calendar/render.ts";

const mapping = { therapist_id: "th_anna", timezone: "Europe/Berlin", calendar_id: "anna@clinic.example" };
const config: EventConfig = {
  title: "{service_name}: {customer_name}",
  description: "Booking {id}\n{notes}",
  include_customer_contact: false,
  colors: { completed: "2", no_show: "11" },
  cancelled_events: "delete",
};
const appt: RenderableAppointment = {
  id: "apt_1",
  service_name: "Massage",
  customer_name: "Max Muster",
  customer_email: "max@example.com",
  customer: { id: "cus_1", name: "Max Muster", email: "max@example.com", phone: "+49 170 1234567" },
  therapist_id: "th_anna",
  therapist_name: "Anna",
  start_time: "2026-11-23T09:00:00Z",
  end_time: "2026-11-23T10:00:00.000Z",
  status: "confirmed",
  notes: "Back pain",
};

describe("renderEvent", () => {
  it("renders a confirmed appointment as a private, opaque event without attendees or reminders", () => {
    const e = renderEvent(appt, mapping, config);
    expect(e).toEqual({
      summary: "Massage: Max Muster",
      description: "Booking apt_1\nBack pain",
      start: { dateTime: "2026-11-23T09:00:00Z", timeZone: "Europe/Berlin" },
      end: { dateTime: "2026-11-23T10:00:00Z", timeZone: "Europe/Berlin" },
      visibility: "private",
      transparency: "opaque",
      status: "confirmed",
      extendedProperties: { private: { calbridge_appointment_id: "apt_1", calbridge_managed: "1" } },
    });
    expect(e).not.toHaveProperty("attendees");
    expect(e).not.toHaveProperty("reminders");
    expect(e).not.toHaveProperty("colorId");
  });

  it("colours completed and no-show appointments", () => {
    expect(renderEvent({ ...appt, status: "completed" }, mapping, config)?.colorId).toBe("2");
    expect(renderEvent({ ...appt, status: "no_show" }, mapping, config)?.colorId).toBe("11");
    expect(renderEvent({ ...appt, status: "no_show" }, mapping, { ...config, colors: {} })).not.toHaveProperty(
      "colorId",
    );
  });

  it("treats unknown statuses like confirmed", () => {
    const e = renderEvent({ ...appt, status: "rescheduled_by_magic" }, mapping, config);
    expect(e?.transparency).toBe("opaque");
    expect(e?.summary).toBe("Massage: Max Muster");
  });

  it("returns null for a cancelled appointment under the delete policy", () => {
    expect(renderEvent({ ...appt, status: "cancelled" }, mapping, config)).toBeNull();
  });

  it("keeps a cancelled appointment as free time, prefixed and coloured, under the keep policy", () => {
    const keep = { ...config, cancelled_events: "keep" as const };
    const e = renderEvent({ ...appt, status: "cancelled" }, mapping, keep);
    expect(e?.summary).toBe("Cancelled: Massage: Max Muster");
    expect(e?.transparency).toBe("transparent");
    expect(e?.colorId).toBe("8");
    expect(e?.status).toBe("confirmed");
    const custom = renderEvent({ ...appt, status: "cancelled" }, mapping, { ...keep, colors: { cancelled: "5" } });
    expect(custom?.colorId).toBe("5");
  });

  it("renders missing fields as empty, never 'undefined', and collapses blank lines", () => {
    const e = renderEvent({ id: "apt_2", start_time: appt.start_time, end_time: appt.end_time }, mapping, {
      ...config,
      description: "Booking {id}\n\n\n{notes}\n\n{therapist_name}\n{nonsense}\n",
    });
    expect(e?.summary).toBe("Appointment");
    expect(e?.description).toBe("Booking apt_2");
    expect(JSON.stringify(e)).not.toContain("undefined");
    const partial = renderEvent({ ...appt, customer_name: undefined, customer: undefined }, mapping, config);
    expect(partial?.summary).toBe("Massage");
  });

  it("keeps one blank line between paragraphs and does not expand braces inside values", () => {
    const e = renderEvent({ ...appt, notes: "line 1\n\n\n\nline {id}" }, mapping, config);
    expect(e?.description).toBe("Booking apt_1\nline 1\n\nline {id}");
  });

  it("offers local time placeholders in the mapping's time zone", () => {
    const e = renderEvent(appt, mapping, {
      ...config,
      title: "{time} {service_name}",
      description: "{start_local}–{end_local}",
    });
    expect(e?.summary).toBe("10:00 Massage");
    expect(e?.description).toBe("2026-11-23 10:00–2026-11-23 11:00");
  });

  it("leaves customer e-mail and phone out unless include_customer_contact", () => {
    const tpl = { ...config, description: "Booking {id}\nMail: {customer_email}" };
    const off = renderEvent(appt, mapping, tpl);
    expect(JSON.stringify(off)).not.toContain("max@example.com");
    expect(JSON.stringify(off)).not.toContain("1234567");
    const on = renderEvent(appt, mapping, { ...tpl, include_customer_contact: true });
    expect(on?.description).toBe("Booking apt_1\nMail: max@example.com\nPhone: +49 170 1234567");
    const onDefault = renderEvent(appt, mapping, { ...config, include_customer_contact: true });
    expect(onDefault?.description).toBe("Booking apt_1\nBack pain\nEmail: max@example.com\nPhone: +49 170 1234567");
  });

  it("uses the mapping's time zone on start and end", () => {
    const e = renderEvent(appt, { ...mapping, timezone: "America/New_York" }, config);
    expect(e?.start.timeZone).toBe("America/New_York");
    expect(e?.end.timeZone).toBe("America/New_York");
    expect(Date.parse(e?.start.dateTime ?? "")).toBe(Date.parse(appt.start_time ?? ""));
  });

  it("refuses appointments without usable times", () => {
    expect(() => renderEvent({ ...appt, end_time: undefined }, mapping, config)).toThrow(RenderError);
    expect(() => renderEvent({ ...appt, start_time: "tomorrow" }, mapping, config)).toThrow(/start_time/);
    expect(() => renderEvent({ ...appt, end_time: appt.start_time }, mapping, config)).toThrow(/not after/);
  });
});

describe("compatibility", () => {
  it("accepts the booking client's Appointment as is (nulls included)", () => {
    const parsed: Appointment = {
      id: "apt_1",
      service_name: "Massage",
      start_time: "2026-11-23T09:00:00Z",
      end_time: "2026-11-23T10:00:00Z",
      notes: null,
      cancellation_reason: null,
      customer: { name: "Max", phone: null },
      extra_field: { kept: true },
    };
    const renderable: RenderableAppointment = parsed; // compile-time contract with src/booking/schemas.ts
    expect(renderEvent(renderable, mapping, config)?.description).toBe("Booking apt_1");
  });
});

describe("fingerprint and sameTime", () => {
  const body = renderEvent(appt, mapping, config)!;

  it("does not depend on key order or on Google's echo of the same times and defaults", () => {
    const reordered = JSON.parse(JSON.stringify({ ...body, description: body.description, summary: body.summary }));
    expect(fingerprint(reordered)).toBe(fingerprint(body));
    const fromGoogle = {
      kind: "calendar#event",
      etag: '"1"',
      summary: body.summary,
      description: body.description,
      start: { dateTime: "2026-11-23T10:00:00+01:00", timeZone: "Europe/Berlin" },
      end: { dateTime: "2026-11-23T11:00:00+01:00", timeZone: "Europe/Berlin" },
      visibility: "private",
      status: "confirmed",
      reminders: { useDefault: true },
    };
    expect(fingerprint(fromGoogle)).toBe(fingerprint(body));
    expect(sameTime(fromGoogle, body)).toBe(true);
  });

  it("changes when an owned field changes", () => {
    const base = fingerprint(body);
    expect(fingerprint({ ...body, summary: "x" })).not.toBe(base);
    expect(fingerprint({ ...body, colorId: "2" })).not.toBe(base);
    expect(fingerprint({ ...body, transparency: "transparent" })).not.toBe(base);
    const moved = { ...body, start: { ...body.start, dateTime: "2026-11-23T09:30:00Z" } };
    expect(fingerprint(moved)).not.toBe(base);
    expect(sameTime(moved, body)).toBe(false);
  });

  it("ignores fields calbridge does not own", () => {
    expect(fingerprint({ ...body, location: "Room 1", attendees: [] } as typeof body)).toBe(fingerprint(body));
  });
});
