// Owns the full reconciliation: list the window on both sides, plan one action per appointment and per stray
// managed event, hold back a suspicious mass deletion, then apply the plan through syncAppointment.
import type { Appointment } from "../booking/schemas.ts";
import { APPOINTMENT_ID_PROPERTY, eventIdFor } from "../calendar/ids.ts";
import type { Logger } from "../log.ts";
import type { SyncEngine, SyncSource } from "./engine.ts";
import { describeError } from "./errors.ts";
import { type ActionKind, type CalEvent, isDestructive, type PlanEntry, planEntry } from "./types.ts";

export interface ReconcileOptions {
  dryRun?: boolean;
  /** Only this therapist's appointments and calendar. */
  therapistId?: string;
  /** Apply deletions even when the mass-deletion guard would hold them. */
  force?: boolean;
  log?: Logger;
}

export interface GuardReport {
  tripped: boolean;
  destructive: number;
  managed: number;
  limit: number;
}

export interface ReconcileReport {
  dryRun: boolean;
  startedAt: string;
  durationMs: number;
  window: { from: string; to: string };
  appointments: number;
  skippedUnmapped: number;
  managedEvents: number;
  /** Every action other than "none", as planned (without event bodies). */
  plan: PlanEntry[];
  counts: Partial<Record<ActionKind, number>>;
  guard: GuardReport;
  /** Therapists whose calendar could not be listed (their events were left alone). */
  calendarErrors: Record<string, string>;
  failed: number;
  ok: boolean;
}

/** A run that would remove this many or fewer things is never held, whatever the share (a small calendar's cancellation). */
export const GUARD_FLOOR = 3;
const DAY = 86_400_000;

export async function reconcile(engine: SyncEngine, options: ReconcileOptions = {}): Promise<ReconcileReport> {
  const { config, clock } = engine;
  const log = options.log ?? engine.logger;
  const started = clock.now();
  const from = new Date(started - config.sync.window.past_days * DAY).toISOString();
  const to = new Date(started + config.sync.window.future_days * DAY).toISOString();
  const therapists = options.therapistId
    ? config.therapists.filter((t) => t.therapist_id === options.therapistId)
    : config.therapists;
  if (options.therapistId && therapists.length === 0) {
    throw new Error(`therapist ${options.therapistId} is not in the configuration`);
  }
  const dryRun = options.dryRun === true;

  // 1. The booking side: one listing of the window, 100 a page. Failing here fails the run: nothing is decided.
  const appointments = new Map<string, Appointment>();
  for await (const appt of engine.booking.listAppointments(
    { dateFrom: from, dateTo: to, ...(options.therapistId ? { therapistId: options.therapistId } : {}) },
    { priority: "reconcile" },
  )) {
    appointments.set(appt.id, appt);
  }
  const readAt = clock.now();

  // 2. The calendar side: managed events of each calendar in the window. A calendar that cannot be listed is left
  //    alone this run (nothing in it is deleted, nothing of it is written back).
  const listedAt = clock.now();
  const events = new Map<string, Map<string, CalEvent>>();
  const calendarErrors: Record<string, string> = {};
  await Promise.all(
    therapists.map(async (t) => {
      const cal = engine.calendars.get(t.therapist_id);
      if (!cal) return;
      try {
        const byId = new Map<string, CalEvent>();
        for await (const ev of cal.listManaged({ timeMin: from, timeMax: to })) if (ev.id) byId.set(ev.id, ev);
        events.set(t.therapist_id, byId);
      } catch (err) {
        calendarErrors[t.therapist_id] = describeError(err);
        log.error(
          { therapist_id: t.therapist_id, err: describeError(err) },
          "calendar could not be listed; left alone this run",
        );
      }
    }),
  );
  const managed = [...events.values()].reduce((n, m) => n + m.size, 0);

  // 3. Plan: one decision per listed appointment, and per managed event no listed appointment accounts for.
  const ids = [...appointments.keys()];
  const links = await engine.getLinks(ids);
  const sources = new Map<string, SyncSource>();
  const claimed = new Set<string>(); // "therapist/eventId" of events some appointment accounts for
  let skippedUnmapped = 0;
  for (const [i, id] of ids.entries()) {
    const appt = appointments.get(id)!;
    const link = links[i];
    const target = engine.therapist(appt.therapist_id);
    if (!target && !link?.present) {
      skippedUnmapped++;
      continue;
    }
    if (options.therapistId && !target && link?.therapistId !== options.therapistId) continue;
    const where = link?.therapistId ?? target?.therapist_id;
    const eventId = link?.eventId ?? eventIdFor(id);
    const listed = where ? events.get(where) : undefined;
    let seen: SyncSource["seen"];
    if (where && listed) {
      claimed.add(`${where}/${eventId}`);
      let event: CalEvent | null = listed.get(eventId) ?? null;
      if (!event && link?.present) {
        // Not in the window listing: deleted, or moved out of the window by the therapist. Look before deciding.
        event = await engine.calendars.get(where)!.get(eventId);
      }
      seen = { therapistId: where, event };
    }
    sources.set(id, {
      reason: "reconcile",
      priority: "reconcile",
      appt,
      readAt,
      ...(seen ? { seen, seenAt: listedAt } : {}),
      log,
    });
  }
  const strays: { id: string; therapistId: string; event: CalEvent }[] = [];
  for (const [therapistId, byId] of events) {
    for (const [eventId, ev] of byId) {
      if (claimed.has(`${therapistId}/${eventId}`)) continue;
      const id =
        ev.extendedProperties?.private?.[APPOINTMENT_ID_PROPERTY] ?? (await engine.appointmentOfEvent(eventId));
      if (id) strays.push({ id, therapistId, event: ev });
    }
  }

  const plan: PlanEntry[] = [];
  const planned = new Map<string, PlanEntry>();
  let failed = 0;
  const linkOf = new Map(ids.map((id, i) => [id, links[i]]));
  const planOne = async (id: string, source: SyncSource) => {
    try {
      // Most appointments are decided from what was just read; the rest read for themselves (dry, nothing written).
      const action =
        engine.planFromHints(id, linkOf.get(id), source) ??
        (await engine.syncAppointment(id, { ...source, dryRun: true }));
      const entry = planEntry(action);
      planned.set(id, entry);
      if (entry.kind !== "none") plan.push(entry);
    } catch (err) {
      failed++;
      log.error({ appointment_id: id, err: describeError(err) }, "could not plan this appointment");
    }
  };
  await Promise.all([...sources].map(([id, source]) => planOne(id, source)));

  // Stray events: their appointment left the window, was reassigned, or is gone. Too many at once looks like a
  // broken listing, so the guard holds them before spending a request on each.
  const limit = Math.max(GUARD_FLOOR, Math.floor(config.sync.max_delete_ratio * managed));
  const strayOverLimit = strays.length > limit && !options.force;
  if (!strayOverLimit) {
    await Promise.all(
      strays.map(async (s) => {
        const link = await engine.getLink(s.id);
        // Marked with the appointment but not its event (an occurrence of a series made of it, a copy): not ours.
        if (s.event.id !== (link?.eventId ?? eventIdFor(s.id))) return;
        if (link?.present && link.therapistId !== s.therapistId && appointments.has(s.id)) {
          // A copy left in another calendar after a reassignment: remove it, unless its own calendar lost the event
          // (then the therapist moved it across calendars, and the appointment's own decision handles it).
          const own = planned.get(s.id);
          if (own?.kind === "writeback_cancel") return;
          const action: PlanEntry = {
            kind: "delete",
            appointmentId: s.id,
            therapistId: s.therapistId,
            eventId: s.event.id!,
            reason: "copy left behind in another calendar",
          };
          plan.push(action);
          planned.set(`${s.therapistId}/${s.event.id}`, action);
          return;
        }
        if (!appointments.has(s.id)) {
          const source: SyncSource = {
            reason: "reconcile (event without a listed appointment)",
            priority: "reconcile",
            seen: { therapistId: s.therapistId, event: s.event },
            seenAt: listedAt,
            log,
          };
          sources.set(s.id, source);
          await planOne(s.id, source);
        }
      }),
    );
  }

  // 4. The guard: a run that would remove more than the configured share of the managed events stops and reports.
  const destructive = plan.filter(isDestructive).length + (strayOverLimit ? strays.length : 0);
  const tripped = !options.force && destructive > limit;
  const guard: GuardReport = { tripped, destructive, managed, limit };
  if (tripped) {
    engine.metrics.guardTripped.inc();
    log.error(
      { destructive, managed, max_delete_ratio: config.sync.max_delete_ratio },
      `mass-deletion guard: this run would remove ${destructive} of ${managed} managed events; nothing is deleted or cancelled. Check the booking API and calendars, then run \`calbridge reconcile --force\` if this is intended.`,
    );
  }

  // 5. Apply.
  if (!dryRun) {
    // In slices, so that a cold run over thousands of appointments does not hold thousands of calls in flight.
    await inSlices(plan, 64, async (action) => {
      if (tripped && isDestructive(action)) return;
      if (action.kind === "delete" && action.reason === "copy left behind in another calendar") {
        await engine.calendars
          .get(action.therapistId)
          ?.delete(action.eventId)
          .catch((err) => {
            failed++;
            log.warn({ err: describeError(err) }, "stray event not removed");
          });
        return;
      }
      const source = sources.get(action.appointmentId);
      if (!source) return;
      const done = await engine.syncAppointment(action.appointmentId, source);
      if (done.kind === "none" && done.reason.startsWith("failed")) failed++;
    });
  }

  const counts: Partial<Record<ActionKind, number>> = {};
  for (const a of plan) counts[a.kind] = (counts[a.kind] ?? 0) + 1;
  const durationMs = clock.now() - started;
  const ok = failed === 0 && !tripped && Object.keys(calendarErrors).length === 0;
  if (!dryRun) {
    engine.metrics.reconcileDuration.observe(durationMs / 1000);
    if (ok || (!tripped && failed === 0)) {
      engine.metrics.lastReconcileSuccess.set(Math.floor(clock.now() / 1000));
      await engine.store.table<number>("meta").set("last_reconcile_success", clock.now());
    }
  }
  log.info(
    {
      dry_run: dryRun,
      appointments: appointments.size,
      managed,
      skipped_unmapped: skippedUnmapped,
      counts,
      failed,
      guard_tripped: tripped,
      duration_ms: durationMs,
    },
    "reconciliation finished",
  );
  return {
    dryRun,
    startedAt: new Date(started).toISOString(),
    durationMs,
    window: { from, to },
    appointments: appointments.size,
    skippedUnmapped,
    managedEvents: managed,
    plan,
    counts,
    guard,
    calendarErrors,
    failed,
    ok,
  };
}

async function inSlices<T>(items: readonly T[], size: number, fn: (item: T) => Promise<void>): Promise<void> {
  for (let i = 0; i < items.length; i += size) await Promise.all(items.slice(i, i + size).map(fn));
}
