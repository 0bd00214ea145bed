// Two webhooks of one appointment with the same created_at (to the millisecond: the booking service created and
// cancelled it in one go), waiting together while another sync of the appointment runs, the cancellation delivered
// first. Neither clock is the newer, so neither payload is taken for the state: the booking is read. Taking the later
// delivery's (the creation's) left the event of a cancelled appointment in the calendar (CI's crash chaos met it).
import { afterEach, expect, it } from "vitest";
import type { Appointment } from "../../src/booking/schemas.ts";
import { daemonHarness, type Harness, liveOf } from "./support.ts";

let h: Harness | undefined;
afterEach(async () => {
  await h?.close();
  h = undefined;
});

const DAY = 86_400_000;

it("a cancellation and a creation with the same clock, merged while a sync runs: the event goes, as the booking is cancelled", async () => {
  h = await daemonHarness({ therapists: 1 });
  const x = h;
  for (const e of x.world.booking.webhookEndpoints()) x.world.booking.setWebhookEndpointEnabled(e.id, false);
  const start = new Date(Date.now() + 3 * DAY);
  start.setUTCHours(10, 0, 0, 0);
  const booked = x.world.booking.create({ therapist_id: "th_1", start_time: start.toISOString() }, { force: true });
  const id = String(booked.id);
  const cal = x.world.calendarOf("th_1");
  const created = { ...booked } as Appointment;
  const at = Date.now();
  // A sync of the appointment runs (its creation, from an earlier payload), held at its calendar write.
  let release!: () => void;
  const held = new Promise<void>((r) => {
    release = r;
  });
  let holding = false;
  x.world.google.faults.holdNext(/^POST .*\/events$/, async () => {
    holding = true;
    await held;
  });
  const first = x.app.engine.settle(id, {
    reason: "appointment.created",
    priority: "webhook",
    origin: "booking",
    booking: { appt: created, at: at - 1, first: true },
  });
  for (let i = 0; i < 100 && !holding; i++) await new Promise((r) => setTimeout(r, 10));
  expect(holding).toBe(true);
  // Meanwhile the appointment is cancelled; both webhooks carry the same created_at, the cancellation's arrives first.
  x.world.booking.cancel(id, "customer cancelled");
  const cancelled = x.app.engine.settle(id, {
    reason: "appointment.cancelled",
    priority: "webhook",
    origin: "booking",
    booking: { appt: { ...created, status: "cancelled" }, at },
  });
  const again = x.app.engine.settle(id, {
    reason: "appointment.created",
    priority: "webhook",
    origin: "booking",
    booking: { appt: created, at, first: true },
  });
  release();
  await Promise.all([first, cancelled, again]);
  await x.app.engine.idle();
  expect(x.world.booking.get(id)?.status).toBe("cancelled");
  expect(liveOf(x, cal, id)).toEqual([]);
});
