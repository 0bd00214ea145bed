// Booking webhooks as hints: complete, newer payloads are used as they are; anything else is fetched; an older
// event never undoes a newer state; customer changes re-render that customer's upcoming events.
import { afterEach, describe, expect, it } from "vitest";
import { eventIdFor } from "../../src/calendar/ids.ts";
import type { ConfigInput } from "../../src/config/schema.ts";
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
const eventsOf = (x: Harness, id: string) =>
  x.world.booking.events.filter(
    (e) => (e.data as { object: { id?: string } }).object.id === id,
  ) as unknown as BookingWebhookEvent[];

describe("webhook hints", () => {
  it("applies appointment.created from its payload without fetching", async () => {
    h = await harness({ therapists: 1 });
    const a = h.world.booking.create({ therapist_id: "th_1", start_time: iso(Date.now() + DAY) }, { force: true });
    const sink = new EngineSink(h.app.engine);
    const [created] = eventsOf(h, String(a.id));
    await sink.appointment(created!, silentLogger);
    expect(gets(h)).toBe(0);
    expect(h.world.google.event(h.world.calendarOf("th_1"), eventIdFor(String(a.id)))?.status).toBe("confirmed");
  });

  it("an older event delivered late does not undo a newer state", async () => {
    h = await harness({ therapists: 1 });
    const a = h.world.booking.create({ therapist_id: "th_1", start_time: iso(Date.now() + DAY) }, { force: true });
    h.world.booking.cancel(String(a.id), "changed plans");
    const [created, cancelled] = eventsOf(h, String(a.id));
    expect(cancelled!.type).toBe("appointment.cancelled");
    const sink = new EngineSink(h.app.engine);
    await sink.appointment(cancelled!, silentLogger); // out of order: the cancellation first
    await sink.appointment(created!, silentLogger); // then the older creation
    const live = h.live("th_1");
    expect(live).toHaveLength(0);
    // And the right order still ends with no event.
    await sink.appointment(cancelled!, silentLogger);
    expect(h.live("th_1")).toHaveLength(0);
  });

  it("a cancellation delivered late, after the booking was restored and synced by a listing, removes nothing", async () => {
    h = await harness({ therapists: 1 });
    const a = h.world.booking.create({ therapist_id: "th_1", start_time: iso(Date.now() + DAY) }, { force: true });
    const id = String(a.id);
    const sink = new EngineSink(h.app.engine);
    await sink.appointment(eventsOf(h, id)[0]!, silentLogger);
    h.world.booking.cancel(id, "changed plans");
    const cancelled = eventsOf(h, id).find((e) => e.type === "appointment.cancelled")!;
    // The delivery fails and is retried for hours; meanwhile staff restore the appointment, and a reconciliation's
    // listing (its items carry no updated_at) syncs it: the link's last applied webhook is still the creation's.
    h.world.booking.restoreCancelled(id);
    await h.app.reconcile();
    expect(h.live("th_1")).toHaveLength(1);
    const reads = gets(h);
    await sink.appointment(cancelled, silentLogger);
    // A payload that would remove the event is checked first: the appointment is confirmed.
    expect(h.live("th_1")).toHaveLength(1);
    expect(gets(h)).toBe(reads + 1);
  });

  it("a duplicate delivery changes nothing the second time", async () => {
    h = await harness({ therapists: 1 });
    const a = h.world.booking.create({ therapist_id: "th_1", start_time: iso(Date.now() + DAY) }, { force: true });
    const sink = new EngineSink(h.app.engine);
    const [created] = eventsOf(h, String(a.id));
    await sink.appointment(created!, silentLogger);
    const writes = h.writes();
    await sink.appointment(created!, silentLogger);
    expect(h.writes()).toBe(writes);
  });

  it("appointment.updated is fetched (its payload is not described) and applied", async () => {
    h = await harness({ therapists: 1 });
    const start = Date.now() + 2 * DAY;
    const a = h.world.booking.create({ therapist_id: "th_1", start_time: iso(start) }, { force: true });
    const sink = new EngineSink(h.app.engine);
    await sink.appointment(eventsOf(h, String(a.id))[0]!, silentLogger);
    h.world.booking.move(String(a.id), iso(start + 3_600_000), { force: true });
    const updated = eventsOf(h, String(a.id)).find((e) => e.type === "appointment.updated")!;
    await sink.appointment(updated, silentLogger);
    expect(gets(h)).toBe(1);
    const ev = h.world.google.event(h.world.calendarOf("th_1"), eventIdFor(String(a.id)))!;
    expect(Date.parse(String((ev.start as { dateTime: string }).dateTime))).toBe(
      Math.floor((start + 3_600_000) / 1000) * 1000,
    );
  });

  it("customer.updated re-renders that customer's events in the sync window, earlier sessions included", async () => {
    h = await harness({ therapists: 1 });
    const customer = { name: "Ada Old", email: "ada@example.com" };
    const a = h.world.booking.create(
      { therapist_id: "th_1", start_time: iso(Date.now() + DAY), customer },
      { force: true },
    );
    // This morning's session (the window keeps sync.window.past_days), same customer.
    const earlier = h.world.booking.create(
      { therapist_id: "th_1", start_time: iso(Date.now() - 3 * 3_600_000), customer },
      { force: true },
    );
    await h.app.reconcile();
    const cal = h.world.calendarOf("th_1");
    const title = (id: unknown) => String(h!.world.google.event(cal, eventIdFor(String(id)))?.summary);
    expect(title(a.id)).toContain("Ada Old");
    expect(title(earlier.id)).toContain("Ada Old");
    h.world.booking.updateCustomer(String(a.customer_id), { name: "Ada New" });
    const event = h.world.booking.events.at(-1) as unknown as BookingWebhookEvent;
    expect(event.type).toBe("customer.updated");
    await new EngineSink(h.app.engine).customerUpdated(event, silentLogger);
    expect(title(a.id)).toContain("Ada New");
    expect(title(earlier.id)).toContain("Ada New");
  });

  describe("a retried appointment.created that arrives after a reconciliation", () => {
    // A preset whose templates list items render in full: no enrichment read follows the listing (or hides the bug).
    const initials = (c: ConfigInput) => {
      c.event = { ...(c.event ?? {}), preset: "initials" };
    };
    const startOf = (x: Harness, id: string) => {
      const ev = x.world.google.event(x.world.calendarOf("th_1"), eventIdFor(id));
      return Date.parse(String((ev?.start as { dateTime?: string } | undefined)?.dateTime));
    };
    const createdOf = (x: Harness, id: string) => eventsOf(x, id).find((e) => e.type === "appointment.created")!;

    it("does not move the event back to the time the appointment was booked at", async () => {
      h = await harness({ therapists: 1, configure: initials });
      const start = Math.floor((Date.now() + 2 * DAY) / 1000) * 1000;
      const id = String(h.world.booking.create({ therapist_id: "th_1", start_time: iso(start) }, { force: true }).id);
      h.world.booking.move(id, iso(start + 4 * 3_600_000), { force: true });
      // The webhooks were missed; the reconciliation brings the moved appointment in (from the listing, no reads).
      expect((await h.app.reconcile()).ok).toBe(true);
      expect(startOf(h, id)).toBe(start + 4 * 3_600_000);
      const reads = gets(h);
      await new EngineSink(h.app.engine).appointment(createdOf(h, id), silentLogger);
      expect(startOf(h, id), "the late creation's payload was applied over the newer state").toBe(
        start + 4 * 3_600_000,
      );
      expect(gets(h)).toBe(reads + 1); // the appointment was read instead
    });

    it("does not put a cancelled appointment back into the calendar", async () => {
      h = await harness({ therapists: 1, configure: initials });
      const id = String(
        h.world.booking.create({ therapist_id: "th_1", start_time: iso(Date.now() + 2 * DAY) }, { force: true }).id,
      );
      h.world.booking.cancel(id, "changed plans");
      expect((await h.app.reconcile()).ok).toBe(true);
      await new EngineSink(h.app.engine).appointment(createdOf(h, id), silentLogger);
      expect(h.live("th_1"), "a cancelled appointment shown as a booking").toHaveLength(0);
    });

    it("reads the appointment (one request) and writes nothing when it is as it was booked", async () => {
      // Its payload is never applied once a link exists: the customer may have been renamed since, and the old name
      // would come back (late-webhooks.test.ts). One read per late delivery is the price.
      h = await harness({ therapists: 1, configure: initials });
      const id = String(
        h.world.booking.create({ therapist_id: "th_1", start_time: iso(Date.now() + 2 * DAY) }, { force: true }).id,
      );
      expect((await h.app.reconcile()).ok).toBe(true);
      const writes = h.writes();
      await new EngineSink(h.app.engine).appointment(createdOf(h, id), silentLogger);
      expect(gets(h)).toBe(1);
      expect(h.writes()).toBe(writes);
      expect(h.live("th_1")).toHaveLength(1);
    });
  });
});
