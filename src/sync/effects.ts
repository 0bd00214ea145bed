// Owns the sync side's effects on a calendar and on the link store: writing an event body (insert, update, restore),
// removing an event, and recording the link that says what was done; each counted for metrics and /status.
import type { RenderedEvent } from "../calendar/render.ts";
import type { Clock } from "../clock.ts";
import type { Activity } from "./activity.ts";
import { isNotFound } from "./errors.ts";
import type { LinkArgs, LinkStore } from "./links.ts";
import type { Mapping } from "./mapping.ts";
import type { SyncMetrics } from "./metrics.ts";
import type { Planner } from "./planner.ts";
import type { CalEvent, CalendarPort, Link, Snapshot } from "./types.ts";

export type WriteKind = "create" | "update" | "restore";

export interface EffectsOptions {
  mapping: Mapping;
  links: LinkStore;
  planner: Planner;
  metrics: SyncMetrics;
  activity: Activity;
  clock: Clock;
}

export class Effects {
  readonly mapping: Mapping;
  readonly links: LinkStore;
  readonly planner: Planner;
  readonly metrics: SyncMetrics;
  readonly activity: Activity;
  readonly clock: Clock;

  constructor(o: EffectsOptions) {
    this.mapping = o.mapping;
    this.links = o.links;
    this.planner = o.planner;
    this.metrics = o.metrics;
    this.activity = o.activity;
    this.clock = o.clock;
  }

  /** A mapped therapist's calendar; CalendarUnavailableError when it cannot be used now. */
  calendar(therapistId: string): CalendarPort {
    return this.mapping.calendar(therapistId);
  }

  /**
   * Makes event `eventId` in a therapist's calendar carry `body`. An update with the etag last seen replaces the
   * event only if nobody changed it since (412 otherwise); anything else inserts, or updates/restores the id in place.
   */
  async write(
    therapistId: string,
    kind: WriteKind,
    body: RenderedEvent,
    eventId: string,
    ifMatch?: string,
  ): Promise<CalEvent> {
    const cal = this.calendar(therapistId);
    let event: CalEvent;
    if (kind === "update" && ifMatch) {
      try {
        event = await cal.update(eventId, body, { ifMatch });
      } catch (err) {
        if (!isNotFound(err)) throw err;
        event = (await cal.upsert(eventId, body)).event;
      }
    } else {
      event = (await cal.upsert(eventId, body, ifMatch ? { ifMatch } : {})).event;
    }
    this.counted(therapistId, kind);
    return event;
  }

  /** Deletes an event (gone already counts as done). */
  async remove(therapistId: string, eventId: string): Promise<"deleted" | "already_gone"> {
    const result = await this.calendar(therapistId).delete(eventId);
    this.counted(therapistId, "delete");
    return result;
  }

  /** Renders the appointment for a therapist's calendar (null: no event wanted, or the therapist is not mapped). */
  render(appt: Snapshot, therapistId: string, notice?: Link["notice"]): RenderedEvent | null {
    const therapist = this.mapping.therapist(therapistId);
    return therapist ? this.planner.render(appt, therapist, notice) : null;
  }

  record(args: LinkArgs): Promise<void> {
    return this.links.record(args);
  }

  counted(therapistId: string, kind: string): void {
    this.metrics.operations.inc({ kind, result: "ok" });
    this.activity.wrote(therapistId);
  }
}
