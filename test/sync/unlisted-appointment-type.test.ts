// Tests an appointment event of a type the booking API's spec does not list (appointment.rescheduled, a type added
// later). It names an appointment in data.object.id; it was acknowledged and dropped, so the change it announced
// waited for the next reconciliation (15 minutes by default). A webhook only says which appointment to sync: it is
// now read and synced, its payload unused.
import { afterEach, describe, expect, it } from "vitest";
import { eventIdFor } from "../../src/calendar/ids.ts";
import { DAY, daemonHarness, type Harness, iso, quiet, settle } from "./support.ts";

let h: Harness | undefined;
afterEach(async () => {
  await h?.close();
  h = undefined;
});

describe("unknown appointment.* event types", () => {
  it("appointment.rescheduled (a type not in the spec's table) makes calbridge sync that appointment", async () => {
    h = await daemonHarness({ therapists: 1 });
    const start = new Date(Date.now() + 3 * DAY);
    start.setUTCHours(10, 0, 0, 0);
    const a = h.world.booking.create({ therapist_id: "th_1", start_time: start.toISOString() }, { force: true });
    const id = String(a.id);
    await settle(h);
    const cal = h.world.calendarOf("th_1");
    expect(h.world.google.event(cal, eventIdFor(id))?.status).toBe("confirmed");

    // The booking service moves it and announces it with an event type the receiver does not list.
    const [ep] = h.world.booking.webhookEndpoints();
    h.world.booking.setWebhookEndpointEnabled(ep!.id, false); // the simulator's own appointment.updated is not sent
    const moved = start.getTime() + 2 * 3_600_000;
    h.world.booking.move(id, iso(moved), { force: true });
    h.world.booking.setWebhookEndpointEnabled(ep!.id, true);
    const [delivery] = h.world.booking.sendEvent({
      type: "appointment.rescheduled",
      data: { object: { id, start_time: iso(moved) }, previous_attributes: { start_time: start.toISOString() } },
    });
    await quiet(h);
    expect(delivery!.attempts.at(-1)?.status).toBe(200); // acknowledged

    const ev = h.world.google.event(cal, eventIdFor(id)) as { start: { dateTime: string } };
    expect(Date.parse(ev.start.dateTime)).toBe(moved);
  });
});
