// Owns the full reconciliation: list the window on both sides, plan one action per appointment and per stray
// managed event, hold back a suspicious mass deletion, then apply the plan through syncAppointment.
import PQueue from "p-queue";
import type { Clock } from "../clock.ts";
import type { Logger } from "../log.ts";
import type { Table } from "../store/store.ts";
import { APPLY_IN_FLIGHT, forget, inPool, interleaved, SourcesInUse } from "./apply-order.ts";
import type { SyncEngine } from "./engine.ts";
import { describeError } from "./errors.ts";
import type { FullListings } from "./full-listings.ts";
import type { HistoryRecorder } from "./history.ts";
import type { LinkReader } from "./links.ts";
import type { Mapping } from "./mapping.ts";
import type { SyncMetrics } from "./metrics.ts";
import { lookUpMissing, placeAll } from "./reconcile-lookups.ts";
import { type GuardReport, type ReconcileOptions, type ReconcileReport, reportOf } from "./reconcile-report.ts";
import { listBookings, listCalendars, unclaimed } from "./reconcile-sides.ts";
import { shareLimit } from "./share-limit.ts";
import { LeadershipLostError } from "./stopped.ts";
import { deleteStrayInTurn, isStrayReason, LOOK_UP, removeStray, strayFate } from "./strays.ts";
import {
  type BookingPort,
  isDestructive,
  type Link,
  leavesEnrichment,
  type PlanEntry,
  planEntry,
  type SyncRequest,
} from "./types.ts";
import { readLinks, UNREADABLE } from "./unreadable-links.ts";
import type { WritebackGuard } from "./writeback-guard.ts";

export type { GuardReport, ReconcileOptions, ReconcileReport } from "./reconcile-report.ts";

/** What a reconciliation reads and drives. */
export interface ReconcileContext {
  mapping: Mapping;
  booking: BookingPort;
  links: LinkReader;
  sync: Pick<SyncEngine, "syncAppointment" | "plan" | "planFromHints" | "enrich" | "leading" | "exclusive">;
  /** Requests a minute enrichments may use (the plan's limit less the gate's reserve), for the report's estimate. */
  enrichPerMinute: () => number;
  metrics: Pick<SyncMetrics, "guardTripped" | "reconcileDuration" | "lastReconcileSuccess">;
  /** Where a copy removed by the run itself (not through a sync) is told, and counted (metrics, /status). */
  history?: Pick<HistoryRecorder, "applied">;
  removed?(therapistId: string): void;
  /** Appointments the run found in step on both sides (planned "none"): their dead letters, if any, are cleared. */
  inStep?(appointmentIds: readonly string[]): Promise<void>;
  /** Held write-backs are reported, not planned again. */
  guard: Pick<WritebackGuard, "isHeld">;
  /** Where the managed events counted per therapist go (the write-back guard's base). */
  managed: Map<string, number>;
  /** Which calendars to list in full this run (absent: all of them). */
  listings?: Pick<FullListings, "due" | "listed">;
  /** Where the time of the last successful run is kept (shared by replicas). */
  meta: Table<number>;
  clock: Clock;
  logger: Logger;
}

/** A run that would remove this many or fewer things is never held, whatever the share (a small calendar's cancellation). */
export const GUARD_FLOOR = 3;
const DAY = 86_400_000;

export async function reconcile(ctx: ReconcileContext, options: ReconcileOptions = {}): Promise<ReconcileReport> {
  const { mapping, clock } = ctx;
  const config = mapping.config;
  const log = options.log ?? ctx.logger;
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

  // 1. and 2. Both sides. A failed booking listing fails the run. Items count as old as the first page (snapshot.ts).
  const readAt = clock.now();
  const appointments = await listBookings(ctx.booking, { from, to }, options.therapistId);
  const listedAt = clock.now();
  // A calendar is listed only when its full listing is due; the others' side is their incremental sync (the links).
  // A dry run or a forced run reads everything: a person acts on what it shows.
  const full = (t: string) => dryRun || options.force === true || !ctx.listings || ctx.listings.due(t);
  const side = await listCalendars(mapping, therapists, { from, to }, log, full);
  const { events, unusable } = side;

  // 3. Plan: one decision per listed appointment, and per managed event no listed appointment accounts for.
  const ids = [...appointments.keys()];
  // A link that cannot be read (a damaged record) leaves its appointment alone, never read as "no link".
  const { links, unreadable } = await readLinks(ctx.links, ids, log);
  const { placed, wanted, skippedUnmapped } = placeAll(
    mapping,
    appointments,
    links,
    unusable,
    (t) => events.get(t),
    options.therapistId,
  );
  // A failed look-up is not "the event is gone": its calendar, or its appointment, is left alone this run.
  const looked = await lookUpMissing(mapping, side, wanted, config.sync.concurrency, log);
  // The guard's base: what was listed, and for the calendars not listed what their last full listing counted.
  let managed = 0;
  for (const [t, byId] of events) {
    managed += byId.size;
    if (!dryRun) ctx.managed.set(t, byId.size);
  }
  for (const t of side.incremental) managed += ctx.managed.get(t) ?? 0;

  const sources = new Map<string, SyncRequest>();
  const claimed = new Set<string>(); // "therapist/eventId" of events some appointment accounts for
  let waiting = 0;
  let held = 0;
  for (const { id, where, owner, eventId } of placed) {
    // The calendar it belongs in cannot be used now: its syncs would only wait. The run after it is back does them.
    if (owner !== undefined && unusable.has(owner)) {
      waiting++;
      continue;
    }
    if (looked.failed.has(id) || unreadable.has(id)) continue;
    const listed = where ? events.get(where) : undefined;
    let calendar: SyncRequest["calendar"];
    if (where && listed) {
      claimed.add(`${where}/${eventId}`);
      calendar = { therapistId: where, event: listed.get(eventId) ?? looked.found.get(id) ?? null, seenAt: listedAt };
    }
    sources.set(id, {
      reason: "reconcile",
      priority: "reconcile",
      origin: "reconcile",
      booking: { appt: appointments.get(id)!, readAt },
      ...(calendar ? { calendar } : {}),
      log,
    });
  }
  // An appointment whose look-up failed: its events elsewhere are not strays either (its own decision is not known).
  const strays = (await unclaimed(events, claimed, ctx.links, log)).filter(
    (s) => !looked.failed.has(s.id) && !unreadable.has(s.id),
  );
  // A run for one therapist cannot tell a colleague's copy there: the next full run lists that calendar again.
  const unsure = new Set(
    strays.flatMap((s) => (options.therapistId && !appointments.has(s.id) ? [s.therapistId] : [])),
  );
  for (const t of dryRun ? [] : events.keys()) if (!unsure.has(t)) ctx.listings?.listed(t, readAt);

  const plan: PlanEntry[] = [];
  const planned = new Map<string, PlanEntry>();
  let failed = looked.failed.size;
  const linkOf = new Map(ids.map((id, i) => [id, links[i]]));
  // Enrichments left due by this run, queued here (a restart forgets the queue, the links do not). `unasked` also has
  // listed appointments left without link and event (cancelled): their tombstone stops a late appointment.created.
  const enrichments = new Set<string>();
  const resume: string[] = [];
  const unasked: string[] = [];
  // Most appointments are decided from what was just read; the rest read for themselves, as many at once as syncs run.
  const reads = new PQueue({ concurrency: config.sync.concurrency });
  const planOne = async (id: string, source: SyncRequest) => {
    try {
      const action =
        ctx.sync.planFromHints(id, linkOf.get(id), source) ??
        // A full form read while planning is handed on: the sync that applies the action does not read it again.
        (await reads.add(() => ctx.sync.plan(id, source, (hint) => (source.booking = hint))));
      if (leavesEnrichment(action, linkOf.get(id))) {
        enrichments.add(id);
        // An enrichment is dropped unless the link asks for it: the "none" that saves it asking is applied first.
        if (action.kind === "none") (linkOf.get(id)?.enrich ? resume : unasked).push(id);
      } else if (action.kind === "none" && linkOf.has(id) && !linkOf.get(id)) unasked.push(id);
      const entry = planEntry(action);
      planned.set(id, entry);
      if (
        (entry.kind === "writeback_cancel" || entry.kind === "writeback_reschedule") &&
        (await ctx.guard.isHeld(id))
      ) {
        held++;
        return;
      }
      if (entry.kind !== "none") plan.push(entry);
    } catch (err) {
      failed++;
      log.error({ appointment_id: id, err: describeError(err) }, "could not plan this appointment");
    }
  };
  await Promise.all([...sources].map(([id, source]) => planOne(id, source)));

  // Stray events (appointment gone, reassigned, out of the window): too many at once is held before any request.
  const limit = shareLimit(config.sync.max_delete_ratio, managed, GUARD_FLOOR);
  const strayOverLimit = strays.length > limit && !options.force;
  /** The link each stray's fate was read from: its deletion is sent only while the link is still that one. */
  const strayLinks = new Map<string, Link | undefined>();
  if (!strayOverLimit) {
    await Promise.all(
      strays.map(async (s) => {
        const facts = { mapping, listed: appointments.get(s.id), planned: planned.get(s.id) };
        const link = await unreadable.read(ctx.links, s.id);
        if (link === UNREADABLE) return; // whose it is now cannot be told: left alone, as its appointment
        strayLinks.set(s.id, link);
        const fate = strayFate(s, link, facts);
        if (fate !== LOOK_UP) {
          if (fate) removeStray(plan, planned, s, fate);
          return;
        }
        const source: SyncRequest = {
          reason: "reconcile (event without a listed appointment)",
          priority: "reconcile",
          origin: "reconcile",
          calendar: { therapistId: s.therapistId, event: s.event, seenAt: listedAt },
          log,
        };
        sources.set(s.id, source);
        await planOne(s.id, source);
      }),
    );
  }

  // 4. The guard: a run that would remove more than the configured share of the managed events stops and reports.
  const destructive = plan.filter(isDestructive).length + (strayOverLimit ? strays.length : 0);
  const tripped = !options.force && destructive > limit;
  const guard: GuardReport = { tripped, destructive, managed, limit };
  if (tripped) {
    ctx.metrics.guardTripped.inc();
    log.error(
      { destructive, managed, max_delete_ratio: config.sync.max_delete_ratio },
      `mass-deletion guard: this run would remove ${destructive} of ${managed} managed events; nothing is deleted or cancelled. Check the booking API and calendars, then run \`calbridge reconcile --force\` if this is intended.`,
    );
  }

  // 5. Apply. Planning's inputs go first (the write burst is a cold run's peak), each source after its last use.
  const counted = { appointments: appointments.size, calendars: events.size };
  const inStep = [...planned].flatMap(([id, entry]) => (entry.kind === "none" ? [id] : []));
  forget([appointments, events, linkOf, planned, claimed], [links, strays]);
  if (!dryRun) {
    const [inUse, heldNow] = [new SourcesInUse(sources, plan), new Set<string>()];
    // A few hundred handed over at a time (a cold run holds no thousands of calls in flight); therapists in turn, so
    // each one's work starts at once (the engine runs them side by side, each within its own Google quota).
    await inPool(interleaved(plan), APPLY_IN_FLIGHT, async (action) => {
      if (tripped && isDestructive(action)) return;
      if (action.kind === "delete" && isStrayReason(action.reason)) {
        if (!ctx.sync.leading) throw new LeadershipLostError(); // the lease was lost: the next leader decides
        const read = strayLinks.get(action.appointmentId);
        if (
          !(await deleteStrayInTurn(ctx.sync, ctx.links, read, mapping.calendar(action.therapistId), action, log, ctx))
        )
          failed++;
        return;
      }
      const source = inUse.take(action.appointmentId);
      if (!source) return;
      const outcome = await ctx.sync.syncAppointment(action.appointmentId, source);
      if (!outcome.ok) failed++;
      else if (outcome.waiting === "held") heldNow.add(action.appointmentId); // the guard held it: nothing was sent
    });
    held += heldNow.size;
    if (heldNow.size > 0) plan.splice(0, plan.length, ...plan.filter((e) => !heldNow.has(e.appointmentId)));
  }

  if (!dryRun) {
    for (const id of resume) ctx.sync.enrich(id);
    await inPool(unasked, APPLY_IN_FLIGHT, async (id) => void (await ctx.sync.syncAppointment(id, sources.get(id)!)));
    await ctx.inStep?.(inStep);
  }
  const perMinute = ctx.enrichPerMinute();
  const enrichment = { pending: enrichments.size, minutes: Math.ceil(enrichments.size / perMinute), perMinute };

  const durationMs = clock.now() - started;
  const report = reportOf(
    {
      dryRun,
      startedAt: new Date(started).toISOString(),
      durationMs,
      window: { from, to },
      appointments: counted.appointments,
      skippedUnmapped,
      waitingForCalendar: waiting,
      heldWritebacks: held,
      enrichment,
      managedEvents: managed,
      calendarsListed: counted.calendars,
      calendarsIncremental: side.incremental.size,
      plan,
      guard,
      calendarErrors: side.calendarErrors,
      failed,
      unreadableLinks: unreadable.ids,
    },
    log,
  );
  if (!dryRun && !options.therapistId) {
    // A run of one therapist (a backfill, `--therapist`) says nothing of the others: it is no full reconciliation.
    ctx.metrics.reconcileDuration.observe(durationMs / 1000);
    if (report.ok || (!tripped && failed === 0)) {
      ctx.metrics.lastReconcileSuccess.set(Math.floor(clock.now() / 1000));
      await ctx.meta.set("last_reconcile_success", clock.now());
    }
  }
  return report;
}
