// Tests a customer.updated re-render racing a change of one of the customer's appointments. The re-render lists the
// customer's appointments once and hands each item to the engine as a booking hint; the items carried no read time,
// so an item read before a move (or a cancellation) whose appointment.updated was synced first was applied over it:
// the event went back to the old time, or came back for a cancelled appointment, until the next reconciliation. Each
// item now says when it was read, and one older than the link is read again instead.
import { afterEach, describe, expect, it } from "vitest";
import { eventIdFor } from "../../src/calendar/ids.ts";
import type { ConfigInput } from "../../src/config/schema.ts";
import { silentLogger } from "../../src/log.ts";
import { customerResyncs } from "../../src/sync/customers.ts";
import { EngineSink } from "../../src/sync/webhook-sink.ts";
import type { BookingWebhookEvent } from "../../src/webhooks/event.ts";
import { DAY, type Harness, harness, iso } from "./support.ts";

let h: Harness | undefined;

/** A built-in privacy preset whose fields a list item carries in full (no notes): the hint is used without a read. */
const initials = (c: ConfigInput) => {
  c.event = { ...c.event, preset: "initials" };
};
afterEach(async () => {
  await h?.close();
  h = undefined;
});

const eventsOf = (x: Harness, id: string) =>
  x.world.booking.events.filter(
    (e) => (e.data as { object: { id?: string } }).object.id === id,
  ) as unknown as BookingWebhookEvent[];

/**
 * An appointment at 10:00 three days ahead, mirrored by its appointment.created, and a customer.updated whose listing of
 * the customer's appointments is read now (its syncs not run yet: the caller runs `resyncs` after its change).
 */
async function listedBeforeAChange(x: Harness) {
  const start = new Date(Date.now() + 3 * DAY);
  start.setUTCHours(10, 0, 0, 0);
  const a = x.world.booking.create(
    { therapist_id: "th_1", start_time: start.toISOString(), customer: { name: "Ada Old", email: "ada@example.com" } },
    { force: true },
  );
  const id = String(a.id);
  const customerId = String(a.customer_id);
  const sink = new EngineSink(x.app.engine);
  await sink.appointment(eventsOf(x, id)[0]!, silentLogger); // created: the event at 10:00
  x.world.booking.updateCustomer(customerId, { name: "Ada New" });
  const base = { reason: "customer.updated", priority: "webhook" as const, origin: "booking" as const };
  const resyncs = await customerResyncs(x.app.sync.fx, x.app.booking, customerId, Date.now(), base);
  // Then the re-render's syncs run, as #runCustomer hands them over (settle per listed appointment).
  const runResyncs = async () => {
    for (const [apptId, request] of resyncs) await x.app.engine.settle(apptId, request);
  };
  return { id, start, sink, runResyncs };
}

describe("customer.updated re-render racing an appointment change", () => {
  it("a listing read before a move does not move the event back after the move was synced (event.preset: initials)", async () => {
    h = await harness({ therapists: 1, configure: initials });
    const { id, start, sink, runResyncs } = await listedBeforeAChange(h);
    // Meanwhile the appointment is moved, and its appointment.updated is processed first.
    const moved = start.getTime() + 2 * 3_600_000;
    h.world.booking.move(id, iso(moved), { force: true });
    await sink.appointment(eventsOf(h, id).find((e) => e.type === "appointment.updated")!, silentLogger);
    const cal = h.world.calendarOf("th_1");
    const at = () =>
      Date.parse((h!.world.google.event(cal, eventIdFor(id)) as { start: { dateTime: string } }).start.dateTime);
    expect(at()).toBe(moved);
    await runResyncs();
    expect(at()).toBe(moved); // the booking is at 12:00; the calendar must not go back to 10:00
  });

  it("a listing read before a cancellation does not bring the cancelled appointment's event back", async () => {
    h = await harness({ therapists: 1, configure: initials });
    const { id, sink, runResyncs } = await listedBeforeAChange(h);
    h.world.booking.cancel(id, "changed plans");
    await sink.appointment(eventsOf(h, id).find((e) => e.type === "appointment.cancelled")!, silentLogger);
    expect(h.live("th_1")).toHaveLength(0);
    await runResyncs();
    expect(h.live("th_1")).toHaveLength(0);
  });
});
