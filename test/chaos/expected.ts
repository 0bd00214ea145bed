// The state the calendars must reach, derived from the booking simulator: one live event per confirmed appointment
// of a mapped therapist, in that therapist's calendar, at the booking's time; none for any other appointment; no
// event id twice; no managed event without its appointment.
import { writeFileSync } from "node:fs";
import { join } from "node:path";
import { APPOINTMENT_ID_PROPERTY, eventIdFor } from "../../src/calendar/ids.ts";
import type { World } from "../../src/simulator/world.ts";

type Resource = Record<string, unknown>;

const instant = (t: unknown): number | undefined => {
  const dt = (t as { dateTime?: string } | undefined)?.dateTime;
  return dt ? Date.parse(dt) : undefined;
};

export function appointmentIdOfEvent(ev: Resource): string | undefined {
  const props = ev.extendedProperties as { private?: Record<string, string> } | undefined;
  return props?.private?.[APPOINTMENT_ID_PROPERTY];
}

/** Live managed events over every calendar of the world, with the therapist whose calendar holds them. */
export function liveEvents(world: World): { therapistId: string; event: Resource }[] {
  return world.therapists.flatMap((t) =>
    world.google
      .events(world.calendarOf(t))
      .filter((e) => e.status !== "cancelled" && appointmentIdOfEvent(e) !== undefined)
      .map((event) => ({ therapistId: t, event })),
  );
}

export interface StateOptions {
  /** Only these appointments are checked (default: all). */
  only?: ReadonlySet<string>;
  /** Therapists whose calendars calbridge manages (default: the config's). */
  mapped?: ReadonlySet<string>;
}

/** Every difference between the calendars and the booking service's state; empty when they agree. */
export function stateProblems(world: World, options: StateOptions = {}): string[] {
  const mapped = options.mapped ?? new Set(world.config.therapists.map((t) => t.therapist_id));
  const problems: string[] = [];
  const byAppointment = new Map<string, { therapistId: string; event: Resource }[]>();
  const ids = new Map<string, number>();
  for (const live of liveEvents(world)) {
    const id = appointmentIdOfEvent(live.event)!;
    byAppointment.set(id, [...(byAppointment.get(id) ?? []), live]);
    const key = String(live.event.id);
    ids.set(key, (ids.get(key) ?? 0) + 1);
  }
  for (const [id, n] of ids) if (n > 1) problems.push(`event id ${id} is live in ${n} calendars`);
  const appointments = new Map(world.booking.all().map((a) => [String(a.id), a]));
  for (const id of byAppointment.keys()) {
    if (!appointments.has(id)) problems.push(`${id}: live event(s) of an unknown appointment`);
  }
  for (const [id, appt] of appointments) {
    if (options.only && !options.only.has(id)) continue;
    const events = byAppointment.get(id) ?? [];
    const therapist = String(appt.therapist_id);
    const wanted = appt.status === "confirmed" && mapped.has(therapist);
    if (!wanted) {
      if (events.length > 0) problems.push(`${id} (${appt.status}): ${events.length} live event(s), expected none`);
      continue;
    }
    if (events.length !== 1) {
      problems.push(`${id} (confirmed): ${events.length} live events, expected exactly one`);
      continue;
    }
    const [{ therapistId, event }] = events as [{ therapistId: string; event: Resource }];
    if (therapistId !== therapist) problems.push(`${id}: event in ${therapistId}'s calendar, expected ${therapist}'s`);
    const start = Date.parse(String(appt.start_time));
    const end = Date.parse(String(appt.end_time));
    if (instant(event.start) !== start || instant(event.end) !== end) {
      problems.push(
        `${id}: event at ${String((event.start as { dateTime?: string })?.dateTime)}..${String((event.end as { dateTime?: string })?.dateTime)}, booking says ${String(appt.start_time)}..${String(appt.end_time)}`,
      );
    }
  }
  return problems;
}

/** Polls `check` until it reports no problem or `timeoutMs` passes; returns the last problems. */
export async function eventually(check: () => string[] | Promise<string[]>, timeoutMs: number): Promise<string[]> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const problems = await check();
    if (problems.length === 0 || Date.now() > deadline) return problems;
    await new Promise((r) => setTimeout(r, 250));
  }
}

/**
 * When `problems` is not empty: writes what the simulators saw and what the daemon logged about the appointments
 * involved into a file in the world's folder, and returns a note naming it (for an assertion's message).
 */
export function explain(
  world: World,
  logLines: () => readonly string[],
  problems: string[],
  more: string[] = [],
): string {
  const ids = [...new Set([...problems.map((p) => /apt_[a-z0-9]+/.exec(p)?.[0]), ...more])].filter(
    (x): x is string => x !== undefined,
  );
  if (ids.length === 0) return "";
  const out: string[] = [...problems];
  const lines = logLines();
  for (const id of ids.slice(0, 10)) {
    const eventId = eventIdFor(id);
    out.push(`==== ${id} (event ${eventId}): ${JSON.stringify(world.booking.get(id))}`);
    for (const r of world.booking.requests.filter((q) => q.path.includes(id))) {
      out.push(`booking ${new Date(r.at).toISOString()} ${r.method} ${r.path} ${r.status ?? r.outcome}`);
    }
    for (const r of world.google.requestLog.filter((q) => q.path.includes(eventId))) {
      out.push(`google ${new Date(r.at).toISOString()} ${r.method} ${r.status}${r.dropped ? " (dropped)" : ""}`);
    }
    for (const e of world.booking.events.filter((e) => JSON.stringify(e.data).includes(id))) {
      out.push(`webhook ${String(e.created_at)} ${String(e.type)} ${String(e.id)}`);
    }
    for (const l of lines.filter((l) => l.includes(id) || l.includes(eventId))) out.push(l.slice(0, 1000));
  }
  const file = join(world.dir, "diagnostics.txt");
  writeFileSync(file, out.join("\n"));
  return `details in ${file}`;
}
