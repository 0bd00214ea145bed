// Owns whose a calendar is when `calbridge purge` cleans it: the therapists a leading daemon syncs there (the store's
// watch ledger: the mapping it runs with, whatever the file says now), beside which purge is refused; and the mapped
// therapists whose calendar it is now (handed over), whose events purge leaves alone.
import type { Config, TherapistConfig } from "../config/schema.ts";
import type { Store } from "../store/store.ts";
import { calendarKey, mayBeSameCalendar } from "../sync/placement.ts";
import { watchedCalendars } from "../sync/watched.ts";

/** Refused beside a running daemon that syncs the calendar (exit 1): nothing was deleted. */
export class PurgeRefusedError extends Error {}

/** The calendar purge cleans, and whether it reaches it with the purged therapist's own OAuth token. */
export interface OwnedTarget {
  therapist: TherapistConfig;
  calendarId: string;
  oauth: boolean;
}

/**
 * Beside a daemon that leads the store, a calendar it syncs for any therapist is not purged: for the therapist purged,
 * it would take the deletions for the therapist's own and send them to the booking service as cancellations, or write
 * the events again; for another (the calendar handed over), every deletion there is read as that therapist's. Calendars
 * it leaves alone (a therapist it no longer maps, an old calendar) are purged beside it. Names are compared as
 * mayBeSameCalendar does (`primary` and an address may be one calendar, which cannot be told here): in doubt, refused.
 */
export async function refuseWatched(store: Store, targets: OwnedTarget[], holder: string): Promise<void> {
  const watched = await watchedCalendars(store);
  for (const t of targets) {
    const id = t.therapist.therapist_id;
    const key = calendarKey(t.therapist);
    // The purged therapist's own entry first: its advice (remove them, reload) is the usual way out.
    const hit = [...watched]
      .filter(([, calendar]) => mayBeSameCalendar(calendar, key))
      .sort(([a], [b]) => Number(b === id) - Number(a === id) || a.localeCompare(b))[0];
    if (!hit) continue;
    const [owner, watchedCalendar] = hit;
    const same = watchedCalendar.toLowerCase() === key.toLowerCase();
    const which = same
      ? `${owner}'s calendar ${t.calendarId}`
      : `${owner}'s calendar ${watchedCalendar}, which may be ${t.calendarId} (\`primary\` is an account's own calendar, also named by the account's address)`;
    const then =
      owner === id
        ? `Remove ${id} from therapists: and reload the daemon (SIGHUP), then purge (or stop the daemon, then purge)`
        : `The calendar is ${owner}'s now: stop the daemon, then purge (${owner}'s events there are left alone)` +
          (same ? "" : `; or, if ${t.calendarId} is another calendar, name it by its address`);
    throw new PurgeRefusedError(
      `a calbridge daemon leads this store (${holder}) and syncs ${which}: it would take the deletions for ${owner}'s own and send them to the booking service as cancellations; nothing was deleted. ${then}`,
    );
  }
}

/**
 * The therapists other than the one purged whose calendar the target is now, by the file's mapping or the daemon's
 * ledger: a calendar handed over. Their names are compared ignoring case; `primary` reached with the purged
 * therapist's own token is their own account's calendar, no one else's.
 */
export async function ownersNow(config: Config, store: Store, t: OwnedTarget): Promise<string[]> {
  const id = t.therapist.therapist_id;
  const key = calendarKey(t.therapist).toLowerCase();
  if (key === "primary" && t.oauth) return [];
  const mapped: [string, string][] = config.therapists.map((m) => [m.therapist_id, calendarKey(m)]);
  const named = [...mapped, ...(await watchedCalendars(store))];
  const owners = named.filter(([other, calendar]) => other !== id && calendar.toLowerCase() === key);
  return [...new Set(owners.map(([other]) => other))].sort();
}
