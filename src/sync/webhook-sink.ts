// Owns the translation of booking webhooks into sync requests: payloads are hints (used only when complete and newer
// than what was applied; a creation's only while the link, if any, holds the state as booked), everything else is
// fetched; customer changes re-render that customer's upcoming events.
// Each call resolves when the engine is done with the request (synced, or recorded as a dead letter), so the inbox
// marks the event done only then; it rejects when the engine stops first, and the event stays in the inbox.
import { bookingInstant } from "../booking/instant.ts";
import type { Appointment } from "../booking/schemas.ts";
import type { Logger } from "../log.ts";
import type { BookingWebhookEvent } from "../webhooks/event.ts";
import type { EventSink } from "../webhooks/processor.ts";
import type { SyncEngine } from "./engine.ts";
import type { BookingHint } from "./types.ts";

export class EngineSink implements EventSink {
  readonly #sync: Pick<SyncEngine, "settle" | "resyncCustomer">;

  constructor(sync: Pick<SyncEngine, "settle" | "resyncCustomer">) {
    this.#sync = sync;
  }

  async appointment(event: BookingWebhookEvent, log: Logger): Promise<void> {
    const object = (event.data?.object ?? {}) as Record<string, unknown>;
    const id = typeof object.id === "string" ? object.id : undefined;
    if (!id) {
      log.warn({ type: event.type }, "appointment event without data.object.id; nothing to sync");
      return;
    }
    const at = bookingInstant(event.created_at);
    const booking: BookingHint = Number.isNaN(at) ? {} : { at };
    if (event.type === "appointment.created") {
      booking.appt = object as Appointment;
      booking.first = true; // the state as booked: a link holding another one is newer, even with an older clock
    } else if (event.type === "appointment.cancelled")
      booking.appt = { ...(object as Appointment), status: "cancelled" };
    // updated / completed / no_show: payloads are not described by the spec; the engine fetches the appointment.
    await this.#sync.settle(id, { reason: event.type, priority: "webhook", origin: "booking", booking, log });
  }

  async customerUpdated(event: BookingWebhookEvent, log: Logger): Promise<void> {
    const object = (event.data?.object ?? {}) as Record<string, unknown>;
    const customerId =
      (typeof object.id === "string" && object.id) || (typeof object.customer_id === "string" && object.customer_id);
    if (!customerId) {
      log.warn("customer.updated without a customer id; nothing to re-render");
      return;
    }
    await this.#sync.resyncCustomer(customerId, {
      reason: "customer.updated",
      priority: "webhook",
      origin: "booking",
      log,
    });
  }
}
