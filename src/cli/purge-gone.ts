// Owns what `calbridge purge` does with a calendar Google does not find (404 notFound: deleted, or not shared with
// the credentials it signs in with): it deletes nothing there and says so; with --forget-links it forgets the
// therapist's links in it and the record of events left there, so doctor and /status stop recommending a purge that
// cannot run. Only then: a calendar that answers keeps its links until its events are deleted.
import { systemClock } from "../clock.ts";
import type { Store } from "../store/store.ts";
import { LeftBehindEvents } from "../sync/left-behind.ts";
import type { LinkStore } from "../sync/links.ts";
import { purgeCommand } from "../sync/mapping-report.ts";
import { neverMirrored, purgeLinks } from "../sync/purge.ts";

export interface GoneTarget {
  therapistId: string;
  calendarId: string;
  /** How calbridge signs in there, for the output. */
  as: string;
}

export interface GoneOptions {
  dryRun?: boolean;
  forgetLinks?: boolean;
  /** Asked before anything is forgotten: a reason stops it (a daemon syncs the calendar now, the lease lost). */
  goOn: () => Promise<string | undefined>;
}

export async function purgeCalendarGone(
  store: Store,
  links: LinkStore,
  t: GoneTarget,
  o: GoneOptions,
): Promise<{ ok: boolean; text: string }> {
  const { therapistId: id, calendarId } = t;
  const own = await purgeLinks({ therapistId: id, calendarId, links });
  const records = own.filter((l) => neverMirrored(l)).length;
  // "N links and the record of events left there", and the records never mirrored apart when there are any.
  const what = forgotten(own.length, records) + (records ? "," : "");
  const lines = [
    `calbridge purge ${id}: calendar ${calendarId}, as ${t.as}; the booking service is not called`,
    `  calendar ${calendarId} not found (deleted, or not shared with these credentials): nothing deleted`,
  ];
  const done = (ok: boolean) => ({ ok, text: lines.join("\n") });
  if (!o.forgetLinks) {
    lines.push(
      `  if it was deleted, \`${purgeCommand(id, calendarId)} --forget-links\` forgets its ${what} and the record of events left there, deleting nothing; ` +
        `if it still exists, share it with ${t.as} (or give --impersonate) and run it again`,
    );
    if (o.dryRun) lines.push("  dry run: nothing was deleted or forgotten.");
    return done(false);
  }
  if (o.dryRun) {
    lines.push(`  --forget-links: ${forgotten(own.length, records)} to forget, and the record of events left there`);
    lines.push("  dry run: nothing was deleted or forgotten.");
    return done(true);
  }
  const stop = await o.goOn();
  if (stop !== undefined) {
    lines.push(`  stopped, nothing forgotten: ${stop}`);
    return done(false);
  }
  for (const link of own) await links.forget(link);
  await new LeftBehindEvents(store, systemClock).clear(id, calendarId);
  lines.push(`  forgot ${what} and the record of events left there; nothing was deleted`);
  return done(true);
}

/**
 * What a purge forgets, `all` in all: its links, and apart the records of appointments calbridge never mirrored (of a
 * therapist it did not sync when it saw them), which are no links to an event.
 */
export function forgotten(all: number, records: number): string {
  return `${all - records} links` + (records ? ` and ${records} records of appointments calbridge never mirrored` : "");
}
