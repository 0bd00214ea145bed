// Owns what the webhook path needs to know of a delivered event: a loose zod schema (unknown fields kept), parsing
// of a verified body, and the routing facts derived from it (kind of event, the appointment it concerns).
import { z } from "zod";

const MAX_ID_LENGTH = 200;

const isRecord = (value: unknown): value is Record<string, unknown> =>
  typeof value === "object" && value !== null && !Array.isArray(value);

/**
 * A JSON object whose members are not looked at, taken as it is. `z.record(z.string(), z.unknown())` says the same of
 * parsed JSON (its keys are strings, and anything is unknown) but builds a copy, running two schemas per member: the
 * larger part of validating a delivery, which is on the path to its 2xx.
 */
const anyObject = () => z.custom<Record<string, unknown>>(isRecord, { message: "Invalid input: expected an object" });

/**
 * Loose on purpose: payloads are hints, and the sync engine fetches what it needs. Only what routes an event is
 * required (its id, its type, an object to find the appointment's id in). A hint-only field (`created_at`,
 * `data.previous_attributes`) that is null or of another shape is dropped, not a reason to refuse the event: a signed
 * event refused here is set aside and acknowledged, so the change it announces would be lost until the next
 * reconciliation, and the spec shows these fields on some events only ("not shown" for the rest).
 */
export const BookingWebhookEventSchema = z.looseObject({
  id: z.string().min(1).max(MAX_ID_LENGTH),
  type: z.string().min(1).max(MAX_ID_LENGTH),
  created_at: z.string().optional().catch(undefined),
  data: z
    .looseObject({
      object: anyObject().default({}),
      previous_attributes: anyObject().optional().catch(undefined),
    })
    .default({ object: {} }),
});

export type BookingWebhookEvent = z.infer<typeof BookingWebhookEventSchema>;

export const APPOINTMENT_TYPES = [
  "appointment.created",
  "appointment.updated",
  "appointment.cancelled",
  "appointment.completed",
  "appointment.no_show",
] as const;

export type EventKind = "appointment" | "customer" | "ignored" | "unknown";

const KNOWN_IGNORED = new Set(["customer.created"]);

const objectIdOf = (object: Record<string, unknown> | undefined): string | undefined => {
  const id = object?.["id"];
  return typeof id === "string" && id !== "" ? id : undefined;
};

/**
 * The kind of an event of `type` whose `data.object` is `object`. An `appointment.*` type the spec does not list
 * (appointment.rescheduled, appointment.confirmed, one added later) that names an appointment is an appointment
 * event too: a webhook only says which appointment to sync, and its payload is not used (the engine reads the
 * appointment). Without an id it is unknown: acknowledged and ignored, as any other unlisted type.
 */
export function kindOf(type: string, object?: Record<string, unknown>): EventKind {
  if ((APPOINTMENT_TYPES as readonly string[]).includes(type)) return "appointment";
  if (type === "customer.updated") return "customer";
  if (type.startsWith("payment.") || type.startsWith("gift_card.") || KNOWN_IGNORED.has(type)) return "ignored";
  if (type.startsWith("appointment.") && objectIdOf(object)) return "appointment";
  return "unknown";
}

/** Whether the spec lists the type (an appointment event of another type is synced, its payload not used). */
export const isListedType = (type: string): boolean =>
  (APPOINTMENT_TYPES as readonly string[]).includes(type) || type === "customer.updated";

/** The appointment an event concerns (`data.object.id` of appointment.* events). */
export function appointmentIdOf(event: BookingWebhookEvent): string | undefined {
  return kindOf(event.type, event.data.object) === "appointment" ? objectIdOf(event.data.object) : undefined;
}

/**
 * Deepest nesting of objects and arrays a delivery may have. The booking service's events nest about five levels
 * (event, data, object, customer, ...); the store's serializer recurses once per level and a body nested hundreds of
 * thousands of levels deep (still under the size limit) would overflow its stack.
 */
export const MAX_JSON_DEPTH = 32;

/** Whether the JSON text nests objects and arrays deeper than `max`; one pass over the bytes, no recursion. */
export function nestedDeeperThan(raw: Buffer, max: number): boolean {
  let depth = 0;
  let inString = false;
  for (let i = 0; i < raw.length; i++) {
    const c = raw[i];
    if (inString) {
      if (c === 0x5c)
        i++; // backslash: skip the escaped character
      else if (c === 0x22) inString = false;
    } else if (c === 0x22) inString = true;
    else if (c === 0x7b || c === 0x5b) {
      if (++depth > max) return true;
    } else if (c === 0x7d || c === 0x5d) depth--;
  }
  return false;
}

/**
 * A verified body's parse: the event; or malformed (kept as a dead letter, acknowledged); or over a structural limit
 * (`limit`: refused with a 4xx, as a body over the size limit is).
 */
export type ParsedBody = { ok: true; event: BookingWebhookEvent } | { ok: false; reason: string; limit?: true };

/**
 * A body's text. A leading UTF-8 byte order mark is dropped: JSON.parse refuses it, and RFC 8259 (8.1) lets a parser
 * ignore it, so a signed delivery that starts with one is an event, not a malformed body (the signature is checked on
 * the bytes as they came).
 */
const textOf = (raw: Buffer): string =>
  raw[0] === 0xef && raw[1] === 0xbb && raw[2] === 0xbf ? raw.toString("utf8", 3) : raw.toString("utf8");

/** Parses a verified body; a failure is a malformed delivery (dead letter), not a transient error. */
export function parseEventBody(raw: Buffer): ParsedBody {
  if (nestedDeeperThan(raw, MAX_JSON_DEPTH)) {
    return { ok: false, reason: `JSON nested deeper than ${MAX_JSON_DEPTH} levels`, limit: true };
  }
  let json: unknown;
  try {
    json = JSON.parse(textOf(raw));
  } catch {
    return { ok: false, reason: "body is not JSON" };
  }
  const result = BookingWebhookEventSchema.safeParse(json);
  if (!result.success) {
    const issue = result.error.issues[0];
    return { ok: false, reason: `not a webhook event: ${issue?.path.join(".") || "(root)"}: ${issue?.message}` };
  }
  const event = result.data;
  if (kindOf(event.type) === "appointment" && !appointmentIdOf(event)) {
    return { ok: false, reason: `${event.type} without data.object.id` };
  }
  return { ok: true, event };
}

/** Reads `id` from an unverified body for a log line only; never trusted for anything else. */
export function peekEventId(raw: Buffer): string | undefined {
  if (raw.length > 1_000_000) return undefined;
  try {
    const id = (JSON.parse(textOf(raw)) as { id?: unknown } | null)?.id;
    return typeof id === "string" ? id.slice(0, MAX_ID_LENGTH) : undefined;
  } catch {
    return undefined;
  }
}
