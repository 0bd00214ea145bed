// Owns change detection in the therapists' calendars: an incremental sync (syncToken) per calendar on a timer and on
// push notifications, filtering out calbridge's own writes (echo suppression) before handing real changes to the
// engine, which pushes them back to the booking service.

import { fingerprint, instantOf, type Ownership } from "../calendar/fingerprint.ts";
import { APPOINTMENT_ID_PROPERTY, eventIdFor } from "../calendar/ids.ts";
import { type Clock, systemClock } from "../clock.ts";
import { type Logger, silentLogger } from "../log.ts";
import type { Table } from "../store/store.ts";
import type { SyncEngine } from "./engine.ts";
import { describeError } from "./errors.ts";
import { KeyedSerial } from "./keyed.ts";
import type { LinkReader } from "./links.ts";
import type { Mapping } from "./mapping.ts";
import type { CalEvent, Link } from "./types.ts";

export interface PollerOptions {
  mapping: Mapping;
  links: LinkReader;
  sync: Pick<SyncEngine, "syncAppointment">;
  /** Sync tokens by therapist id. */
  tokens: Table<string>;
  clock?: Clock;
  logger?: Logger;
  intervalMs: number;
}

export interface PollResult {
  changes: number;
  echoes: number;
  fullSync: boolean;
}

export class CalendarPoller {
  readonly #mapping: Mapping;
  readonly #links: LinkReader;
  readonly #sync: Pick<SyncEngine, "syncAppointment">;
  readonly #tokens: Table<string>;
  readonly #clock: Clock;
  readonly #logger: Logger;
  #intervalMs: number;
  readonly #serial = new KeyedSerial();
  #abort = new AbortController();
  readonly #lastPoll = new Map<string, number>();

  constructor(options: PollerOptions) {
    this.#mapping = options.mapping;
    this.#links = options.links;
    this.#sync = options.sync;
    this.#tokens = options.tokens;
    this.#clock = options.clock ?? systemClock;
    this.#logger = options.logger ?? silentLogger;
    this.#intervalMs = options.intervalMs;
  }

  /** Polls every calendar now and then every interval, until stop(). */
  start(): void {
    this.#abort = new AbortController();
    const signal = this.#abort.signal;
    for (const therapistId of this.#mapping.calendars.keys()) {
      void (async () => {
        while (!signal.aborted) {
          await this.poll(therapistId).catch(() => {});
          await this.#clock.sleep(this.#intervalMs, signal).catch(() => {});
        }
      })();
    }
  }

  stop(): void {
    this.#abort.abort();
  }

  /** The pause between two polls of a calendar (a reload changed sync.calendar_poll_seconds); from the next one on. */
  set intervalMs(ms: number) {
    this.#intervalMs = ms;
  }

  /** Whether calbridge owns the reminders of this therapist's events (they are configured). */
  #ownsReminders(therapistId: string): boolean {
    const t = this.#mapping.therapist(therapistId);
    return (t?.reminders ?? this.#mapping.config.event.reminders) !== undefined;
  }

  lastPollAt(therapistId: string): number | undefined {
    return this.#lastPoll.get(therapistId);
  }

  /** One incremental sync of one calendar; concurrent calls for the same calendar run one after the other. */
  poll(therapistId: string): Promise<PollResult> {
    return this.#serial.run(therapistId, () => this.#poll(therapistId));
  }

  async #poll(therapistId: string): Promise<PollResult> {
    const version = this.#mapping.version;
    const cal = this.#mapping.calendar(therapistId);
    const log = this.#logger.child({ therapist_id: therapistId });
    const key = `${therapistId}`;
    const token = await this.#tokens.get(key);
    let result: Awaited<ReturnType<typeof cal.incrementalChanges>>;
    const readAt = this.#clock.now();
    try {
      result = await cal.incrementalChanges(token);
    } catch (err) {
      log.warn({ err: describeError(err) }, "calendar changes could not be read; trying again next poll");
      throw err;
    }
    if (result.fullSync && token) log.info("sync token expired; read the whole calendar again");
    let changes = 0;
    let echoes = 0;
    const work: Promise<unknown>[] = [];
    for (const event of result.events) {
      const id =
        event.extendedProperties?.private?.[APPOINTMENT_ID_PROPERTY] ??
        (event.id ? await this.#links.appointmentOfEvent(event.id) : undefined);
      if (!id) continue; // not ours
      const link = await this.#links.get(id);
      if (this.#mapping.version !== version) {
        // A reload changed the mapping meanwhile: this calendar may no longer be the therapist's (an event moved out of
        // it is no deletion). The rest is read again from the mapping as it is now; the token is not advanced.
        log.info("mapping reloaded during the poll; the calendar is read again at the next poll");
        await Promise.all(work);
        return { changes, echoes, fullSync: result.fullSync };
      }
      if (event.id !== (link?.eventId ?? eventIdFor(id))) {
        // Carries the appointment's mark but is not its event: an occurrence of a series the therapist made of it, or
        // a copy. Its changes say nothing about the booking (a moved occurrence is no reschedule): left alone.
        log.debug(
          { appointment_id: id, event_id: event.id },
          "event marked with an appointment but not its own; ignored",
        );
        continue;
      }
      if (isEcho(link, therapistId, event, { reminders: this.#ownsReminders(therapistId) })) {
        echoes++;
        continue;
      }
      changes++;
      log.info({ appointment_id: id, event_status: event.status }, "calendar change seen");
      work.push(
        this.#sync.syncAppointment(id, {
          reason: "calendar change",
          priority: "writeback",
          origin: "calendar",
          // A deletion stays an event with status "cancelled": only that, never a missing event, means deleted.
          calendar: { therapistId, event, seenAt: readAt },
          log,
        }),
      );
    }
    await Promise.all(work);
    // Saved only after the changes were handed over and handled: a crash re-reads them, never skips them.
    await this.#tokens.set(key, result.nextSyncToken);
    this.#lastPoll.set(therapistId, this.#clock.now());
    return { changes, echoes, fullSync: result.fullSync };
  }
}

/**
 * calbridge's own write (or deletion) seen again, or an event that still matches what was last synced (in the fields
 * calbridge owns: reminders where they are configured).
 */
export function isEcho(
  link: Link | undefined,
  therapistId: string,
  event: CalEvent,
  owned: Ownership = { reminders: false },
): boolean {
  if (!link) return false;
  if (link.therapistId !== therapistId) return false;
  if (event.status === "cancelled") return !link.present;
  if (!link.present) return false;
  if (event.etag && event.etag === link.etag) return true;
  // Same times and same owned fields as last written: nothing the engine would act on (e.g. reminders changed).
  return (
    instantOf(event.start) === link.eventStart &&
    instantOf(event.end) === link.eventEnd &&
    fingerprint(event, owned) === link.fingerprint
  );
}
