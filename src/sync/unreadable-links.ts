// Owns what a reconciliation does with a link whose stored text cannot be read (a torn write, a damaged page, a hand
// edit): its appointment is left alone that run, and said once a run with what to do. Never taken for "no link",
// which would insert a second event beside its own, or make its own event a stray to delete; never a reason to fail
// the run, which stopped every other appointment's healing, for every therapist, until someone edited the file. And
// what the calendar poller does with a change whose link, or event-index entry, cannot be read.
import { APPOINTMENT_ID_PROPERTY } from "../calendar/ids.ts";
import type { Logger } from "../log.ts";
import { StoreRecordUnreadableError } from "../store/store.ts";
import type { LinkReader } from "./links.ts";
import type { CalEvent, Link } from "./types.ts";

/** Read for a stray: its link could not be read, so its fate cannot be decided. */
export const UNREADABLE = Symbol("unreadable link");

/** What a calendar change is about (calendar-poller.ts): its appointment, and that one's link unless it is damaged. */
export type ChangedAppointment = { id: string; link: Link | undefined; damaged: boolean };

/**
 * The appointment a changed event is calbridge's event of (its mark, else the event index: a deleted event carries no
 * mark), and its link; undefined when not calbridge's event, or when its appointment cannot be told. A record that
 * cannot be read is logged at warn with what comes of the change, and is never taken for "no record":
 * - the link: `damaged`, and the poller hands the change to the engine whatever the event's id (its generation, or
 *   whether it is a copy, cannot be told without the link), whose sync fails alone on that record, a dead letter
 *   naming it. Compared with the first generation's id instead, a later generation's change was dropped unseen.
 * - the event index's entry: the change is added to `untold`, and the poller does not advance the calendar's sync
 *   token, so it is read again each poll until the record is restored or removed (or a sync of its link rewrites it).
 */
export async function changedAppointment(
  links: Pick<LinkReader, "get" | "appointmentOfEvent">,
  event: CalEvent,
  log: Logger,
  untold: CalEvent[],
): Promise<ChangedAppointment | undefined> {
  let id = event.extendedProperties?.private?.[APPOINTMENT_ID_PROPERTY];
  try {
    id ??= event.id ? await links.appointmentOfEvent(event.id) : undefined;
  } catch (err) {
    unreadableRecord(
      err,
      log,
      event,
      "its appointment cannot be told: the calendar's sync token is not advanced past it, so it is read again each " +
        "poll until the record is restored or removed",
    );
    untold.push(event);
    return undefined;
  }
  if (!id) return undefined;
  try {
    return { id, link: await links.get(id), damaged: false };
  } catch (err) {
    unreadableRecord(
      err,
      log,
      event,
      "it is handed to its appointment's sync, which fails alone (a dead letter naming the record)",
    );
    return { id, link: undefined, damaged: true };
  }
}

/** Logs a record that cannot be read, and what comes of the calendar change; rethrows any other error. */
function unreadableRecord(err: unknown, log: Logger, event: CalEvent, then: string): void {
  if (!(err instanceof StoreRecordUnreadableError)) throw err;
  log.warn({ table: err.table, key: err.key, event_id: event.id }, `${err.message}; this calendar change: ${then}`);
}

/** The links of `ids` (in order), and the run's appointments left alone because theirs cannot be read. */
export async function readLinks(
  links: Pick<LinkReader, "readMany">,
  ids: string[],
  log: Logger,
): Promise<{ links: (Link | undefined)[]; unreadable: UnreadableLinks }> {
  const read = await links.readMany(ids);
  const unreadable = new UnreadableLinks(log);
  for (const [id, error] of read.unreadable) unreadable.add(id, error);
  return { links: read.links, unreadable };
}

export class UnreadableLinks {
  readonly #log: Logger;
  readonly #ids = new Set<string>();

  constructor(log: Logger) {
    this.#log = log;
  }

  /** Leaves the appointment alone this run, logging it (once a run). */
  add(appointmentId: string, error: StoreRecordUnreadableError): void {
    if (this.#ids.has(appointmentId)) return;
    this.#ids.add(appointmentId);
    this.#log.warn(
      { appointment_id: appointmentId, table: error.table, key: error.key },
      `the link of appointment ${appointmentId} cannot be read (the store's record ${error.table}/${error.key} is ` +
        "damaged); the appointment is left alone this run, nothing is written, deleted or sent for it: restore it " +
        "from a backup or remove it (the next reconciliation then adopts its event)",
    );
  }

  has(appointmentId: string): boolean {
    return this.#ids.has(appointmentId);
  }

  /** The appointment ids left alone, in the order met. */
  get ids(): string[] {
    return [...this.#ids];
  }

  /** An appointment's link, or UNREADABLE (logged, and the appointment left alone) when it cannot be read. */
  async read(links: Pick<LinkReader, "get">, appointmentId: string): Promise<Link | undefined | typeof UNREADABLE> {
    try {
      return await links.get(appointmentId);
    } catch (err) {
      if (!(err instanceof StoreRecordUnreadableError)) throw err;
      this.add(appointmentId, err);
      return UNREADABLE;
    }
  }
}
