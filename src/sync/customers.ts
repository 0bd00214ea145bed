// Owns what a customer's change means for the calendars: the customer's appointments in the sync window,
// each to be re-rendered (the listing carries the name; contact details need a full read of each appointment).
import { refusesDates } from "../booking/date-range.ts";
import type { Appointment } from "../booking/schemas.ts";
import type { Effects } from "./effects.ts";
import type { Action, BookingPort, SyncOutcome, SyncRequest } from "./types.ts";
import type { Settle } from "./work.ts";

const DAY = 86_400_000;

/** One sync request per upcoming appointment of the customer. */
export async function customerResyncs(
  fx: Pick<Effects, "mapping" | "links">,
  booking: BookingPort,
  customerId: string,
  /** The time before the listing is read. */
  now: number,
  base: Pick<SyncRequest, "reason" | "priority" | "origin" | "log">,
): Promise<[string, SyncRequest][]> {
  const config = fx.mapping.config;
  // From the sync window's start, as the reconciliation lists it: events of the past days (today's earlier sessions)
  // show the name too. With no end: an appointment booked beyond the window has its event (its webhooks mirror it),
  // and kept the old name (a deadname, say) until the window reached it, months later. The customer filter keeps the
  // list short; a service that refuses a range without an end gets the window's (the spec names no limits).
  const dateFrom = new Date(now - config.sync.window.past_days * DAY).toISOString();
  const dateTo = new Date(now + config.sync.window.future_days * DAY).toISOString();
  // By id, the last copy kept: the listing yields an appointment again when a later page showed it changed.
  const upcoming = new Map<string, Appointment>();
  const list = async (to?: string) => {
    const query = { customerId, dateFrom, ...(to ? { dateTo: to } : {}) };
    for await (const appt of booking.listAppointments(query, { priority: base.priority })) upcoming.set(appt.id, appt);
  };
  await list().catch(async (error: unknown) => {
    if (upcoming.size > 0 || !refusesDates(error)) throw error;
    await list(dateTo);
  });
  // The listing lacks contact details; with them on the event, each appointment is read in full.
  const full = config.event.include_customer_contact;
  // Each item says when it was read (at most `now`): a move or cancellation synced while the listing ran wrote a
  // newer link, and the item must be read again, not applied over it (the listing carries no updated_at).
  const out: [string, SyncRequest][] = [];
  for (const appt of upcoming.values()) {
    // No event to render: a therapist calbridge does not map (the appointment's own webhooks see to one left behind).
    if (!fx.mapping.therapist(appt.therapist_id)) continue;
    // A full read (webhook priority, against the booking service's per-minute budget) only where an event shows the
    // details: one customer's change read every appointment of theirs, cancelled ones and colleagues' included.
    if (full && !(await fx.links.get(appt.id))?.present) continue;
    out.push([appt.id, { ...base, ...(full ? {} : { booking: { appt, readAt: now } }) }]);
  }
  return out;
}

/**
 * Tells a customer re-render's callers once each appointment's sync is done: the first failure (a stop's rejection or
 * an outcome that failed), or success.
 */
export function tellWhenSettled(waiters: Settle[], customerId: string, syncs: Promise<SyncOutcome>[]): void {
  const none: Action = { kind: "none", appointmentId: customerId, reason: "customer re-rendered" };
  void Promise.allSettled(syncs).then((results) => {
    const failed = results.find((r) => r.status === "rejected" || !r.value.ok);
    for (const w of waiters) {
      if (failed?.status === "rejected") w.fail(failed.reason as Error);
      else w.resolve(failed?.status === "fulfilled" ? failed.value : { ok: true, action: none });
    }
  });
}
