// Owns the shapes the simulated service answers with: one function per form the spec shows (list item, full Get form,
// create/update/cancel responses, webhook objects). Only the fields the spec lists, nothing more.
import { iso, type SimAppointment, type SimCustomer, type SimService, type SimTherapist } from "./model.ts";

export interface Lookup {
  service(id: string): SimService | undefined;
  therapist(id: string): SimTherapist | undefined;
  customer(id: string): SimCustomer | undefined;
}

type View = Record<string, unknown>;

/** Fields present after a cancellation, on the forms that carry them. */
function cancellation(a: SimAppointment): View {
  if (a.cancelled_at === undefined) return {};
  return {
    cancelled_at: a.cancelled_at,
    cancellation_reason: a.cancellation_reason ?? "",
    refund_amount: a.refund_amount ?? 0,
    refund_status: a.refund_status ?? "none",
  };
}

/** The view with the fields the appointment shows as null (SimAppointment.shownNull) set so. */
function nulled(a: SimAppointment, v: View): View {
  for (const k of a.shownNull ?? []) v[k] = null;
  return v;
}

/** GET /v1/appointments item. */
export function listItem(a: SimAppointment, l: Lookup): View {
  return nulled(a, {
    id: a.id,
    service_id: a.service_id,
    service_name: l.service(a.service_id)?.name ?? a.service_id,
    customer_id: a.customer_id,
    customer_name: l.customer(a.customer_id)?.name ?? "",
    therapist_id: a.therapist_id,
    therapist_name: l.therapist(a.therapist_id)?.name ?? a.therapist_id,
    start_time: iso(a.start),
    end_time: iso(a.end),
    status: a.status,
    price: a.price,
    currency: a.currency,
    created_at: a.created_at,
  });
}

/** GET /v1/appointments/:id (the full form). */
export function fullForm(a: SimAppointment, l: Lookup): View {
  const c = l.customer(a.customer_id);
  return nulled(a, {
    id: a.id,
    service_id: a.service_id,
    service_name: l.service(a.service_id)?.name ?? a.service_id,
    customer_id: a.customer_id,
    customer: { id: a.customer_id, name: c?.name ?? "", email: c?.email ?? "", phone: c?.phone ?? "" },
    therapist_id: a.therapist_id,
    therapist_name: l.therapist(a.therapist_id)?.name ?? a.therapist_id,
    start_time: iso(a.start),
    end_time: iso(a.end),
    status: a.status,
    price: a.price,
    currency: a.currency,
    notes: a.notes,
    addons: a.addons.map((x) => ({ ...x })),
    payment_status: a.payment_status,
    created_at: a.created_at,
    updated_at: a.updated_at,
    ...cancellation(a),
  });
}

/** POST /v1/appointments response. */
export function createdForm(a: SimAppointment, l: Lookup): View {
  return {
    id: a.id,
    service_id: a.service_id,
    service_name: l.service(a.service_id)?.name ?? a.service_id,
    customer_id: a.customer_id,
    therapist_id: a.therapist_id,
    start_time: iso(a.start),
    end_time: iso(a.end),
    status: a.status,
    price: a.price,
    currency: a.currency,
    notes: a.notes,
    created_at: a.created_at,
  };
}

/** PATCH /v1/appointments/:id response. */
export function updatedForm(a: SimAppointment): View {
  return {
    id: a.id,
    start_time: iso(a.start),
    end_time: iso(a.end),
    status: a.status,
    notes: a.notes,
    updated_at: a.updated_at,
  };
}

/** POST /v1/appointments/:id/cancel response, and data.object of appointment.cancelled. */
export function cancelledForm(a: SimAppointment): View {
  return {
    id: a.id,
    status: a.status,
    cancelled_at: a.cancelled_at,
    cancellation_reason: a.cancellation_reason ?? "",
    refund_amount: a.refund_amount ?? 0,
    refund_status: a.refund_status ?? "none",
  };
}

/** data.object of appointment.created: the list form plus customer_email, without created_at. */
export function createdEvent(a: SimAppointment, l: Lookup): View {
  const { created_at: _, ...item } = listItem(a, l);
  return { ...item, customer_email: l.customer(a.customer_id)?.email ?? "" };
}

/**
 * data.object of appointment.updated / completed / no_show (not shown by the spec; the simulator's choice):
 * the list form plus updated_at. Receivers are expected to fetch the appointment anyway.
 */
export function changedEvent(a: SimAppointment, l: Lookup): View {
  return { ...listItem(a, l), updated_at: a.updated_at };
}

export function customerForm(c: SimCustomer): View {
  return { id: c.id, name: c.name, email: c.email, phone: c.phone ?? "" };
}
