// Owns the link store: per appointment, what was last written or accepted on both sides (vdirsyncer's status
// database), and the index from a managed event id back to its appointment.
import { fingerprint, instantOf } from "../calendar/fingerprint.ts";
import type { RenderedEvent } from "../calendar/render.ts";
import type { Clock } from "../clock.ts";
import type { Store, Table } from "../store/store.ts";
import type { Mapping } from "./mapping.ts";
import { calendarKey } from "./placement.ts";
import type { CalEvent, Link, Snapshot } from "./types.ts";

/** What a new link is made of; the event read back (or the body written) supplies the calendar side. */
export interface LinkArgs {
  appointmentId: string;
  therapistId: string;
  eventId: string;
  generation?: number;
  booking: Snapshot;
  sourceAt: number;
  event?: CalEvent | null;
  body?: RenderedEvent | null;
  present: boolean;
  removedBy?: Link["removedBy"];
  notice?: Link["notice"];
}

/** Reading links: what the reconciliation and the calendar poller need. */
export interface LinkReader {
  get(appointmentId: string): Promise<Link | undefined>;
  getMany(appointmentIds: string[]): Promise<(Link | undefined)[]>;
  /** The appointment behind a managed event id, from the index written with every link. */
  appointmentOfEvent(eventId: string): Promise<string | undefined>;
}

export class LinkStore implements LinkReader {
  readonly #links: Table<Link>;
  readonly #eventIndex: Table<string>;
  readonly #mapping: Mapping;
  readonly #clock: Clock;

  constructor(store: Store, mapping: Mapping, clock: Clock) {
    this.#links = store.table<Link>("links");
    this.#eventIndex = store.table<string>("eventindex");
    this.#mapping = mapping;
    this.#clock = clock;
  }

  get(appointmentId: string): Promise<Link | undefined> {
    return this.#links.get(appointmentId);
  }

  getMany(appointmentIds: string[]): Promise<(Link | undefined)[]> {
    return this.#links.getMany(appointmentIds);
  }

  appointmentOfEvent(eventId: string): Promise<string | undefined> {
    return this.#eventIndex.get(eventId);
  }

  async save(link: Link): Promise<void> {
    await this.#links.set(link.appointmentId, link);
    await this.#eventIndex.set(link.eventId, link.appointmentId);
  }

  /** Every link, in no particular order (the mapping report and `calbridge purge` read them all). */
  async *all(): AsyncIterable<Link> {
    for await (const [, link] of this.#links.entries()) yield link;
  }

  /** Forgets an appointment's link and its event id's index entry (`calbridge purge`). */
  async forget(link: Link): Promise<void> {
    await this.#links.delete(link.appointmentId);
    if ((await this.#eventIndex.get(link.eventId)) === link.appointmentId) await this.#eventIndex.delete(link.eventId);
  }

  /** A link as of now, from what was written (`body`) or read back (`event`). */
  make(a: LinkArgs): Link {
    const event = a.event ?? undefined;
    return {
      appointmentId: a.appointmentId,
      therapistId: a.therapistId,
      calendarId: calendarOf(this.#mapping, a.therapistId),
      eventId: a.eventId,
      ...(a.generation ? { generation: a.generation } : {}),
      present: a.present,
      ...(a.removedBy ? { removedBy: a.removedBy } : {}),
      etag: event?.etag ?? undefined,
      fingerprint: a.body ? fingerprint(a.body) : event ? fingerprint(event) : undefined,
      eventStart: instantOf(event?.start) ?? instantOf(a.body?.start),
      eventEnd: instantOf(event?.end) ?? instantOf(a.body?.end),
      booking: a.booking,
      sourceAt: a.sourceAt,
      ...(a.notice ? { notice: a.notice } : {}),
      syncedAt: this.#clock.now(),
    };
  }

  /** Makes and saves a link. */
  record(a: LinkArgs): Promise<void> {
    return this.save(this.make(a));
  }
}

/** The calendar a mapped therapist's events go to now ("" when not mapped). */
function calendarOf(mapping: Mapping, therapistId: string): string {
  const t = mapping.therapist(therapistId);
  return t ? calendarKey(t) : "";
}
