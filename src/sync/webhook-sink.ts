// Owns the translation of booking webhooks into sync requests: payloads are hints (used only when complete and newer
// than what was applied), everything else is fetched; customer changes re-render that customer's upcoming events.
import type { Appointment } from "../booking/schemas.ts";
import type { Logger } from "../log.ts";
import type { BookingWebhookEvent } from "../webhooks/event.ts";
import type { EventSink } from "../webhooks/processor.ts";
import type { SyncEngine } from "./engine.ts";

const DAY = 86_400_000;

export class EngineSink implements EventSink {
  readonly #engine: SyncEngine;

  constructor(engine: SyncEngine) {
    this.#engine = engine;
  }

  async appointment(event: BookingWebhookEvent, log: Logger): Promise<void> {
    const object = (event.data?.object ?? {}) as Record<string, unknown>;
    const id = typeof object.id === "string" ? object.id : undefined;
    if (!id) {
      log.warn({ type: event.type }, "appointment event without data.object.id; nothing to sync");
      return;
    }
    const at = event.created_at ? Date.parse(event.created_at) : Number.NaN;
    let hint: Appointment | undefined;
    if (event.type === "appointment.created") hint = object as Appointment;
    else if (event.type === "appointment.cancelled") hint = { ...(object as Appointment), status: "cancelled" };
    // updated / completed / no_show: payloads are not described by the spec; the engine fetches the appointment.
    const action = await this.#engine.syncAppointment(id, {
      reason: event.type,
      priority: "webhook",
      ...(hint ? { appt: hint } : {}),
      ...(Number.isNaN(at) ? {} : { at }),
      log,
    });
    if (action.kind === "none" && action.reason.startsWith("failed")) {
      throw new Error(`sync of ${id} failed: ${action.reason}`);
    }
  }

  async customerUpdated(event: BookingWebhookEvent, log: Logger): Promise<void> {
    const object = (event.data?.object ?? {}) as Record<string, unknown>;
    const customerId =
      (typeof object.id === "string" && object.id) || (typeof object.customer_id === "string" && object.customer_id);
    if (!customerId) {
      log.warn("customer.updated without a customer id; nothing to re-render");
      return;
    }
    const now = this.#engine.clock.now();
    const dateTo = new Date(now + this.#engine.config.sync.window.future_days * DAY).toISOString();
    const upcoming: Appointment[] = [];
    for await (const appt of this.#engine.booking.listAppointments(
      { customerId, dateFrom: new Date(now).toISOString(), dateTo },
      { priority: "webhook" },
    )) {
      upcoming.push(appt);
    }
    // The listing lacks contact details; with them on the event, each appointment is read in full.
    const full = this.#engine.config.event.include_customer_contact;
    await Promise.all(
      upcoming.map((appt) =>
        this.#engine.syncAppointment(appt.id, {
          reason: "customer.updated",
          priority: "webhook",
          ...(full ? {} : { appt }),
          log,
        }),
      ),
    );
    log.info({ customer_id: customerId, appointments: upcoming.length }, "customer's upcoming events re-rendered");
  }
}
