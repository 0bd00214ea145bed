// Owns where a reconciliation looks for each listed appointment's event, and the look-ups it sends for events missing
// from their calendar's listing (deleted by the therapist, or moved out of the window): what each found, and what a
// failed one leaves alone. A look-up that fails is never taken for "the event is gone".
import PQueue from "p-queue";
import type { Appointment } from "../booking/schemas.ts";
import { eventIdFor } from "../calendar/ids.ts";
import type { Logger } from "../log.ts";
import { describeError, isUnavailable } from "./errors.ts";

import type { Mapping } from "./mapping.ts";
import { misplacedIn } from "./placement.ts";
import type { CalendarSide } from "./reconcile-sides.ts";
import type { CalEvent, Link } from "./types.ts";

export interface LookUp {
  appointmentId: string;
  therapistId: string;
  eventId: string;
}

export interface LookUps {
  /** The event each look-up found, by appointment id (null: the calendar answers that there is no such event). */
  found: Map<string, CalEvent | null>;
  /** Appointments whose look-up failed for a reason of their own (a 503, a rate limit outlasting the retries). */
  failed: Set<string>;
}

/** A listed appointment to plan: the calendar its event is in (`where`) and the one it belongs in (`owner`). */
export interface Placed {
  id: string;
  where: string | undefined;
  owner: string | undefined;
  eventId: string;
}

/**
 * The listed appointments to plan (`links` in the order of `appointments`), and the events to look up: those missing
 * from their calendar's listing (`listed`) whose appointment's calendar can be used. Appointments of unmapped
 * therapists without an event are skipped and counted; with `therapistId`, only that therapist's are placed.
 */
export function placeAll(
  mapping: Mapping,
  appointments: ReadonlyMap<string, Appointment>,
  links: readonly (Link | undefined)[],
  unusable: ReadonlySet<string>,
  listed: (therapistId: string) => ReadonlyMap<string, CalEvent> | undefined,
  therapistId: string | undefined,
): { placed: Placed[]; wanted: LookUp[]; skippedUnmapped: number } {
  const placed: Placed[] = [];
  const wanted: LookUp[] = [];
  let skippedUnmapped = 0;
  for (const [i, [id, appt]] of [...appointments].entries()) {
    const link = links[i];
    const target = mapping.therapist(appt.therapist_id);
    if (!target && !link?.present) {
      skippedUnmapped++;
      continue;
    }
    if (therapistId && !target && link?.therapistId !== therapistId) continue;
    const where = link?.therapistId ?? target?.therapist_id;
    const owner = target?.therapist_id ?? where;
    const eventId = link?.eventId ?? eventIdFor(id);
    placed.push({ id, where, owner, eventId });
    const byId = where ? listed(where) : undefined;
    // Not in the window listing: deleted, or moved out of the window by the therapist. Look before deciding.
    if (byId && !byId.has(eventId) && link?.present && (owner === undefined || !unusable.has(owner))) {
      if (!misplacedIn(mapping, link)) wanted.push({ appointmentId: id, therapistId: where!, eventId });
    }
  }
  return { placed, wanted, skippedUnmapped };
}

/**
 * Looks the events up, `atOnce` at a time. A calendar that cannot be used for it (credentials, a quota pause) is left
 * alone this run as one that could not be listed: its listing is dropped and it counts as unusable (its appointments
 * wait, none of its events is a stray). Any other failure leaves that one appointment alone this run.
 */
export async function lookUpMissing(
  mapping: Mapping,
  side: Pick<CalendarSide, "events" | "calendarErrors" | "unusable">,
  wanted: readonly LookUp[],
  atOnce: number,
  log: Logger,
): Promise<LookUps> {
  const found = new Map<string, CalEvent | null>();
  const failed = new Set<string>();
  const queue = new PQueue({ concurrency: Math.max(1, atOnce) });
  await Promise.all(
    wanted.map(({ appointmentId, therapistId, eventId }) =>
      queue.add(async () => {
        if (side.unusable.has(therapistId)) return; // left alone since the look-up was queued
        try {
          found.set(appointmentId, await mapping.calendar(therapistId).get(eventId));
        } catch (err) {
          if (isUnavailable(err)) {
            if (side.unusable.has(therapistId)) return;
            side.unusable.add(therapistId);
            side.events.delete(therapistId);
            side.calendarErrors[therapistId] = describeError(err);
            log.error(
              { therapist_id: therapistId, err: describeError(err) },
              "calendar could not be read; left alone this run",
            );
          } else {
            failed.add(appointmentId);
            log.error(
              { appointment_id: appointmentId, therapist_id: therapistId, event_id: eventId, err: describeError(err) },
              "event missing from its calendar's listing could not be looked up; the appointment is left alone this run",
            );
          }
        }
      }),
    ),
  );
  return { found, failed };
}
