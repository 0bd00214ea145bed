// Tests the appointment → event mapping: statuses, cancelled policy, templates, privacy, time zone, fingerprint.
import { describe, expect, it } from "vitest";
import type { Appointment } from "../../src/booking/schemas.ts";
import {
  DESCRIPTION_MAX_BYTES,
  type EventConfig,
  fingerprint,
  type RenderableAppointment,
  RenderError,
  renderEvent,
  SUMMARY_MAX_BYTES,
  sameTime,
  TEMPLATE_FIELDS,
} from "../../src/calendar/render.ts";
import { cutToBytes, dropControls, escapeHtml } from "../../src/calendar/template.ts";

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
      extendedProperties: {
        private: {
          calbridge_appointment_id: "apt_1",
          calbridge_managed: "1",
          // The times calbridge writes (instants only): kept out of the fingerprint, stamped by each write.
          calbridge_times: "2026-11-23T09:00:00Z/2026-11-23T10:00:00Z",
        },
      },
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

  it("renders each placeholder the same whether a template places it alone or next to every other one", () => {
    // Only the placeholders a configuration's templates place are computed: none may depend on another being placed.
    const full: RenderableAppointment = {
      ...appt,
      addons: ["Hot stones", { name: "Oil" }],
      price: 6000,
      currency: "eur",
    };
    const separator = "¦";
    for (const withContact of [false, true]) {
      const all = TEMPLATE_FIELDS.map((n) => `{${n}}`).join(separator);
      const together = renderEvent(full, mapping, {
        ...config,
        title: "x",
        description: all,
        include_customer_contact: withContact,
      });
      const values = together!.description.split("\n")[0]!.split(separator);
      expect(values).toHaveLength(TEMPLATE_FIELDS.length);
      TEMPLATE_FIELDS.forEach((name, i) => {
        const alone = renderEvent(full, mapping, {
          ...config,
          title: `{${name}}`,
          description: `[{${name}}]`,
          include_customer_contact: withContact,
        });
        expect(alone!.description.split("\n")[0], `${name}, contact ${withContact}`).toBe(`[${values[i]}]`);
        expect(alone!.summary.startsWith(values[i]!.trim() || "Appointment"), name).toBe(true);
      });
    }
    expect(renderEvent(full, mapping, { ...config, description: "{date} {end_local}" })?.description).toBe(
      "2026-11-23 2026-11-23 11:00",
    );
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

describe("sanitised rendering", () => {
  const bytes = (text: string | undefined) => Buffer.byteLength(text ?? "", "utf8");

  it("escapes HTML in the values put into the description, not in the admin's template text", () => {
    const e = renderEvent(
      {
        ...appt,
        customer_name: 'Max "<b>Muster</b>"',
        notes: `<a href="https://evil.example/login">Reset your password</a> & it's <script>x</script>`,
      },
      mapping,
      { ...config, description: "<b>Booking</b> {id}\nCustomer: {customer_name}\n{notes}" },
    );
    expect(e?.description).toBe(
      "<b>Booking</b> apt_1\nCustomer: Max &quot;&lt;b&gt;Muster&lt;/b&gt;&quot;\n" +
        "&lt;a href=&quot;https://evil.example/login&quot;&gt;Reset your password&lt;/a&gt; &amp; it&#39;s &lt;script&gt;x&lt;/script&gt;",
    );
    // The title is plain text to Google: shown as it is, not escaped.
    expect(e?.summary).toBe('Massage: Max "<b>Muster</b>"');
  });

  it("escapes the contact lines too, when contact details are on", () => {
    const e = renderEvent({ ...appt, customer: { ...appt.customer, phone: "<a href='tel:1'>call</a>" } }, mapping, {
      ...config,
      include_customer_contact: true,
    });
    expect(e?.description).toContain("Phone: &lt;a href=&#39;tel:1&#39;&gt;call&lt;/a&gt;");
  });

  it("drops control characters from title and description, keeping newlines and tabs", () => {
    const e = renderEvent(
      { ...appt, customer_name: "Max\u0000 Mus\u0007ter\u001b[31m", notes: "a\tb\r\nc\u0008d\u007f\u0085e\ud800f" },
      mapping,
      config,
    );
    expect(e?.summary).toBe("Massage: Max Muster[31m");
    // An unpaired surrogate (not Unicode, not sendable as UTF-8) becomes U+FFFD.
    expect(e?.description).toBe("Booking apt_1\na\tb\ncde\ufffdf");
    expect(dropControls("x\u0000\u009fy")).toBe("xy");
  });

  it("cuts a 20,000-character description to Google's limit with a visible ellipsis", () => {
    const e = renderEvent({ ...appt, notes: "Lorem ipsum dolor sit amet. ".repeat(715) }, mapping, config);
    expect(bytes(e?.description)).toBeLessThanOrEqual(DESCRIPTION_MAX_BYTES);
    expect(bytes(e?.description)).toBeGreaterThan(DESCRIPTION_MAX_BYTES - 10);
    expect(e?.description.startsWith("Booking apt_1\nLorem ipsum")).toBe(true);
    expect(e?.description.endsWith("…")).toBe(true);
    const multibyte = renderEvent({ ...appt, notes: "Übung für Rücken 😀 ".repeat(2000) }, mapping, config);
    expect(bytes(multibyte?.description)).toBeLessThanOrEqual(DESCRIPTION_MAX_BYTES);
    expect(multibyte?.description).not.toMatch(/[\ud800-\udbff](?![\udc00-\udfff])/);
  });

  it("keeps a notice whole at the end of a cut description", () => {
    const notice = "Not moved: the booking service refused (slot_unavailable) <sic>";
    const e = renderEvent({ ...appt, notes: "x".repeat(20_000) }, mapping, config, notice);
    expect(bytes(e?.description)).toBeLessThanOrEqual(DESCRIPTION_MAX_BYTES);
    expect(e?.description.endsWith("…\n\nNot moved: the booking service refused (slot_unavailable) &lt;sic&gt;")).toBe(
      true,
    );
    expect(renderEvent(appt, mapping, config, "Note")?.description).toBe("Booking apt_1\nBack pain\n\nNote");
  });

  it("keeps the contact lines whole when long notes are cut, with a notice after them", () => {
    // An intake form pasted into the notes: the contact lines came last and were cut off entirely.
    const contact = { ...config, include_customer_contact: true };
    const long = renderEvent({ ...appt, notes: "Intake: history of back pain. ".repeat(400) }, mapping, contact);
    expect(bytes(long?.description)).toBeLessThanOrEqual(DESCRIPTION_MAX_BYTES);
    expect(long?.description).toMatch(/…\nEmail: max@example\.com\nPhone: \+49 170 1234567$/);
    const noted = renderEvent({ ...appt, notes: "x".repeat(20_000) }, mapping, contact, "Note");
    expect(bytes(noted?.description)).toBeLessThanOrEqual(DESCRIPTION_MAX_BYTES);
    expect(noted?.description).toMatch(/…\nEmail: max@example\.com\nPhone: \+49 170 1234567\n\nNote$/);
  });

  it("writes the initials a reader sees: accents kept, invisible marks and non-letters skipped", () => {
    const initials = (name: string) =>
      renderEvent({ ...appt, customer_name: name }, mapping, { ...config, title: "{customer_initials}" })?.summary;
    expect(initials("max muster")).toBe("M.M.");
    expect(initials("A\u0308nne O\u0308zdemir")).toBe("Ä.Ö."); // decomposed: the dots were lost
    expect(initials("\u200Fדוד \u200Fכהן")).toBe("ד.כ."); // a right-to-left mark was taken for the initial
    expect(initials("(Max) Muster")).toBe("M.M.");
  });

  it("cuts the title to its limit, the cancelled prefix included", () => {
    const long = renderEvent({ ...appt, customer_name: "Max ".repeat(200) }, mapping, config);
    expect(bytes(long?.summary)).toBeLessThanOrEqual(SUMMARY_MAX_BYTES);
    expect(long?.summary.endsWith("…")).toBe(true);
    const keep = { ...config, cancelled_events: "keep" as const };
    const cancelled = renderEvent({ ...appt, status: "cancelled", customer_name: "Max ".repeat(200) }, mapping, keep);
    expect(cancelled?.summary.startsWith("Cancelled: Massage: Max")).toBe(true);
    expect(bytes(cancelled?.summary)).toBeLessThanOrEqual(SUMMARY_MAX_BYTES);
  });

  it("never cuts inside a character reference or a surrogate pair", () => {
    expect(cutToBytes("abc &amp; def", 9)).toBe("abc…");
    expect(cutToBytes("abc &#39; def", 10)).toBe("abc…");
    expect(cutToBytes("ab😀cd", 7)).toBe("ab…");
    expect(cutToBytes("short", 5)).toBe("short");
    expect(escapeHtml(`<&>"'`)).toBe("&lt;&amp;&gt;&quot;&#39;");
  });
});
