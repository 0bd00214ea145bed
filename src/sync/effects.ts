// Owns the sync side's effects on a calendar and on the link store: writing an event body (insert, update, restore),
// removing an event, and recording the link that says what was done; each counted for metrics and /status.
import { IdTakenError, RestoreRefusedError } from "../calendar/errors.ts";
import { eventIdFor } from "../calendar/ids.ts";
import { ownedPatch, type RenderedEvent } from "../calendar/render.ts";
import { stampWrite } from "../calendar/times-mark.ts";
import type { Clock } from "../clock.ts";
import type { Logger } from "../log.ts";
import type { Activity } from "./activity.ts";
import { isNotFound } from "./errors.ts";
import type { LeftBehindEvents } from "./left-behind.ts";
import type { Leftovers } from "./leftovers.ts";
import type { LinkArgs, LinkStore } from "./links.ts";
import type { Mapping } from "./mapping.ts";
import type { SyncMetrics } from "./metrics.ts";
import { OwnCalendarLists } from "./own-calendar-list.ts";
import type { Known, Planner, Rendering } from "./planner.ts";
import { removeTails } from "./series-tails.ts";
import type { CalEvent, CalendarPort, Link } from "./types.ts";

export type WriteKind = "create" | "update" | "restore";

/** Where an appointment's event lives: its id, and which generation of the appointment's ids that is. */
export interface EventAt {
  appointmentId: string;
  eventId: string;
  generation?: number;
}

/** The event as written, and the id (and generation) that holds it now. */
export interface Written {
  event: CalEvent;
  eventId: string;
  generation: number;
  /** The body written instead of the one asked for, after Google refused an id (see `write`'s `ifRefused`). */
  instead?: RenderedEvent;
}

/** Ids a person deleted are skipped one after another; more than this in a row is not a refusal but a fault. */
const MAX_GENERATION_STEPS = 3;

const ids = (at: EventAt) => ({ eventId: at.eventId, generation: at.generation ?? 0 });

export interface EffectsOptions {
  mapping: Mapping;
  links: LinkStore;
  planner: Planner;
  metrics: SyncMetrics;
  activity: Activity;
  clock: Clock;
  /** The calendars where calbridge left its own copies of a therapist's events (a mapping pointed elsewhere). */
  leftBehind?: Pick<LeftBehindEvents, "all">;
  /** Old events a reassignment could not remove from the previous therapist's calendar (leftovers.ts). */
  leftovers?: Leftovers;
}

export class Effects {
  readonly mapping: Mapping;
  readonly links: LinkStore;
  readonly planner: Planner;
  readonly metrics: SyncMetrics;
  readonly activity: Activity;
  readonly clock: Clock;
  readonly leftBehind: Pick<LeftBehindEvents, "all"> | undefined;
  readonly leftovers: Leftovers | undefined;
  /** Each therapist's owned-calendar list, read once for a burst of deletions (moved-out.ts). */
  readonly ownLists: OwnCalendarLists;

  constructor(o: EffectsOptions) {
    this.mapping = o.mapping;
    this.links = o.links;
    this.planner = o.planner;
    this.metrics = o.metrics;
    this.activity = o.activity;
    this.clock = o.clock;
    this.leftBehind = o.leftBehind;
    this.leftovers = o.leftovers;
    this.ownLists = new OwnCalendarLists(o.clock);
  }

  /** A mapped therapist's calendar; CalendarUnavailableError when it cannot be used now. */
  calendar(therapistId: string): CalendarPort {
    return this.mapping.calendar(therapistId);
  }

  /**
   * Makes the appointment's event in a therapist's calendar carry `body`, writing only the fields calbridge owns. An
   * update with the etag last seen changes the event only if nobody changed it since (412 otherwise); anything else
   * inserts, or patches/restores the id in place. When Google refuses to bring back an id a person deleted, the next
   * generation of the id is used: the result says which id (and generation) now holds the event. `ifRefused` gives the
   * body to write there instead (one that says a person's deletion was not sent); the result carries it.
   */
  async write(
    therapistId: string,
    kind: WriteKind,
    rendered: RenderedEvent,
    at: EventAt,
    ifMatch?: string,
    ifRefused?: () => RenderedEvent | undefined,
  ): Promise<Written> {
    const cal = this.calendar(therapistId);
    // Each write stamps the times mark (times-mark.ts): should its record be lost, the event still shows it calbridge's.
    const now = this.clock.now();
    const body = stampWrite(rendered, now);
    let written: Written | undefined;
    if (kind === "update" && ifMatch) {
      try {
        written = { event: await cal.patch(at.eventId, ownedPatch(body), { ifMatch }), ...ids(at) };
      } catch (err) {
        if (!isNotFound(err)) throw err;
      }
    }
    let generation = at.generation ?? 0;
    let eventId = at.eventId;
    let instead: RenderedEvent | undefined;
    for (let tries = 0; !written; tries++) {
      try {
        const options = ifMatch && eventId === at.eventId && kind !== "update" ? { ifMatch } : {};
        const event = (await cal.upsert(eventId, instead ?? body, options)).event;
        written = { event, eventId, generation, ...(instead ? { instead } : {}) };
      } catch (err) {
        const taken = err instanceof IdTakenError;
        if (!(taken || err instanceof RestoreRefusedError) || tries >= MAX_GENERATION_STEPS) throw err;
        generation += 1;
        eventId = eventIdFor(at.appointmentId, generation);
        // A person's deletion Google would not undo is said in the event; a colleague's invitation under the id is not.
        if (!taken && !instead) {
          const noted = ifRefused?.();
          if (noted) instead = stampWrite(noted, now);
        }
        this.metrics.operations.inc({ kind: "new_generation", result: "ok" });
      }
    }
    this.counted(therapistId, kind);
    return written;
  }

  /**
   * Deletes an event (gone already counts as done). With `tailsOf` (the appointment's id, `eventId` being its event),
   * the series Google split off the event go first (series-tails.ts), logged to `tailsOf.log`.
   */
  async remove(
    therapistId: string,
    eventId: string,
    tailsOf?: { appointmentId: string; log: Logger; since?: number | undefined },
  ): Promise<"deleted" | "already_gone"> {
    if (tailsOf) await this.removeTails(therapistId, tailsOf.appointmentId, eventId, tailsOf.log, tailsOf.since);
    const result = await this.calendar(therapistId).delete(eventId);
    this.counted(therapistId, "delete");
    return result;
  }

  /**
   * Deletes the series Google split off the appointment's event `eventId` ("This and following events") and the
   * occurrences of its series stored on their own; `since` (the event's start) finds those whose marks were stripped
   * too (series-tails.ts).
   */
  async removeTails(
    therapistId: string,
    appointmentId: string,
    eventId: string,
    log: Logger,
    since?: number,
  ): Promise<void> {
    const gone = await removeTails(this.calendar(therapistId), appointmentId, eventId, since);
    for (const { id, kind } of gone) {
      this.counted(therapistId, "delete");
      log.info(
        { therapist_id: therapistId, event_id: id },
        kind === "tail"
          ? "series split off the appointment's event removed: an appointment is one event"
          : "moved occurrence of a series made of the appointment's event removed: an appointment is one event",
      );
    }
  }

  /**
   * Renders the appointment for a therapist's calendar (null: no event wanted, or the therapist is not mapped). Throws
   * NeedsFullRead when `known` lacks fields the linked event shows.
   */
  render(known: Known, link: Link | undefined, therapistId: string, notice?: Link["notice"]): Rendering | null {
    const therapist = this.mapping.therapist(therapistId);
    return therapist ? this.planner.render(known, link, therapist, notice) : null;
  }

  record(args: LinkArgs): Promise<void> {
    return this.links.record(args);
  }

  counted(therapistId: string, kind: string): void {
    this.metrics.operations.inc({ kind, result: "ok" });
    this.activity.wrote(therapistId);
  }
}
