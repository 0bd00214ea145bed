// Owns what a reconciliation does with a link whose stored text cannot be read (a torn write, a damaged page, a hand
// edit): its appointment is left alone that run, and said once a run with what to do. Never taken for "no link",
// which would insert a second event beside its own, or make its own event a stray to delete; never a reason to fail
// the run, which stopped every other appointment's healing, for every therapist, until someone edited the file.
import type { Logger } from "../log.ts";
import { StoreRecordUnreadableError } from "../store/store.ts";
import type { LinkReader } from "./links.ts";
import type { Link } from "./types.ts";

/** Read for a stray: its link could not be read, so its fate cannot be decided. */
export const UNREADABLE = Symbol("unreadable link");

/**
 * What `read` answers, or undefined when the record it reads cannot be read (logged at warn with `then`, what comes of
 * it): for the calendar poller, where one damaged record stopped every poll of its calendar.
 */
export async function orNone<T>(read: Promise<T | undefined>, log: Logger, then: string): Promise<T | undefined> {
  try {
    return await read;
  } catch (err) {
    if (!(err instanceof StoreRecordUnreadableError)) throw err;
    log.warn({ table: err.table, key: err.key }, `${err.message}; this calendar change: ${then}`);
    return undefined;
  }
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
