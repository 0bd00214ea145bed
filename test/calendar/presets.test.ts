// Privacy presets, the placeholders they use and reminders, rendered as README documents them; and what each
// placeholder's documented forms say, checked against the booking simulator's forms of one appointment.
import { describe, expect, it } from "vitest";
import { fingerprint } from "../../src/calendar/fingerprint.ts";
import { PLACEHOLDERS, type RenderableAppointment } from "../../src/calendar/placeholders.ts";
import { PRESET_NAMES, PRESETS, templatesOf } from "../../src/calendar/presets.ts";
import { normalReminders, remindersBody } from "../../src/calendar/reminders.ts";
import { type EventConfig, ownedPatch, renderEvent } from "../../src/calendar/render.ts";
import { startBookingSimulator } from "../../src/simulator/booking/index.ts";

const mapping = { therapist_id: "th_anna", timezone: "Europe/Berlin", calendar_id: "anna@clinic.example" };
const full: RenderableAppointment = {
  id: "apt_1",
  service_name: "Massage",
  customer: { id: "cus_1", name: "Mia Müller-Lüdenscheidt", email: "mia@example.com", phone: "+49 30 1234567" },
  therapist_id: "th_anna",
  start_time: "2026-11-23T09:00:00Z",
  end_time: "2026-11-23T10:00:00Z",
  status: "confirmed",
  notes: "knee surgery in May",
  addons: [{ id: "addon_hot_stones", name: "Hot stones" }, "aromatherapy", { id: "addon_x" }],
};
const config = (over: Partial<EventConfig> = {}): EventConfig => ({
  ...templatesOf({}),
  include_customer_contact: false,
  colors: {},
  cancelled_events: "delete",
  ...over,
});
const render = (preset: (typeof PRESET_NAMES)[number], appt = full) =>
  renderEvent(appt, mapping, config(templatesOf({ preset })));

describe("privacy presets", () => {
  it("render as README documents them", () => {
    expect(PRESET_NAMES.map((p) => [p, render(p)?.summary, render(p)?.description])).toEqual([
      ["full", "Massage: Mia Müller-Lüdenscheidt", "Booking apt_1\nknee surgery in May"],
      ["first_name", "Massage: Mia", "Booking apt_1\nknee surgery in May"],
      ["initials", "Massage: M.M.", "Booking apt_1"],
      ["booking_only", "Massage", "Booking apt_1"],
    ]);
    // Without a preset and without templates: full.
    expect(templatesOf({})).toEqual({ title: PRESETS.full.title, description: PRESETS.full.description });
    // A template set next to a preset replaces that one of the preset's.
    expect(templatesOf({ preset: "initials", description: "Ref {id}" })).toEqual({
      title: PRESETS.initials.title,
      description: "Ref {id}",
    });
  });

  it("show no customer detail where the preset says so, whatever the customer's name", () => {
    for (const name of ["", "  ", "Prince", "élodie de la Tour"]) {
      const appt = { ...full, customer: { ...full.customer, name } };
      expect(render("booking_only", appt)?.summary).toBe("Massage");
      expect(render("initials", appt)?.description).not.toContain("knee");
    }
    expect(render("initials", { ...full, customer: { name: "élodie de la Tour" } })?.summary).toBe("Massage: É.D.L.T.");
    expect(render("first_name", { ...full, customer: { name: "  Prince " } })?.summary).toBe("Massage: Prince");
  });

  it("renders add-ons by name (or id), and the customer's contact only when turned on", () => {
    const e = renderEvent(full, mapping, config({ description: "{addons} | {customer_phone}" }));
    expect(e?.description).toBe("Hot stones, aromatherapy, addon_x |");
    const on = renderEvent(full, mapping, config({ description: "{customer_phone}", include_customer_contact: true }));
    expect(on?.description).toBe("+49 30 1234567\nEmail: mia@example.com");
  });
});

describe("reminders", () => {
  it("are written only when configured: Google's default, none, or the list (largest offset first)", () => {
    expect(renderEvent(full, mapping, config())).not.toHaveProperty("reminders");
    expect(renderEvent(full, mapping, config({ reminders: "default" }))?.reminders).toEqual({ useDefault: true });
    expect(renderEvent(full, mapping, config({ reminders: "none" }))?.reminders).toEqual({ useDefault: false });
    const list = renderEvent(
      full,
      mapping,
      config({
        reminders: [
          { method: "popup", minutes: 10 },
          { method: "email", minutes: 1440 },
        ],
      }),
    );
    expect(list?.reminders).toEqual({
      useDefault: false,
      overrides: [
        { method: "email", minutes: 1440 },
        { method: "popup", minutes: 10 },
      ],
    });
  });

  it("are patched whole when owned (overrides cleared with null), and left out of the patch otherwise", () => {
    const owned = renderEvent(full, mapping, config({ reminders: "default" }))!;
    expect(ownedPatch(owned).reminders).toEqual({ useDefault: true, overrides: null });
    expect(ownedPatch(renderEvent(full, mapping, config())!)).not.toHaveProperty("reminders");
  });

  it("count in the fingerprint only when owned, compared as Google reads them back", () => {
    const body = renderEvent(full, mapping, config({ reminders: [{ method: "popup", minutes: 10 }] }))!;
    // Google answers overrides in its own order and an event without reminders of its own as useDefault:true.
    const readBack = { ...body, reminders: { useDefault: false, overrides: [{ minutes: 10, method: "popup" }] } };
    expect(fingerprint(readBack, { reminders: true })).toBe(fingerprint(body, { reminders: true }));
    const changed = { ...body, reminders: { useDefault: false, overrides: [{ method: "popup", minutes: 15 }] } };
    expect(fingerprint(changed, { reminders: true })).not.toBe(fingerprint(body, { reminders: true }));
    expect(fingerprint(changed)).toBe(fingerprint(body));
    expect(normalReminders(undefined)).toEqual(normalReminders({ useDefault: true, overrides: [] }));
    expect(normalReminders(remindersBody("none"))).toEqual(normalReminders({ useDefault: false, overrides: [] }));
  });
});

describe("placeholders", () => {
  it("say which forms carry them, as the booking service's forms do", async () => {
    const sim = await startBookingSimulator({ therapists: ["th_1"], rateLimit: false });
    try {
      const created = sim.create(
        {
          therapist_id: "th_1",
          start_time: new Date(Date.now() + 86_400_000).toISOString().slice(0, 13) + ":00:00Z",
          notes: "n",
          addons: ["addon_hot_stones"],
        },
        { force: true },
      );
      const id = String(created.id);
      sim.cancel(id, "plans changed");
      const forms = {
        created: sim.events.find((e) => e.type === "appointment.created")!.data as { object: RenderableAppointment },
        cancelled: sim.events.find((e) => e.type === "appointment.cancelled")!.data as {
          object: RenderableAppointment;
        },
      };
      const res = await fetch(`${sim.url}/v1/appointments?per_page=100`, {
        headers: { authorization: `Bearer ${sim.apiKey}` },
      });
      const list = ((await res.json()) as { data: RenderableAppointment[] }).data.find((a) => a.id === id)!;
      const byForm: Record<string, RenderableAppointment> = {
        created: forms.created.object,
        cancelled: forms.cancelled.object,
        list,
        full: sim.get(id) as unknown as RenderableAppointment,
      };
      for (const p of PLACEHOLDERS.filter((x) => x.read)) {
        const carried = Object.entries(byForm)
          .filter(([, appt]) => p.read!(appt) !== undefined)
          .map(([form]) => form);
        expect([p.name, carried.sort()]).toEqual([p.name, [...p.forms].sort()]);
      }
    } finally {
      await sim.close();
    }
  });
});
