// Owns what the links say about the mapping: therapists with calbridge events but no mapping any more (with the
// command that removes those events), appointments whose event still lies in a calendar its therapist's mapping no
// longer names, and events left in old calendars that could not be reached. Read by the log at start, /status, doctor
// and the relocation that follows a changed calendar.
import type { LeftBehind, LeftBehindEvents } from "./left-behind.ts";
import { type LinkStore, purgeable } from "./links.ts";
import type { Mapping } from "./mapping.ts";
import { misplacedIn } from "./placement.ts";

export interface UnmappedTherapist {
  therapistId: string;
  /** Events calbridge made there, as the links count them. */
  events: number;
  /** The calendars the links name. */
  calendarIds: string[];
  /** The command that removes them. */
  purge: string;
}

export interface MappingReport {
  unmapped: UnmappedTherapist[];
  /** Per mapped therapist, appointments whose event still lies in another calendar (moved by the next sync). */
  misplaced: Map<string, string[]>;
  leftBehind: (LeftBehind & { purge: string })[];
  /** Live managed events over all calendars, as the links count them. */
  managed: number;
}

export function purgeCommand(therapistId: string, calendarId?: string): string {
  return `calbridge purge --therapist ${therapistId}${calendarId ? ` --calendar ${calendarId}` : ""}`;
}

export async function mappingReport(
  links: Pick<LinkStore, "all">,
  mapping: Mapping,
  leftBehind: Pick<LeftBehindEvents, "all">,
): Promise<MappingReport> {
  const unmapped = new Map<string, { events: number; calendarIds: Set<string> }>();
  const moving = new Map<string, string[]>();
  let managed = 0;
  for await (const link of links.all()) {
    // A link a purge marked and did not forget yet (it stopped, or died) may still have its event there.
    if (!purgeable(link)) continue;
    if (link.present) managed++;
    const therapist = mapping.therapist(link.therapistId);
    if (!therapist) {
      const entry = unmapped.get(link.therapistId) ?? { events: 0, calendarIds: new Set<string>() };
      entry.events++;
      if (link.calendarId) entry.calendarIds.add(link.calendarId);
      unmapped.set(link.therapistId, entry);
    } else if (misplacedIn(mapping, link)) {
      const ids = moving.get(link.therapistId) ?? [];
      ids.push(link.appointmentId);
      moving.set(link.therapistId, ids);
    }
  }
  return {
    unmapped: [...unmapped]
      .map(([therapistId, e]) => ({
        therapistId,
        events: e.events,
        calendarIds: [...e.calendarIds].sort(),
        purge: purgeCommand(therapistId),
      }))
      .sort((a, b) => a.therapistId.localeCompare(b.therapistId)),
    misplaced: moving,
    leftBehind: (await leftBehind.all()).map((l) => ({ ...l, purge: purgeCommand(l.therapistId, l.calendarId) })),
    managed,
  };
}

/** The start's log line about therapists no longer mapped; undefined when there are none. */
export function unmappedLine(report: MappingReport): string | undefined {
  if (report.unmapped.length === 0) return undefined;
  const each = report.unmapped.map((u) => `${u.therapistId} (${u.events} events; \`${u.purge}\`)`);
  return `therapists not in the mapping still have calbridge events in their calendars, left alone: ${each.join(", ")}`;
}

/** What /status shows of the report (JSON, no Map). */
export interface MappingStatus {
  /** Therapists with calbridge events but no mapping, and the command that removes those events. */
  unmapped: UnmappedTherapist[];
  /** Therapists whose events are still to move to the calendar their mapping names now. */
  moving: { therapistId: string; events: number }[];
  /** Events left in old calendars calbridge could not reach when they were to move. */
  leftBehind: {
    therapistId: string;
    calendarId: string;
    events: number;
    reason: string;
    since: string;
    purge: string;
  }[];
}

export function mappingStatus(report: MappingReport): MappingStatus {
  return {
    unmapped: report.unmapped,
    moving: [...report.misplaced].map(([therapistId, ids]) => ({ therapistId, events: ids.length })),
    leftBehind: report.leftBehind.map((l) => ({
      therapistId: l.therapistId,
      calendarId: l.calendarId,
      events: l.events,
      reason: l.reason,
      since: new Date(l.since).toISOString(),
      purge: l.purge,
    })),
  };
}
