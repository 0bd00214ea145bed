// Owns the rule that no two mapped therapists sync one Google calendar. The configuration refuses two that name one
// calendar, but `primary` (an OAuth account's own calendar) is only known at run time: a consent given in a browser
// signed in as another mapped therapist makes that therapist's calendar this one's too. Then each therapist's sync
// takes the other's events for copies left behind (removed) and a removal for the therapist's own deletion (written
// back as a cancellation). Each mapping's calendar is resolved to its real id (calendars.get answers the account's own
// calendar id for `primary`) and a therapist reaching another's calendar only through `primary` is not synced.
import type { TherapistConfig } from "../config/schema.ts";

/**
 * The calendar the configuration itself names for a therapist: its calendar_id, or on `primary` the delegated
 * account's own (service account only: `impersonate` means nothing to OAuth, whose `primary` is the consenting
 * account's calendar, known only from Google). `defaultAuth` is google.auth (a therapist's own auth wins).
 */
export function statedCalendar(t: TherapistConfig, defaultAuth: { type: string }): string | undefined {
  if (t.calendar_id !== "primary") return t.calendar_id;
  return (t.auth?.type ?? defaultAuth.type) === "service_account" ? t.impersonate : undefined;
}

const key = (id: string) => id.trim().toLowerCase();

/**
 * Therapists who must not be synced because their calendar (by `resolved`, therapist id → real calendar id, where
 * known) is another mapped therapist's, with the reason. One that names the calendar in the configuration keeps it;
 * those that reach it only through `primary` are refused (all of them when none names it).
 */
export function sharedCalendarConflicts(
  therapists: readonly TherapistConfig[],
  resolved: ReadonlyMap<string, string>,
  defaultAuth: { type: string },
): Map<string, string> {
  const byCalendar = new Map<string, { t: TherapistConfig; stated: boolean; id: string }[]>();
  for (const t of therapists) {
    const stated = statedCalendar(t, defaultAuth);
    const id = resolved.get(t.therapist_id) ?? stated;
    if (!id) continue;
    const group = byCalendar.get(key(id)) ?? [];
    group.push({ t, stated: stated !== undefined && key(stated) === key(id), id });
    byCalendar.set(key(id), group);
  }
  const refused = new Map<string, string>();
  for (const group of byCalendar.values()) {
    if (group.length < 2) continue;
    const owner = group.find((g) => g.stated);
    for (const g of group) {
      if (g === owner) continue;
      const others = group.filter((o) => o !== g).map((o) => o.t.therapist_id);
      refused.set(g.t.therapist_id, sameCalendarReason(g.t, g.id, others));
    }
  }
  return refused;
}

/** Why `t` is not synced: its calendar resolves to `calendarId`, which is also the calendar of `others`. */
export function sameCalendarReason(t: TherapistConfig, calendarId: string, others: readonly string[]): string {
  return (
    `calendar ${t.calendar_id} of ${t.therapist_id} is the Google calendar ${calendarId}, which is also the calendar of ` +
    `${others.join(", ")}: two therapists cannot share one calendar (each would take the other's events for ` +
    `deletions), so nothing is synced in it for ${t.therapist_id}; the consent was probably given while signed in ` +
    `with another therapist's Google account: have ${t.therapist_id} connect again signed in with their own Google account`
  );
}

/**
 * For authorize and the connect callback: the mapped therapist other than `therapistId` whose calendar (as the
 * configuration names it, or for `primary` as the daemon resolved it: `resolved`) is `calendarId`, the calendar the
 * consenting account's token resolves to. None when the configuration names that very calendar for `therapistId`
 * (its rightful owner reconnecting; the configuration allows no other therapist to name it).
 */
export function calendarTakenBy(
  therapists: readonly TherapistConfig[],
  therapistId: string,
  calendarId: string,
  defaultAuth: { type: string },
  resolved: ReadonlyMap<string, string> = new Map(),
): TherapistConfig | undefined {
  const me = therapists.find((o) => o.therapist_id === therapistId);
  const mine = me ? statedCalendar(me, defaultAuth) : undefined;
  if (mine !== undefined && key(mine) === key(calendarId)) return undefined;
  return therapists.find((o) => {
    if (o.therapist_id === therapistId) return false;
    const theirs = statedCalendar(o, defaultAuth) ?? resolved.get(o.therapist_id);
    return theirs !== undefined && key(theirs) === key(calendarId);
  });
}
