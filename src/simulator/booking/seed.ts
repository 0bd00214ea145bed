// Owns bulk seeding of the simulator: many appointments over a date range, deterministic for a seed, no events.
import { iso, type SimAppointment } from "./model.ts";
import type { BookingStore } from "./store.ts";

const HOUR = 3_600_000;
const DAY = 24 * HOUR;

export interface SeedOptions {
  therapists: string[];
  count: number;
  from: string | number | Date;
  to: string | number | Date;
}

/**
 * Appointments on a 30-minute grid within working hours, overlap per therapist avoided where the range allows
 * (10 tries each). Past ones are completed, future ones confirmed, about 10% cancelled. Returns the new ids.
 */
export function seedAppointments(store: BookingStore, options: SeedOptions): string[] {
  const rng = store.rng;
  for (const t of options.therapists) store.addTherapist(t);
  const therapists = options.therapists.length > 0 ? options.therapists : [...store.therapists.keys()];
  if (therapists.length === 0) throw new RangeError("seed needs at least one therapist");
  const from = new Date(options.from).getTime();
  const to = new Date(options.to).getTime();
  const days = Math.max(1, Math.floor((to - from) / DAY));
  const firstDay = Math.floor(from / DAY) * DAY;
  const poolSize = Math.max(5, Math.ceil(options.count / 4));
  const pool = [...store.customers.values()].filter((c) => !c.blocked);
  while (pool.length < poolSize) pool.push(store.randomCustomer());
  const busy = new Map<string, [number, number][]>();
  const services = [...store.services.values()];
  const { start: h0, end: h1 } = store.workingHours;
  const now = store.now();
  const ids: string[] = [];
  for (let i = 0; i < options.count; i++) {
    const therapist = rng.pick(therapists);
    const service = rng.pick(services);
    const slots = Math.max(1, ((h1 - h0) * 60 - service.duration_minutes) / 30 + 1);
    let start = 0;
    let end = 0;
    for (let attempt = 0; attempt < 10; attempt++) {
      start = firstDay + rng.int(0, days - 1) * DAY + h0 * HOUR + rng.int(0, Math.floor(slots) - 1) * 30 * 60_000;
      end = start + service.duration_minutes * 60_000;
      const key = `${therapist}|${Math.floor(start / DAY)}`;
      const list = busy.get(key) ?? [];
      if (!list.some(([s, e]) => s < end && start < e)) {
        list.push([start, end]);
        busy.set(key, list);
        break;
      }
    }
    const cancelled = rng.next() < 0.1;
    const created = iso(Math.min(now, start) - rng.int(1, 30) * DAY);
    const a: SimAppointment = {
      id: store.newId("apt"),
      service_id: service.id,
      therapist_id: therapist,
      customer_id: rng.pick(pool).id,
      start,
      end,
      status: cancelled ? "cancelled" : end <= now ? "completed" : "confirmed",
      notes: rng.next() < 0.2 ? "Please use the side entrance." : "",
      addons: [],
      price: service.price,
      currency: service.currency,
      payment_status: "paid",
      created_at: created,
      updated_at: created,
    };
    if (cancelled) {
      a.cancelled_at = created;
      a.cancellation_reason = "Cancelled by customer";
      a.refund_amount = a.price;
      a.refund_status = "processing";
    }
    store.insert(a);
    ids.push(a.id);
  }
  return ids;
}
