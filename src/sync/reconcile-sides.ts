// Owns reading both sides of the sync window for a reconciliation: the booking service's appointments (one listing,
// 100 a page) and the managed events of each calendar, with the calendars that could not be listed or used.
import PQueue from "p-queue";
import type { Appointment } from "../booking/schemas.ts";
import { APPOINTMENT_ID_PROPERTY } from "../calendar/ids.ts";
import type { TherapistConfig } from "../config/schema.ts";
import type { Logger } from "../log.ts";
import { StoreRecordUnreadableError } from "../store/store.ts";
import { CALENDAR_READS_AT_ONCE } from "./calendar-reads.ts";
import { describeError, isUnavailable } from "./errors.ts";
import type { LinkReader } from "./links.ts";
import type { Mapping } from "./mapping.ts";
import type { BookingPort, CalEvent } from "./types.ts";

export interface Window {
  from: string;
  to: string;
}

/**
 * The appointments in the window by id. A listing yields an appointment again when a later page showed it changed
 * (pages drift while the data changes): the last copy, the fresher, is the one kept.
 */
export async function listBookings(
  booking: BookingPort,
  window: Window,
  therapistId: string | undefined,
): Promise<Map<string, Appointment>> {
  const appointments = new Map<string, Appointment>();
  for await (const appt of booking.listAppointments(
    { dateFrom: window.from, dateTo: window.to, ...(therapistId ? { therapistId } : {}) },
    { priority: "reconcile" },
  )) {
    appointments.set(appt.id, appt);
  }
  return appointments;
}

export interface CalendarSide {
  /** Managed events by therapist, then by event id, of the calendars listed in full. */
  events: Map<string, Map<string, CalEvent>>;
  /** Calendars not listed this run: their side is what their incremental sync handed to the engine (the links). */
  incremental: Set<string>;
  /** Therapists whose calendar could not be listed: their events are left alone this run. */
  calendarErrors: Record<string, string>;
  /** Therapists whose calendar cannot be used at all now (credentials, quota pause): nothing is tried there. */
  unusable: Set<string>;
  /** Listed occurrences of series made of managed events (neither managed events nor strays). */
  occurrences: number;
}

/**
 * The managed events of each calendar in the window that `full` says to list. A calendar that cannot be listed is left
 * alone this run (nothing in it is deleted, nothing of it is written back); one that cannot be used at all is not
 * written to either. A calendar not listed is only checked for being usable (its credentials, a quota pause).
 */
export async function listCalendars(
  mapping: Mapping,
  therapists: readonly TherapistConfig[],
  window: Window,
  log: Logger,
  full: (therapistId: string) => boolean = () => true,
  atOnce = CALENDAR_READS_AT_ONCE,
): Promise<CalendarSide> {
  const events = new Map<string, Map<string, CalEvent>>();
  const incremental = new Set<string>();
  const calendarErrors: Record<string, string> = {};
  const unusable = new Set<string>();
  let occurrences = 0;
  // The listings take turns, a few at once (see CALENDAR_READS_AT_ONCE): the first run lists every calendar.
  const listings = new PQueue({ concurrency: Math.max(1, atOnce) });
  await Promise.all(
    therapists.map(async (t) => {
      const cal = mapping.calendarIfAny(t.therapist_id);
      if (!cal) {
        calendarErrors[t.therapist_id] = mapping.unavailableReason(t.therapist_id) ?? "no calendar";
        unusable.add(t.therapist_id);
        return;
      }
      if (!full(t.therapist_id)) {
        incremental.add(t.therapist_id);
        const health = cal.health?.();
        if (health?.credentials === "broken" || health?.pausedUntil !== undefined) {
          calendarErrors[t.therapist_id] = health?.lastError ?? "calendar not usable now";
          unusable.add(t.therapist_id);
        }
        return;
      }
      try {
        await listings.add(async () => {
          const byId = new Map<string, CalEvent>();
          for await (const ev of cal.listManaged({ timeMin: window.from, timeMax: window.to })) {
            // An occurrence of a series a therapist made of an event (it carries the event's properties): not an event
            // of its own. The series itself is read by the appointment's id and made a single event again.
            if (ev.recurringEventId) occurrences++;
            else if (ev.id) byId.set(ev.id, ev);
          }
          events.set(t.therapist_id, byId);
        });
      } catch (err) {
        calendarErrors[t.therapist_id] = describeError(err);
        if (isUnavailable(err)) unusable.add(t.therapist_id);
        log.error(
          { therapist_id: t.therapist_id, err: describeError(err) },
          "calendar could not be listed; left alone this run",
        );
      }
    }),
  );
  return { events, incremental, calendarErrors, unusable, occurrences };
}

/** Managed events no listed appointment accounts for (`claimed`: "therapist/eventId"), with their appointment's id. */
export async function unclaimed(
  events: ReadonlyMap<string, ReadonlyMap<string, CalEvent>>,
  claimed: ReadonlySet<string>,
  links: Pick<LinkReader, "appointmentOfEvent">,
  log: Logger,
): Promise<{ id: string; therapistId: string; event: CalEvent }[]> {
  const strays: { id: string; therapistId: string; event: CalEvent }[] = [];
  for (const [therapistId, byId] of events) {
    for (const [eventId, ev] of byId) {
      if (claimed.has(`${therapistId}/${eventId}`)) continue;
      let id = ev.extendedProperties?.private?.[APPOINTMENT_ID_PROPERTY];
      try {
        id ??= await links.appointmentOfEvent(eventId);
      } catch (err) {
        if (!(err instanceof StoreRecordUnreadableError)) throw err;
        // Whose event it is cannot be told: no stray (a deletion), and the rest of the run goes on.
        log.warn(
          { therapist_id: therapistId, event_id: eventId, table: err.table, key: err.key },
          `${err.message}; the event is left alone this run`,
        );
      }
      if (id) strays.push({ id, therapistId, event: ev });
    }
  }
  return strays;
}
