// Owns the number the connect page confirms: the therapist's appointments in the sync window that get an event, as
// the booking service lists them now.
import type { BookingClient } from "../booking/client.ts";
import type { Config } from "../config/schema.ts";

const DAY = 86_400_000;

export async function countAppointments(
  booking: BookingClient,
  config: Config,
  therapistId: string,
  now: number,
): Promise<number> {
  const dateFrom = new Date(now - config.sync.window.past_days * DAY).toISOString();
  const dateTo = new Date(now + config.sync.window.future_days * DAY).toISOString();
  // By id, the last copy kept: the listing yields an appointment again when a later page showed it changed.
  const listed = new Map<string, string | undefined>();
  for await (const appt of booking.listAppointments({ dateFrom, dateTo, therapistId }, { priority: "webhook" })) {
    listed.set(appt.id, appt.status);
  }
  let n = 0;
  for (const status of listed.values()) {
    if (status === "cancelled" && config.sync.cancelled_events === "delete") continue;
    n++;
  }
  return n;
}
