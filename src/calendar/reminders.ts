// Owns event reminders as calbridge writes and compares them: the configured choice (`event.reminders`, overridable
// per therapist) as an event body's `reminders`, its PATCH form, and the normal form a fingerprint hashes.

/** One reminder: a popup or an e-mail this many minutes before the start. */
export interface ReminderOverride {
  method: "popup" | "email";
  minutes: number;
}

/** `default`: the calendar's default reminders; `none`: no reminders; a list: exactly these. */
export type RemindersConfig = "default" | "none" | ReminderOverride[];

/** Event.reminders as Google takes it. */
export interface EventReminders {
  useDefault: boolean;
  overrides?: ReminderOverride[];
}

/**
 * Google's limits (Event.reminders.overrides in the API reference): "The maximum number of override reminders is 5",
 * minutes "between 0 and 40320 (4 weeks in minutes)". The configuration refuses anything else, so what is written
 * reads back the same (Google clamps minutes and drops duplicates silently).
 */
export const MAX_REMINDERS = 5;
export const MAX_REMINDER_MINUTES = 40_320;

const order = (a: ReminderOverride, b: ReminderOverride) => b.minutes - a.minutes || a.method.localeCompare(b.method);

/** The body's `reminders` for a configured choice. */
export function remindersBody(config: RemindersConfig): EventReminders {
  if (config === "default") return { useDefault: true };
  if (config === "none") return { useDefault: false };
  return {
    useDefault: false,
    overrides: [...config].sort(order).map((o) => ({ method: o.method, minutes: o.minutes })),
  };
}

/**
 * The PATCH form: overrides named even when there are none (null clears them), because a patch merges into the stored
 * reminders object and an override left from before next to useDefault:true is refused (400
 * cannotUseDefaultRemindersAndSpecifyOverride; see the emulator's writableBody).
 */
export function remindersPatch(r: EventReminders): { useDefault: boolean; overrides: ReminderOverride[] | null } {
  return { useDefault: r.useDefault, overrides: r.overrides?.length ? r.overrides : null };
}

/** What a fingerprint hashes: Google reads reminders back in its own order and without an empty override list. */
export function normalReminders(r: { useDefault?: boolean | null; overrides?: unknown[] | null } | null | undefined) {
  // An event without reminders of its own reads back useDefault:true (Google's default for timed events).
  if (!r) return { useDefault: true, overrides: [] as string[] };
  const overrides = (r.overrides ?? [])
    .map((o) => o as { method?: string | null; minutes?: number | null })
    .map((o) => `${o.method ?? ""}:${o.minutes ?? ""}`)
    .sort();
  return { useDefault: r.useDefault === true, overrides: [...new Set(overrides)] };
}
