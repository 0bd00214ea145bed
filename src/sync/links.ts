// Owns the link store: per appointment, what was last written or accepted on both sides (vdirsyncer's status
// database), kept only while the appointment can still be synced, and the index from a managed event id back to its
// appointment. A link never holds a customer detail: times, status, therapist, event, fingerprints and digests
// (and a notice, which may quote what the therapist typed).
import { bookingInstant } from "../booking/instant.ts";
import { fingerprint, instantOf } from "../calendar/fingerprint.ts";
import type { RenderedEvent } from "../calendar/render.ts";
import { markOf } from "../calendar/times-mark.ts";
import type { Clock } from "../clock.ts";
import type { Store, StoreRecordUnreadableError, Table } from "../store/store.ts";
import { lineDigests } from "./edit-notice.ts";
import type { Mapping } from "./mapping.ts";
import { calendarKey } from "./placement.ts";
import { coreOf } from "./snapshot.ts";
import type { CalEvent, Link, Rendered, Snapshot } from "./types.ts";

/** What a new link is made of; the event read back (or the body written) supplies the calendar side. */
export interface LinkArgs {
  appointmentId: string;
  therapistId: string;
  eventId: string;
  generation?: number;
  /** The booking state applied; only its times, status and therapist are kept. */
  booking: Snapshot;
  sourceAt: number;
  event?: CalEvent | null;
  body?: RenderedEvent | null;
  present: boolean;
  removedBy?: Link["removedBy"];
  notice?: Link["notice"];
  /** What the event's text stands for (when it was rendered or found matching one). */
  rendered?: Rendered;
  /** An enrichment is due even though `rendered` has nothing pending (an older value is shown). */
  enrich?: boolean;
}

/** Links read together: `links` in the order asked, and those whose stored text cannot be read (undefined there). */
export interface LinksRead {
  links: (Link | undefined)[];
  /** By appointment id: a link that cannot be read is not "no link"; its appointment is to be left alone. */
  unreadable: Map<string, StoreRecordUnreadableError>;
}

/** Reading links: what the reconciliation and the calendar poller need. */
export interface LinkReader {
  get(appointmentId: string): Promise<Link | undefined>;
  /** Many links at once; one that cannot be read is named in `unreadable` instead of failing the read. */
  readMany(appointmentIds: string[]): Promise<LinksRead>;
  /** The appointment behind a managed event id, from the index written with every link. */
  appointmentOfEvent(eventId: string): Promise<string | undefined>;
}

const DAY = 86_400_000;
/**
 * A link is kept this long past the end of the sync window: the end of its appointment plus `sync.window.past_days`
 * is where the reconciliation stops listing it, and the margin covers listings whose date filter is by start, and
 * appointments longer than a day.
 */
const MARGIN_DAYS = 2;
/**
 * And at least this long: a link written for an appointment already outside the window (a late change of an old
 * booking) still orders the webhooks that follow it (the booking service's retries span about 35 hours).
 */
export const MIN_LINK_TTL_MS = 3 * DAY;

/** When a link stops being of use: the end of its appointment plus the window's past days and a margin. */
export function linkExpiry(link: Pick<Link, "eventEnd" | "booking">, pastDays: number): number | undefined {
  const end = link.eventEnd ?? bookingInstant(link.booking.end_time ?? link.booking.start_time);
  return Number.isFinite(end) ? end + (pastDays + MARGIN_DAYS) * DAY : undefined;
}

/**
 * A link as an earlier build stored it (the whole booking snapshot, customer details included) made into what links
 * keep now, by `upgrade` (src/sync/link-upgrade.ts); undefined for a link that is current.
 */
export type LinkUpgrade = (link: Link) => Link | undefined;

export class LinkStore implements LinkReader {
  readonly #links: Table<Link>;
  readonly #eventIndex: Table<string>;
  readonly #mapping: Mapping;
  readonly #clock: Clock;
  #upgrade: LinkUpgrade = () => undefined;
  #enrichmentDue: (appointmentId: string) => void = () => {};

  constructor(store: Store, mapping: Mapping, clock: Clock) {
    this.#links = store.table<Link>("links");
    this.#eventIndex = store.table<string>("eventindex");
    this.#mapping = mapping;
    this.#clock = clock;
  }

  /** How links an earlier build stored are read (wired by the sync core, which knows the rendering settings). */
  set upgrade(fn: LinkUpgrade) {
    this.#upgrade = fn;
  }

  /** Told of every saved link whose event awaits an enrichment (the engine queues one). */
  set onEnrichmentDue(fn: (appointmentId: string) => void) {
    this.#enrichmentDue = fn;
  }

  async get(appointmentId: string): Promise<Link | undefined> {
    const link = await this.#links.get(appointmentId);
    return link && (this.#upgrade(link) ?? link);
  }

  async readMany(appointmentIds: string[]): Promise<LinksRead> {
    const unreadable = new Map<string, StoreRecordUnreadableError>();
    const read = await this.#links.getMany(appointmentIds, { unreadable: (e) => unreadable.set(e.key, e) });
    return { links: read.map((link) => link && (this.#upgrade(link) ?? link)), unreadable };
  }

  appointmentOfEvent(eventId: string): Promise<string | undefined> {
    return this.#eventIndex.get(eventId);
  }

  /** Saves a link and its index entry, both expiring when the appointment has left the sync window. */
  async save(link: Link): Promise<void> {
    const expiry = linkExpiry(link, this.#mapping.config.sync.window.past_days);
    const ttl = Math.max(MIN_LINK_TTL_MS, (expiry ?? 0) - this.#clock.now());
    await this.#links.set(link.appointmentId, link, ttl);
    await this.#eventIndex.set(link.eventId, link.appointmentId, ttl);
    if (link.present && link.enrich) this.#enrichmentDue(link.appointmentId);
  }

  /**
   * Rewrites every link an earlier build stored with the booking snapshot (customer details included) into what links
   * keep now, and gives every link its expiry; answers how many were rewritten.
   */
  async minimise(): Promise<number> {
    // The keys first: rewriting rows while a listing pages through the table could skip some.
    const old: string[] = [];
    for await (const [key, link] of this.#links.entries()) if (this.#upgrade(link)) old.push(key);
    let n = 0;
    for (const key of old) {
      const link = await this.#links.get(key);
      const upgraded = link && this.#upgrade(link);
      if (upgraded) {
        await this.save(upgraded);
        n++;
      }
    }
    return n;
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
    const reminders = this.#ownsReminders(a.therapistId);
    const rendered = a.present ? a.rendered : undefined;
    const enrich = a.present && (a.enrich === true || (rendered?.pending?.length ?? 0) > 0);
    // The times mark of the event as written or read back: an event carrying another one later shows a write of
    // calbridge's this link does not record (changes.ts, lastSynced).
    const mark = markOf(event);
    return {
      appointmentId: a.appointmentId,
      therapistId: a.therapistId,
      calendarId: calendarOf(this.#mapping, a.therapistId),
      eventId: a.eventId,
      ...(a.generation ? { generation: a.generation } : {}),
      present: a.present,
      ...(a.removedBy ? { removedBy: a.removedBy } : {}),
      etag: event?.etag ?? undefined,
      fingerprint: a.body
        ? fingerprint(a.body, { reminders: a.body.reminders !== undefined })
        : event
          ? fingerprint(event, { reminders })
          : undefined,
      eventStart: instantOf(event?.start) ?? instantOf(a.body?.start),
      eventEnd: instantOf(event?.end) ?? instantOf(a.body?.end),
      ...(mark ? { timesMark: mark } : {}),
      booking: coreOf(a.booking),
      ...(rendered ? { rendered } : {}),
      // The lines it wrote (or found as it renders them: adopted), to tell a therapist's text from its own later.
      ...(a.body || event ? { lines: lineDigests(a.appointmentId, (a.body ?? event)?.description) } : {}),
      ...(enrich ? { enrich: true as const } : {}),
      sourceAt: a.sourceAt,
      ...(a.notice ? { notice: a.notice } : {}),
      syncedAt: this.#clock.now(),
    };
  }

  /** Makes and saves a link. */
  record(a: LinkArgs): Promise<void> {
    return this.save(this.make(a));
  }

  /** Whether calbridge owns the reminders of this therapist's events (they are configured). */
  #ownsReminders(therapistId: string): boolean {
    const t = this.#mapping.therapist(therapistId);
    return (t?.reminders ?? this.#mapping.config.event.reminders) !== undefined;
  }
}

/**
 * The link saved again at `at` with `changes` that record no event (a re-point, a refusal's note, a removal): syncedAt
 * moves on, and a link without a times mark keeps when it last recorded one (`recordedAt`), which lastSynced compares a
 * mark's moment with. Without it, a write of calbridge's lost over an earlier build's event and then such a save read
 * as the earlier build's (the mark older than the link): a booking moved again was sent back as the therapist's move.
 */
export function resaved(link: Link, changes: Partial<Link>, at: number): Link {
  const recordedAt = link.timesMark === undefined ? { recordedAt: link.recordedAt ?? link.syncedAt } : {};
  return { ...link, ...changes, ...recordedAt, syncedAt: at };
}

/**
 * Whether a link's event is one `calbridge purge` is to delete: a live one, or one a purge marked before deleting it
 * (that purge stopped or died before forgetting the link: the event may still be there, and the calendar is known only
 * from the link).
 */
export function purgeable(link: Link): boolean {
  return link.present || link.removedBy === "purge";
}

/** The calendar a mapped therapist's events go to now ("" when not mapped). */
function calendarOf(mapping: Mapping, therapistId: string): string {
  const t = mapping.therapist(therapistId);
  return t ? calendarKey(t) : "";
}

/**
 * The link, unless it is a tombstone naming a therapist calbridge does not sync (apply.ts, "none"): such a record keeps
 * a creation's payload retried late from being applied (snapshot.ts), and says nothing of any calendar, so wherever
 * events are looked for or decided about it is taken as no record (an orphan of a lost record is still removed).
 */
export function recordOfEvents(link: Link | undefined, mapping: Pick<Mapping, "therapist">): Link | undefined {
  if (link && !link.present && link.removedBy === "booking" && !mapping.therapist(link.therapistId)) return undefined;
  return link;
}
