// Owns the zod schemas of the booking API's bodies: loose (unknown fields kept), fields the spec marks optional or "not shown" optional.
import { z } from "zod";

/**
 * A field the sync only shows or uses as a hint: a value of another type (null where the spec shows none, a price as a
 * string, ...) is dropped, not a reason to refuse the appointment (null stays where it says "none", as for notes). The spec shows few of their values, and one odd item would otherwise fail
 * its whole page, and with it every reconciliation, until the service changes.
 */
const hint = <T extends z.ZodType>(schema: T) => schema.optional().catch(undefined);

/**
 * A field the sync decides by: its type is kept (a value of another type refuses the appointment), but null is read as
 * absent. The spec types these as strings without saying they are always there; refused, one null would fail its
 * whole page, and with it every reconciliation.
 */
const absentIfNull = <T extends z.ZodType>(schema: T) =>
  z.preprocess((v) => (v === null ? undefined : v), schema.optional());

/** The appointment in any of its forms (list item, full Get form, create/update/cancel responses, webhook object). */
export const Appointment = z.looseObject({
  id: z.string().min(1),
  service_id: hint(z.string()),
  service_name: hint(z.string()),
  customer_id: hint(z.string()),
  customer: hint(
    z.looseObject({
      id: hint(z.string()),
      name: hint(z.string()),
      email: hint(z.string()),
      phone: hint(z.string().nullable()),
    }),
  ),
  customer_name: hint(z.string()),
  customer_email: hint(z.string()),
  // What the sync decides by: the therapist, the times and the status keep their types. null (an unassigned
  // appointment, one without a fixed end) is read as absent, i.e. unknown: a list item then takes the link's value
  // (snapshot.ts merge), an unlinked one without a therapist is unmapped, one without times is read in full.
  therapist_id: absentIfNull(z.string()),
  therapist_name: hint(z.string()),
  start_time: absentIfNull(z.string()),
  end_time: absentIfNull(z.string()),
  // Not an enum: the spec names confirmed/cancelled/completed, and other values (e.g. "no_show") may appear.
  status: absentIfNull(z.string()),
  price: hint(z.number()),
  currency: hint(z.string()),
  notes: hint(z.string().nullable()),
  addons: hint(z.array(z.unknown())),
  payment_status: hint(z.string()),
  created_at: hint(z.string()),
  updated_at: hint(z.string()),
  cancelled_at: hint(z.string().nullable()),
  cancellation_reason: hint(z.string().nullable()),
  refund_amount: hint(z.number().nullable()),
  refund_status: hint(z.string().nullable()),
});
export type Appointment = z.infer<typeof Appointment>;

/**
 * `meta` of a list (every field tolerated missing, null or of another type: the client then stops on a short page).
 * The spec types them as integers; one null would otherwise fail every listing, and with it every reconciliation.
 */
export const ListMeta = z.looseObject({
  page: hint(z.number()),
  per_page: hint(z.number()),
  total: hint(z.number()),
  total_pages: hint(z.number()),
  request_id: hint(z.string()),
});
export type ListMeta = z.infer<typeof ListMeta>;

/** `meta` on a single-object response: only request_id is ever shown (a null one would fail every read). */
export const Meta = z.looseObject({ request_id: hint(z.string()) });

/** Only `code` decides: a null message must not turn a refusal (409 slot_unavailable) into an unreadable answer. */
export const ErrorBody = z.looseObject({
  code: z.string(),
  message: hint(z.string()),
  details: hint(z.record(z.string(), z.unknown()).nullable()),
  request_id: hint(z.string()),
});

/** `{ "error": { code, message, details } }`, with an optional meta. */
export const ErrorEnvelope = z.looseObject({
  error: ErrorBody,
  meta: hint(Meta),
});
export type ErrorEnvelope = z.infer<typeof ErrorEnvelope>;

/** `{ "data": <T>, "meta"?: {...} }` */
export function singleEnvelope<T extends z.ZodType>(data: T) {
  return z.looseObject({ data, meta: hint(Meta) });
}

/** `{ "data": [<T>], "meta": {...} }` (meta tolerated missing). */
export function listEnvelope<T extends z.ZodType>(item: T) {
  return z.looseObject({ data: z.array(item), meta: hint(ListMeta) });
}

export const TimeSlot = z.looseObject({
  start_time: z.string(),
  end_time: z.string().optional(),
  therapist_id: z.string().optional(),
  therapist_name: z.string().optional(),
});
export type TimeSlot = z.infer<typeof TimeSlot>;

export const Availability = z.looseObject({
  date: z.string().optional(),
  service_id: z.string().optional(),
  slots: z.array(TimeSlot),
});
export type Availability = z.infer<typeof Availability>;

/** A delivered webhook event. `data.object` is kept as a loose record: its shape depends on the type. */
export const WebhookEvent = z.looseObject({
  id: z.string().min(1),
  type: z.string().min(1),
  created_at: z.string().optional(),
  data: z.looseObject({
    object: z.record(z.string(), z.unknown()),
    previous_attributes: z.record(z.string(), z.unknown()).optional(),
  }),
});
export type WebhookEvent = z.infer<typeof WebhookEvent>;
