// Owns the `{placeholder}` names event templates may use: how each value is read from an appointment (and when the
// form at hand does not carry it), which forms of the booking API carry it, and which ones are customer details.

/**
 * The appointment fields placeholders read: structurally compatible with the booking client's `Appointment`
 * (src/booking/schemas.ts), nulls included, so any parsed appointment can be passed without a cast.
 */
export interface RenderableAppointment {
  id: string;
  service_id?: string | null;
  service_name?: string | null;
  customer_id?: string | null;
  customer?: { id?: string | null; name?: string | null; email?: string | null; phone?: string | null } | null;
  customer_name?: string | null;
  customer_email?: string | null;
  therapist_id?: string | null;
  therapist_name?: string | null;
  start_time?: string | null;
  end_time?: string | null;
  status?: string | null;
  notes?: string | null;
  addons?: unknown[] | null;
  updated_at?: string | null;
  cancelled_at?: string | null;
  cancellation_reason?: string | null;
  price?: number | null;
  currency?: string | null;
}

/**
 * The forms of an appointment the booking API gives (booking-api-spec.md): the appointment.created payload, the
 * appointment.cancelled payload, a list item of GET /v1/appointments, and the full form of GET /v1/appointments/:id.
 */
export type Form = "created" | "cancelled" | "list" | "full";

export interface Placeholder {
  name: string;
  /**
   * The value in `appt`; undefined when the form at hand does not carry it (null or "" when it does, empty). Core
   * placeholders (`times`) are computed by the renderer from the times and the therapist's time zone instead.
   */
  read?(appt: RenderableAppointment): string | null | undefined;
  /** Computed from what the link keeps (id, times, status, therapist): every form that identifies it carries it. */
  core?: true;
  /** Forms whose fields give the value (README's table). */
  forms: readonly Form[];
  /** A customer detail (`doctor` warns where others can see event details); a pseudonym is not one. */
  customer?: "detail" | "pseudonym";
  /** Rendered only with event.include_customer_contact (empty otherwise, and never asked for). */
  contact?: true;
  /** What it shows (README's table). */
  what: string;
}

/** The customer's name as the form gives it: `customer_name` (payloads, list items) or `customer.name` (full form). */
function customerName(a: RenderableAppointment): string | null | undefined {
  return a.customer_name !== undefined ? a.customer_name : a.customer === undefined ? undefined : a.customer?.name;
}

const words = (name: string) => name.trim().split(/\s+/).filter(Boolean);

const graphemes = new Intl.Segmenter(undefined, { granularity: "grapheme" });

/**
 * A word's first letter as a reader sees it (one grapheme: a letter with its accents), not its first code point: a
 * decomposed "Ä" lost its dots, and a right-to-left mark before a Hebrew name was taken for its initial.
 */
function initialOf(word: string): string {
  for (const { segment } of graphemes.segment(word)) if (/^\p{L}/u.test(segment)) return segment;
  return "";
}

/** Element names of `addons` (the spec does not show an element's shape: a string, or an object's name or id). */
function addonNames(addons: unknown[] | null | undefined): string | null | undefined {
  if (addons == null) return addons;
  return addons
    .map((x) => {
      if (typeof x === "string") return x;
      if (x !== null && typeof x === "object") {
        const o = x as Record<string, unknown>;
        return typeof o.name === "string" ? o.name : typeof o.id === "string" ? o.id : "";
      }
      return "";
    })
    .filter(Boolean)
    .join(", ");
}

const price = (a: RenderableAppointment) =>
  a.price === undefined ? undefined : a.price === null ? null : String(a.price);
const ALL: readonly Form[] = ["created", "cancelled", "list", "full"];
const WITH_TIMES: readonly Form[] = ["created", "list", "full"];
const PAYLOAD_LIST_FULL: readonly Form[] = ["created", "list", "full"];

/** Every placeholder, in README's order. */
export const PLACEHOLDERS: readonly Placeholder[] = [
  { name: "id", core: true, forms: ALL, what: "the appointment id" },
  { name: "service_id", read: (a) => a.service_id, forms: PAYLOAD_LIST_FULL, what: "the service id" },
  { name: "service_name", read: (a) => a.service_name, forms: PAYLOAD_LIST_FULL, what: "the service's name" },
  {
    name: "customer_id",
    read: (a) => (a.customer_id !== undefined ? a.customer_id : a.customer === undefined ? undefined : a.customer?.id),
    forms: PAYLOAD_LIST_FULL,
    customer: "pseudonym",
    what: "the booking service's customer id",
  },
  {
    name: "customer_name",
    read: customerName,
    forms: PAYLOAD_LIST_FULL,
    customer: "detail",
    what: "the customer's full name",
  },
  {
    name: "customer_first_name",
    read: (a) => {
      const name = customerName(a);
      return name == null ? name : (words(name)[0] ?? "");
    },
    forms: PAYLOAD_LIST_FULL,
    customer: "detail",
    what: "the first word of the customer's name",
  },
  {
    name: "customer_initials",
    read: (a) => {
      const name = customerName(a);
      return name == null
        ? name
        : words(name.normalize("NFC").replace(/\p{Cf}/gu, ""))
            .map((w) => initialOf(w))
            .filter((i) => i !== "")
            .map((i) => `${i.toUpperCase()}.`)
            .join("");
    },
    forms: PAYLOAD_LIST_FULL,
    customer: "pseudonym",
    what: "the initials of the customer's name, e.g. `M.M.`",
  },
  {
    name: "customer_email",
    read: (a) =>
      a.customer_email !== undefined ? a.customer_email : a.customer === undefined ? undefined : a.customer?.email,
    forms: ["created", "full"],
    customer: "detail",
    contact: true,
    what: "the customer's e-mail (only with `include_customer_contact`)",
  },
  {
    name: "customer_phone",
    read: (a) => (a.customer === undefined ? undefined : a.customer?.phone),
    forms: ["full"],
    customer: "detail",
    contact: true,
    what: "the customer's phone (only with `include_customer_contact`)",
  },
  { name: "therapist_id", core: true, forms: WITH_TIMES, what: "the therapist id" },
  { name: "therapist_name", read: (a) => a.therapist_name, forms: PAYLOAD_LIST_FULL, what: "the therapist's name" },
  { name: "start_time", core: true, forms: WITH_TIMES, what: "start, ISO 8601 as the booking service sent it" },
  { name: "end_time", core: true, forms: WITH_TIMES, what: "end, ISO 8601 as the booking service sent it" },
  {
    name: "start_local",
    core: true,
    forms: WITH_TIMES,
    what: "start in the therapist's time zone, `2026-11-23 10:00`",
  },
  { name: "end_local", core: true, forms: WITH_TIMES, what: "end in the therapist's time zone" },
  { name: "date", core: true, forms: WITH_TIMES, what: "start date in the therapist's time zone, `2026-11-23`" },
  { name: "time", core: true, forms: WITH_TIMES, what: "start time in the therapist's time zone, `10:00`" },
  { name: "status", core: true, forms: ALL, what: "`confirmed`, `cancelled`, `completed`, ..." },
  { name: "notes", read: (a) => a.notes, forms: ["full"], customer: "detail", what: "the booking notes" },
  { name: "addons", read: (a) => addonNames(a.addons), forms: ["full"], what: "the add-ons, comma-separated" },
  { name: "price", read: price, forms: PAYLOAD_LIST_FULL, what: "the price, in the booking service's unit" },
  { name: "currency", read: (a) => a.currency, forms: PAYLOAD_LIST_FULL, what: "the currency code" },
  {
    name: "cancellation_reason",
    read: (a) => a.cancellation_reason,
    forms: ["cancelled", "full"],
    what: "why it was cancelled (after a cancellation)",
  },
  {
    name: "cancelled_at",
    read: (a) => a.cancelled_at,
    forms: ["cancelled", "full"],
    what: "when it was cancelled (after a cancellation)",
  },
  { name: "updated_at", read: (a) => a.updated_at, forms: ["full"], what: "when the booking last changed" },
];

export const PLACEHOLDER_NAMES: readonly string[] = PLACEHOLDERS.map((p) => p.name);

const BY_NAME = new Map(PLACEHOLDERS.map((p) => [p.name, p]));

export function placeholder(name: string): Placeholder | undefined {
  return BY_NAME.get(name);
}
