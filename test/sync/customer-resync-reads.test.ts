// With event.include_customer_contact, a customer.updated read every listed appointment of the customer in full
// (GET /v1/appointments/:id at webhook priority), also those of therapists calbridge does not map and cancelled ones
// whose events are deleted: none of them has an event to re-render, yet each cost a request of the booking service's
// per-minute budget (11 here where 1 is needed; a customer with 200 appointments held other webhooks up for minutes).
import { afterEach, expect, it } from "vitest";
import { silentLogger } from "../../src/log.ts";
import { EngineSink } from "../../src/sync/webhook-sink.ts";
import type { BookingWebhookEvent } from "../../src/webhooks/event.ts";
import { DAY, type Harness, harness, iso } from "./support.ts";

let h: Harness | undefined;
afterEach(async () => {
  await h?.close();
  h = undefined;
});

const gets = (x: Harness) => x.world.booking.requests.filter((r) => r.route === "GET /v1/appointments/:id").length;

it("customer.updated reads only appointments that have an event to re-render", async () => {
  h = await harness({
    therapists: 2,
    mapped: ["th_1"],
    configure: (c) => {
      c.event = { ...c.event, include_customer_contact: true };
    },
  });
  const customer = { name: "Ada Old", email: "ada@example.com", phone: "+491" };
  const mine = h.world.booking.create(
    { therapist_id: "th_1", start_time: iso(Date.now() + DAY), customer },
    { force: true },
  );
  for (let i = 0; i < 6; i++)
    h.world.booking.create(
      { therapist_id: "th_2", start_time: iso(Date.now() + (2 + i) * DAY), customer },
      { force: true },
    );
  for (let i = 0; i < 4; i++) {
    const c = h.world.booking.create(
      { therapist_id: "th_1", start_time: iso(Date.now() + (10 + i) * DAY), customer },
      { force: true },
    );
    h.world.booking.cancel(String(c.id), "no");
  }
  expect((await h.app.reconcile()).ok).toBe(true);
  await h.app.engine.drained();
  h.world.booking.updateCustomer(String(mine.customer_id), { phone: "+492" });
  const updated = h.world.booking.events.at(-1) as unknown as BookingWebhookEvent;
  expect(updated.type).toBe("customer.updated");
  const before = gets(h);
  await new EngineSink(h.app.engine).customerUpdated(updated, silentLogger);
  const desc = h.world.google.events(h.world.calendarOf("th_1")).find((e) => e.status !== "cancelled")?.description;
  expect(String(desc)).toContain("+492");
  expect(gets(h) - before, "full reads spent on appointments with no event").toBe(1);
});
