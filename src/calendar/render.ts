// Owns the mapping of an appointment to the Google Calendar event body calbridge writes (a pure function).
import { bookingInstant } from "../booking/instant.ts";
import { APPOINTMENT_ID_PROPERTY, MANAGED_PROPERTY, MANAGED_VALUE, TIMES_PROPERTY } from "./ids.ts";
import { PLACEHOLDER_NAMES, PLACEHOLDERS, type RenderableAppointment } from "./placeholders.ts";
import { type EventReminders, type RemindersConfig, remindersBody, remindersPatch } from "./reminders.ts";
import {
  cleanText,
  cleanTitle,
  cutToBytes,
  dropControls,
  escapeHtml,
  fillTemplate,
  placeholdersOf,
} from "./template.ts";
import { timesMark } from "./times-mark.ts";

export { canonicalJson, type EventLike, fingerprint, instantOf, sameTime } from "./fingerprint.ts";
export type { RenderableAppointment } from "./placeholders.ts";

/** One therapist's calendar (the `therapists[]` entry of the configuration, as far as rendering needs it). */
export interface CalendarMapping {
  therapist_id: string;
  timezone: string;
  calendar_id: string;
}

/**
 * The `event:` section of the configuration as it applies to one therapist (the preset's templates resolved, the
 * therapist's reminders), plus `sync.cancelled_events`.
 */
export interface EventConfig {
  title: string;
  description: string;
  include_customer_contact: boolean;
  colors: { completed?: string; no_show?: string; cancelled?: string };
  cancelled_events: "delete" | "keep";
  /** Reminders to write; undefined: calbridge does not own the event's reminders (the therapist's stay). */
  reminders?: RemindersConfig | undefined;
}

export interface RenderedDateTime {
  dateTime: string;
  timeZone: string;
}

/** The event body calbridge writes; assignable to calendar_v3.Schema$Event. */
export interface RenderedEvent {
  summary: string;
  description: string;
  start: RenderedDateTime;
  end: RenderedDateTime;
  visibility: "private";
  transparency: "opaque" | "transparent";
  colorId?: string;
  status: "confirmed";
  extendedProperties: { private: Record<string, string> };
  /** Only when reminders are configured (then calbridge owns them). */
  reminders?: EventReminders;
}

/** The event fields calbridge owns; everything else on an event (location, guests, attachments, conference data,
 * reminders unless configured, ...) belongs to the therapist and is never written. README lists them. */
export const OWNED_FIELDS = [
  "summary",
  "description",
  "start",
  "end",
  "colorId",
  "transparency",
  "visibility",
  "status",
  "recurrence",
  "extendedProperties.private.calbridge_appointment_id",
  "extendedProperties.private.calbridge_managed",
  "extendedProperties.private.calbridge_times",
] as const;

/** Fields calbridge owns only where the configuration sets them: `reminders` with event.reminders (or a therapist's). */
export const OWNED_WHEN_CONFIGURED = ["reminders"] as const;

/**
 * A PATCH body that sets every field calbridge owns to what `body` says and touches nothing else: an owned field the
 * body leaves out is cleared (null: a colour no longer wanted, a series the therapist made of the event), and the
 * private extended properties merge per key, so a therapist's own properties stay.
 */
export function ownedPatch(body: OwnedLike, status?: "confirmed"): Record<string, unknown> {
  return {
    summary: body.summary ?? null,
    description: body.description ?? null,
    start: { ...body.start, date: null },
    end: { ...body.end, date: null },
    colorId: body.colorId ?? null,
    transparency: body.transparency ?? null,
    visibility: body.visibility ?? null,
    status: status ?? body.status ?? "confirmed",
    recurrence: null,
    extendedProperties: { private: { ...body.extendedProperties?.private } },
    ...(body.reminders ? { reminders: remindersPatch(body.reminders) } : {}),
  };
}

/** The owned part of an event body (a RenderedEvent, or any calendar_v3.Schema$Event). */
export interface OwnedLike {
  summary?: string | null;
  description?: string | null;
  start?: { dateTime?: string | null; timeZone?: string | null } | null;
  end?: { dateTime?: string | null; timeZone?: string | null } | null;
  colorId?: string | null;
  transparency?: string | null;
  visibility?: string | null;
  status?: string | null;
  extendedProperties?: { private?: Record<string, string> | null } | null;
  reminders?: EventReminders | null;
}

/**
 * Longest description written, in bytes of UTF-8. Google's limit is about 8,192 characters (Nylas, "Event
 * Description Limits in Google Calendar and Microsoft Exchange"; rjhorniii/ical2org#16 calls it "the documented limit
 * of 8K characters"), and a longer one is refused with 400, so the appointment would never appear. Counted in bytes,
 * with a margin, this holds however Google counts.
 */
export const DESCRIPTION_MAX_BYTES = 8000;
/**
 * Longest title written, in bytes of UTF-8. Google documents no limit for `summary`; 255 is what calendar clients
 * keep (Outlook's subject: phw198/OutlookGoogleCalendarSync#2202; tine20/tine20#5054), so a title also survives the
 * therapist's other devices, and a title Google might shorten silently cannot differ from what calbridge wrote.
 */
export const SUMMARY_MAX_BYTES = 255;

/** Google's "graphite", used for kept cancelled events unless `colors.cancelled` is configured. */
export const DEFAULT_CANCELLED_COLOR = "8";
export const CANCELLED_PREFIX = "Cancelled: ";
const FALLBACK_TITLE = "Appointment";

/** Placeholders templates may use (src/calendar/placeholders.ts says where each value comes from). */
export const TEMPLATE_FIELDS = PLACEHOLDER_NAMES;

export class RenderError extends Error {
  readonly appointmentId: string;
  constructor(appointmentId: string, message: string) {
    super(`appointment ${appointmentId}: ${message}`);
    this.name = "RenderError";
    this.appointmentId = appointmentId;
  }
}

function parseInstant(appt: RenderableAppointment, field: "start_time" | "end_time"): number {
  const text = appt[field];
  const ms = bookingInstant(text);
  if (Number.isNaN(ms)) throw new RenderError(appt.id, `${field} is missing or not ISO 8601 (${String(text)})`);
  return ms;
}

/** RFC 3339 in UTC without a zero millisecond part: 2026-11-23T09:00:00Z. */
function rfc3339(ms: number): string {
  return new Date(ms).toISOString().replace(".000Z", "Z");
}

/**
 * One formatter per time zone, reused: an Intl.DateTimeFormat holds native (ICU) memory that the garbage collector
 * does not see, so creating two per rendered event grew a 10,000-appointment reconciliation by hundreds of MB.
 */
const formatters = new Map<string, Intl.DateTimeFormat>();

function formatterFor(timeZone: string): Intl.DateTimeFormat {
  let f = formatters.get(timeZone);
  if (!f) {
    f = new Intl.DateTimeFormat("en-CA", {
      timeZone,
      year: "numeric",
      month: "2-digit",
      day: "2-digit",
      hour: "2-digit",
      minute: "2-digit",
      hourCycle: "h23",
    });
    formatters.set(timeZone, f);
  }
  return f;
}

function localParts(ms: number, timeZone: string): { date: string; time: string } {
  const parts = formatterFor(timeZone).formatToParts(new Date(ms));
  const get = (type: string) => parts.find((p) => p.type === type)?.value ?? "";
  return { date: `${get("year")}-${get("month")}-${get("day")}`, time: `${get("hour")}:${get("minute")}` };
}

/** Placeholders that come from the start and end in the therapist's time zone (computed, not read). */
const LOCAL_START = ["start_local", "date", "time"];

/**
 * The placeholder names a configuration's templates place, and the contact fields its description appends: the only
 * values a rendering computes. A reconciliation renders every appointment; computing all ~25 values (and formatting
 * both times in the therapist's time zone) for each, most of them never shown, was most of its garbage. Kept per
 * EventConfig object: the sync side keeps one per therapist and configuration, and none is changed after use.
 */
interface TemplateNames {
  /** Placed in the title or the description, and the contact fields when they are appended. */
  computed: ReadonlySet<string>;
  /** Placed in the description. */
  description: ReadonlySet<string>;
  /** Whether a placeholder of the start (or of the end) in the therapist's time zone is placed. */
  startLocal: boolean;
  endLocal: boolean;
}

const namesCache = new WeakMap<EventConfig, TemplateNames>();

function namesOf(options: EventConfig): TemplateNames {
  let names = namesCache.get(options);
  if (!names) {
    const description = new Set(placeholdersOf(options.description));
    const computed = new Set([
      ...placeholdersOf(options.title),
      ...description,
      ...(options.include_customer_contact ? ["customer_email", "customer_phone"] : []),
    ]);
    names = {
      computed,
      description,
      startLocal: LOCAL_START.some((n) => computed.has(n)),
      endLocal: computed.has("end_local"),
    };
    namesCache.set(options, names);
  }
  return names;
}

function templateValues(
  appt: RenderableAppointment,
  times: { start: number; end: number },
  mapping: CalendarMapping,
  withContact: boolean,
  names: TemplateNames,
): Record<string, string | null | undefined> {
  const values: Record<string, string | null | undefined> = {
    id: appt.id,
    therapist_id: appt.therapist_id,
    start_time: appt.start_time,
    end_time: appt.end_time,
    status: appt.status,
  };
  if (names.startLocal) {
    const start = localParts(times.start, mapping.timezone);
    values.start_local = `${start.date} ${start.time}`;
    values.date = start.date;
    values.time = start.time;
  }
  if (names.endLocal) {
    const end = localParts(times.end, mapping.timezone);
    values.end_local = `${end.date} ${end.time}`;
  }
  for (const p of PLACEHOLDERS) {
    if (p.read && names.computed.has(p.name) && (withContact || !p.contact)) values[p.name] = p.read(appt);
  }
  return values;
}

/** Contact lines appended to the description when enabled, for contact fields the template does not place itself. */
function contactLines(values: Record<string, string | null | undefined>, used: ReadonlySet<string>): string[] {
  const lines: string[] = [];
  if (values.customer_email && !used.has("customer_email")) lines.push(`Email: ${inert(values.customer_email)}`);
  if (values.customer_phone && !used.has("customer_phone")) lines.push(`Phone: ${inert(values.customer_phone)}`);
  return lines;
}

/** A value from the booking service as it may appear in a description: no control characters, HTML escaped. */
const inert = (value: string) => escapeHtml(dropControls(value));

/**
 * The description: the template with its values made inert, the contact lines, and `notice` (a note calbridge adds,
 * e.g. why a therapist's change was undone) after a blank line; cut to DESCRIPTION_MAX_BYTES with a visible
 * ellipsis, taken from the templated part so that the notice and the contact lines are always shown whole.
 */
function renderDescription(
  template: string,
  placed: ReadonlySet<string>,
  values: Record<string, string | null | undefined>,
  notice: string | undefined,
): string {
  const filled = fillTemplate(template, values, inert);
  const contact = contactLines(values, placed);
  const main = cleanText(dropControls([filled, ...contact].join("\n")));
  const tail = notice ? cutToBytes(inert(notice).trim(), DESCRIPTION_MAX_BYTES / 2) : "";
  const room = tail ? DESCRIPTION_MAX_BYTES - Buffer.byteLength(`\n\n${tail}`, "utf8") : DESCRIPTION_MAX_BYTES;
  let body = cutToBytes(main, room);
  if (body !== main && contact.length > 0) {
    // Too long (notes of a pasted intake form): the templated part is cut, never the contact lines after it, which
    // are what include_customer_contact is for.
    const lines = cutToBytes(cleanText(dropControls(contact.join("\n"))), room / 4);
    const head = cleanText(dropControls(filled));
    body = `${cutToBytes(head, room - Buffer.byteLength(`\n${lines}`, "utf8"))}\n${lines}`;
  }
  return tail ? `${body}\n\n${tail}`.trim() : body;
}

/**
 * The event an appointment should have, or null when it should have none (cancelled, with `cancelled_events: delete`).
 * Private, no attendees, reminders only when configured, no customer contact unless enabled. Values from the booking service
 * are sanitised: control characters dropped everywhere, HTML escaped in the description (not in the admin's template
 * text, and not in the title, which Google shows as plain text); title and description are cut to Google's limits
 * with a visible ellipsis. `notice` is shown at the end of the description. Throws RenderError when the appointment
 * has no usable start/end time.
 */
export function renderEvent(
  appt: RenderableAppointment,
  mapping: CalendarMapping,
  options: EventConfig,
  notice?: string,
): RenderedEvent | null {
  const status = appt.status ?? "confirmed";
  const cancelled = status === "cancelled";
  if (cancelled && options.cancelled_events === "delete") return null;

  const times = { start: parseInstant(appt, "start_time"), end: parseInstant(appt, "end_time") };
  if (times.end <= times.start) throw new RenderError(appt.id, "end_time is not after start_time");

  const names = namesOf(options);
  const values = templateValues(appt, times, mapping, options.include_customer_contact, names);
  const title = cleanTitle(dropControls(fillTemplate(options.title, values))) || FALLBACK_TITLE;
  const description = renderDescription(options.description, names.description, values, notice);

  let colorId: string | undefined;
  if (cancelled) colorId = options.colors.cancelled ?? DEFAULT_CANCELLED_COLOR;
  else if (status === "completed") colorId = options.colors.completed;
  else if (status === "no_show") colorId = options.colors.no_show;

  const start = rfc3339(times.start);
  const end = rfc3339(times.end);
  // The times are marked as calbridge's own (times-mark.ts): kept out of the fingerprint, so no event is rewritten for
  // it; each write that happens anyway carries it.
  const marks = { [APPOINTMENT_ID_PROPERTY]: appt.id, [MANAGED_PROPERTY]: MANAGED_VALUE };
  const event: RenderedEvent = {
    summary: cutToBytes(cancelled ? CANCELLED_PREFIX + title : title, SUMMARY_MAX_BYTES),
    description,
    start: { dateTime: start, timeZone: mapping.timezone },
    end: { dateTime: end, timeZone: mapping.timezone },
    visibility: "private",
    transparency: cancelled ? "transparent" : "opaque",
    status: "confirmed",
    extendedProperties: { private: { ...marks, [TIMES_PROPERTY]: timesMark(start, end) } },
  };
  if (colorId) event.colorId = colorId;
  if (options.reminders !== undefined) event.reminders = remindersBody(options.reminders);
  return event;
}
