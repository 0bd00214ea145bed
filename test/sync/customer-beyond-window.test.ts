// An appointment booked beyond sync.window.future_days has its event (its appointment.created webhook mirrors it),
// but a customer's re-render listed only the window, like the reconciliation: after a rename, that event kept the old
// name (a deadname, say) for months, until the window reached it. The customer's listing now has no end; a booking
// service that refuses a range without one (the spec names no limits) gets the window's.
import { afterEach, expect, it } from "vitest";
import { eventIdFor } from "../../src/calendar/ids.ts";
import { silentLogger } from "../../src/log.ts";
import { EngineSink } from "../../src/sync/webhook-sink.ts";
import type { BookingWebhookEvent } from "../../src/webhooks/event.ts";
import { DAY, type Harness, harness, iso } from "./support.ts";

let h: Harness | undefined;
afterEach(async () => {
  await h?.close();
  h = undefined;
});

/** Ada's appointments 3 and 120 days ahead, mirrored from their webhooks; then she is renamed. */
async function renamed(x: Harness) {
  const customer = { name: "Ada Old", email: "ada@example.com" };
  const sink = new EngineSink(x.app.engine);
  const booked = [3, 120].map((days) =>
    x.world.booking.create(
      { therapist_id: "th_1", start_time: iso(Date.now() + days * DAY), customer },
      { force: true },
    ),
  );
  for (const appt of booked) {
    const created = x.world.booking.events.find(
      (e) => e.type === "appointment.created" && (e.data as { object: { id: string } }).object.id === appt.id,
    ) as unknown as BookingWebhookEvent;
    await sink.appointment(created, silentLogger);
  }
  const cal = x.world.calendarOf("th_1");
  const titles = () => booked.map((a) => String(x.world.google.event(cal, eventIdFor(String(a.id)))?.summary));
  expect(titles().every((t) => t.includes("Ada Old"))).toBe(true);
  x.world.booking.updateCustomer(String(booked[0]!.customer_id), { name: "Ada New" });
  const updated = x.world.booking.events.at(-1) as unknown as BookingWebhookEvent;
  expect(updated.type).toBe("customer.updated");
  return { outcome: await sink.customerUpdated(updated, silentLogger), titles };
}

it("a renamed customer's event booked beyond the sync window gets the new name", async () => {
  h = await harness({ therapists: 1 });
  const { titles } = await renamed(h);
  expect(titles().map((t) => t.includes("Ada New"))).toEqual([true, true]);
});

it("a booking service that refuses a range without an end is asked for the window's", async () => {
  h = await harness({ therapists: 1 });
  h.world.booking.dateReading.maxRangeDays = 120;
  const { titles } = await renamed(h);
  // The window's appointment is renamed; the one beyond it waits for the window, as before.
  expect(titles().map((t) => t.includes("Ada New"))).toEqual([true, false]);
});
