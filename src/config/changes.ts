// Owns what a reloaded configuration changes: therapists added, removed, re-pointed (their events belong in another
// calendar now) or otherwise changed, settings changed, and which settings only a restart takes up (they are kept as
// they were). Names paths and therapist ids only, never values (some are secrets).
import { calendarKey, sameCalendarId } from "../sync/placement.ts";
import type { Config, TherapistConfig } from "./schema.ts";

/**
 * Settings built into long-lived parts at start: the listeners and routes (webhooks, admin, connect), the clients
 * (booking, google and its credentials), the store, the notification targets, the sync engine's workers and retries,
 * the poller's safety interval and the full listings' period, the history's retention (its log is made at start).
 */
export const RESTART_ONLY = [
  "booking",
  "webhooks",
  "admin",
  "google",
  "connect",
  "store",
  "notify",
  "history",
  "sync.concurrency",
  "sync.max_concurrency",
  "sync.push_safety_poll_minutes",
  "sync.calendar_full_listing_hours",
  "sync.retry",
] as const;

export interface ConfigChanges {
  added: string[];
  removed: string[];
  /** Therapists whose events belong in another calendar now: from → to. */
  repointed: { therapistId: string; from: string; to: string }[];
  /** Therapists with other settings (name, time zone, write-back, credentials...), and which. */
  changed: { therapistId: string; keys: string[] }[];
  /** Settings applied by the reload. */
  settings: string[];
  /** Settings that need a restart: left as they were. */
  restartNeeded: string[];
}

type Json = unknown;

/** Changed leaf paths between two values (lists compare whole). */
function diff(a: Json, b: Json, path: string, out: string[]): void {
  const isObject = (v: Json) => v !== null && typeof v === "object" && !Array.isArray(v);
  if (isObject(a) && isObject(b)) {
    const ra = a as Record<string, Json>;
    const rb = b as Record<string, Json>;
    for (const key of new Set([...Object.keys(ra), ...Object.keys(rb)])) {
      diff(ra[key], rb[key], path ? `${path}.${key}` : key, out);
    }
    return;
  }
  if (JSON.stringify(a) !== JSON.stringify(b)) out.push(path);
}

const restartOnly = (path: string) => RESTART_ONLY.some((p) => path === p || path.startsWith(`${p}.`));

/**
 * What changed from `before` to `after`. A therapist is re-pointed when their calendar is another one: a calendar_id
 * written another way for the same Google calendar (an address in other letters; or, as `sameCalendar` knows it from
 * Google, `primary` and the account's own address) is the same calendar, its spelling listed as a change of calendar_id.
 */
export function configChanges(
  before: Config,
  after: Config,
  sameCalendar?: (was: TherapistConfig, now: TherapistConfig) => boolean,
): ConfigChanges {
  const { therapists: oldList, ...oldRest } = before;
  const { therapists: newList, ...newRest } = after;
  const paths: string[] = [];
  diff(oldRest, newRest, "", paths);
  const old = new Map(oldList.map((t) => [t.therapist_id, t]));
  const changes: ConfigChanges = {
    added: newList.filter((t) => !old.has(t.therapist_id)).map((t) => t.therapist_id),
    removed: oldList.filter((t) => !newList.some((n) => n.therapist_id === t.therapist_id)).map((t) => t.therapist_id),
    repointed: [],
    changed: [],
    settings: paths.filter((p) => !restartOnly(p)),
    restartNeeded: paths.filter(restartOnly),
  };
  for (const t of newList) {
    const was = old.get(t.therapist_id);
    if (!was) continue;
    const [from, to] = [calendarKey(was), calendarKey(t)];
    const same = sameCalendarId(from, to) || !!sameCalendar?.(was, t);
    if (!same) changes.repointed.push({ therapistId: t.therapist_id, from, to });
    const keys: string[] = [];
    diff(was, t, "", keys);
    const other = keys.map((k) => k.split(".")[0]!).filter((k) => same || k !== "calendar_id");
    if (other.length > 0) changes.changed.push({ therapistId: t.therapist_id, keys: [...new Set(other)] });
  }
  return changes;
}

/** The configuration a reload applies: `after`, with the settings only a restart takes up kept as in `before`. */
export function appliedConfig(before: Config, after: Config): Config {
  const keptSync = RESTART_ONLY.filter((p) => p.startsWith("sync.")).map((p) => p.slice("sync.".length));
  const sync = {
    ...after.sync,
    ...Object.fromEntries(keptSync.map((key) => [key, before.sync[key as keyof Config["sync"]]])),
  };
  const kept = Object.fromEntries(
    RESTART_ONLY.filter((p) => !p.includes(".")).map((section) => [section, before[section as keyof Config]]),
  );
  return { ...after, ...kept, sync } as Config;
}

/** Whether the reload changes anything at all. */
export function nothingChanged(c: ConfigChanges): boolean {
  return (
    c.added.length + c.removed.length + c.repointed.length + c.changed.length + c.settings.length === 0 &&
    c.restartNeeded.length === 0
  );
}

/** The one line a reload logs: what changed, and what waits for a restart. */
export function describeChanges(c: ConfigChanges): string {
  if (nothingChanged(c)) return "configuration reloaded: nothing changed";
  const parts: string[] = [];
  if (c.added.length) parts.push(`therapists added: ${c.added.join(", ")}`);
  if (c.removed.length) parts.push(`removed: ${c.removed.join(", ")}`);
  if (c.repointed.length) {
    parts.push(`re-pointed: ${c.repointed.map((r) => `${r.therapistId} (${r.from} → ${r.to})`).join(", ")}`);
  }
  if (c.changed.length) {
    parts.push(`changed: ${c.changed.map((t) => `${t.therapistId} (${t.keys.join(", ")})`).join(", ")}`);
  }
  if (c.settings.length) parts.push(`settings changed: ${c.settings.join(", ")}`);
  if (c.restartNeeded.length) {
    parts.push(`needs a restart, left as it was: ${c.restartNeeded.join(", ")}`);
  }
  return `configuration reloaded: ${parts.join("; ")}`;
}
