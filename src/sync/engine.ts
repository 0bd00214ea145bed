// Owns syncAppointment: the one idempotent, level-triggered operation that makes the calendars match an
// appointment's current state (and pushes a therapist's calendar change back). Webhooks, the reconciliation and the
// calendar poller only decide which appointments to sync and supply hints; every write goes through here.
import PQueue from "p-queue";
import type { Priority } from "../booking/gate.ts";
import type { Appointment } from "../booking/schemas.ts";
import { fingerprint, instantOf } from "../calendar/fingerprint.ts";
import { eventIdFor } from "../calendar/ids.ts";
import { RenderError, type RenderedEvent, renderEvent } from "../calendar/render.ts";
import { type Clock, systemClock } from "../clock.ts";
import type { Config, TherapistConfig } from "../config/schema.ts";
import { writebackFor } from "../config/schema.ts";
import { type Logger, silentLogger } from "../log.ts";
import type { Store, Table } from "../store/store.ts";
import { bookingChanged, decide } from "./decide.ts";
import { describeError, isCalendarKind, isNotFound, isPermanent } from "./errors.ts";
import { KeyedSerial } from "./keyed.ts";
import { noopSyncMetrics, type SyncMetrics } from "./metrics.ts";
import type { Action, BookingPort, CalEvent, CalendarPort, Link, Snapshot } from "./types.ts";
import { applyWriteback } from "./writeback.ts";

export interface EngineOptions {
  config: Config;
  booking: BookingPort;
  /** One calendar per mapped therapist, by therapist id. */
  calendars: Map<string, CalendarPort>;
  store: Store;
  logger?: Logger;
  clock?: Clock;
  metrics?: SyncMetrics;
  /** Tries of one appointment before it stays in the dead letters (default 5). */
  maxAttempts?: number;
  /** First retry delay; doubles each time (default 5 s). */
  retryBaseMs?: number;
}

/** Where a sync request comes from, and what it already knows. */
export interface SyncSource {
  reason: string;
  priority: Priority;
  /** The booking's state when already known (list item, webhook payload); fetched when absent. */
  appt?: Appointment;
  /** Epoch ms of the fact in `appt` (webhook created_at); a hint not newer than what was applied is re-fetched. */
  at?: number;
  /** Our clock when `appt` was read (a listing); a link synced after that has newer facts, so the hint is re-fetched. */
  readAt?: number;
  /** The event as just seen in a therapist's calendar (null: not there / deleted). */
  seen?: { therapistId: string; event: CalEvent | null };
  /**
   * Our clock when `seen` was read (a listing or a change feed). A link written since then means calbridge wrote the
   * event after that read, so `seen` may be older than calbridge's own write: the event is read again before deciding.
   */
  seenAt?: number;
  /** Read the event from the link's calendar before deciding (a retry of a calendar change). */
  readEvent?: boolean;
  log?: Logger;
  /** With `dryRun`, nothing is written anywhere: the action is only returned. */
  dryRun?: boolean;
  attempt?: number;
}

export interface DeadLetter {
  appointmentId: string;
  error: string;
  attempts: number;
  firstAt: number;
  lastAt: number;
  reason: string;
  final: boolean;
}

export interface TherapistStatus {
  lastSyncAt?: number;
  lastError?: string;
  lastErrorAt?: number;
  writes: number;
  writebacks: number;
}

/** Internal view handed to the write-back module. */
export interface EngineContext {
  readonly config: Config;
  readonly booking: BookingPort;
  readonly calendars: Map<string, CalendarPort>;
  readonly clock: Clock;
  readonly metrics: SyncMetrics;
  readonly maxAttempts: number;
  therapist(id: string | undefined): TherapistConfig | undefined;
  render(appt: Snapshot, therapist: TherapistConfig, notice?: Link["notice"]): RenderedEvent | null;
  saveLink(link: Link): Promise<void>;
  linkFrom(args: LinkArgs): Link;
  write(therapistId: string, action: Action, body: RenderedEvent, eventId: string, ifMatch?: string): Promise<CalEvent>;
}

export interface LinkArgs {
  appointmentId: string;
  therapistId: string;
  eventId: string;
  booking: Snapshot;
  sourceAt: number;
  event?: CalEvent | null;
  body?: RenderedEvent | null;
  present: boolean;
  removedBy?: "booking" | "calendar";
  notice?: Link["notice"];
}

export class SyncEngine implements EngineContext {
  readonly config: Config;
  readonly booking: BookingPort;
  readonly calendars: Map<string, CalendarPort>;
  readonly clock: Clock;
  readonly metrics: SyncMetrics;
  readonly maxAttempts: number;
  readonly #store: Store;
  readonly #links: Table<Link>;
  readonly #eventIndex: Table<string>;
  readonly #dead: Table<DeadLetter>;
  readonly #logger: Logger;
  readonly #serial = new KeyedSerial();
  readonly #queue: PQueue;
  readonly #therapists: Map<string, TherapistConfig>;
  readonly #retryBaseMs: number;
  readonly #retries = new Map<string, AbortController>();
  readonly #status = new Map<string, TherapistStatus>();
  #deadCount = 0;
  #stopped = false;

  constructor(options: EngineOptions) {
    this.config = options.config;
    this.booking = options.booking;
    this.calendars = options.calendars;
    this.clock = options.clock ?? systemClock;
    this.metrics = options.metrics ?? noopSyncMetrics;
    this.maxAttempts = options.maxAttempts ?? 5;
    this.#retryBaseMs = options.retryBaseMs ?? 5000;
    this.#store = options.store;
    this.#links = options.store.table<Link>("links");
    this.#eventIndex = options.store.table<string>("eventindex");
    this.#dead = options.store.table<DeadLetter>("dead");
    this.#logger = options.logger ?? silentLogger;
    this.#queue = new PQueue({ concurrency: options.config.sync.concurrency });
    this.#therapists = new Map(options.config.therapists.map((t) => [t.therapist_id, t]));
    for (const t of options.config.therapists) this.#status.set(t.therapist_id, { writes: 0, writebacks: 0 });
  }

  get store(): Store {
    return this.#store;
  }

  get logger(): Logger {
    return this.#logger;
  }

  therapist(id: string | undefined): TherapistConfig | undefined {
    return id === undefined ? undefined : this.#therapists.get(id);
  }

  /** Appointments waiting for, or in, a sync. */
  get queueDepth(): number {
    return this.#queue.size + this.#queue.pending;
  }

  statusOf(therapistId: string): TherapistStatus | undefined {
    return this.#status.get(therapistId);
  }

  get deadLetterCount(): number {
    return this.#deadCount;
  }

  getLink(id: string): Promise<Link | undefined> {
    return this.#links.get(id);
  }

  getLinks(ids: string[]): Promise<(Link | undefined)[]> {
    return this.#links.getMany(ids);
  }

  /** The appointment behind a managed event id, from the index written with every link. */
  appointmentOfEvent(eventId: string): Promise<string | undefined> {
    return this.#eventIndex.get(eventId);
  }

  /**
   * Makes the calendars match appointment `id`. Serial per appointment, bounded globally; failures are kept in the
   * dead letters and retried with backoff, never stopping other work. Resolves with the action taken.
   */
  syncAppointment(id: string, source: SyncSource): Promise<Action> {
    return this.#queue.add(() => this.#serial.run(id, () => this.#attempt(id, source)), {
      priority: source.priority === "webhook" ? 2 : source.priority === "writeback" ? 1 : 0,
    }) as Promise<Action>;
  }

  /** Stops scheduling retries and waits for queued work to finish. */
  async stop(): Promise<void> {
    this.#stopped = true;
    for (const c of this.#retries.values()) c.abort();
    this.#retries.clear();
    await this.#queue.onIdle();
  }

  idle(): Promise<void> {
    return this.#queue.onIdle();
  }

  async #attempt(id: string, source: SyncSource): Promise<Action> {
    const parent = source.log ?? this.#logger;
    const log = parent.bindings().appointment_id === id ? parent : parent.child({ appointment_id: id });
    const attempt = source.attempt ?? 1;
    try {
      const action = await this.#syncOnce(id, source, log);
      if (!source.dryRun) await this.#clearDead(id);
      return action;
    } catch (err) {
      const message = describeError(err);
      const permanent = isPermanent(err);
      const final = permanent || attempt >= this.maxAttempts;
      this.metrics.operations.inc({ kind: "error", result: permanent ? "permanent" : "transient" });
      if (source.dryRun) throw err;
      log.error({ err: message, attempt, final, reason: source.reason }, "sync failed");
      await this.#recordDead(id, message, attempt, source.reason, final).catch((e) =>
        log.error({ err: describeError(e) }, "could not record the dead letter"),
      );
      if (!final) this.#scheduleRetry(id, source, attempt);
      const therapistId = source.seen?.therapistId ?? source.appt?.therapist_id;
      const st = therapistId ? this.#status.get(therapistId) : undefined;
      if (st) {
        st.lastError = message;
        st.lastErrorAt = this.clock.now();
      }
      return { kind: "none", appointmentId: id, reason: `failed: ${message}` };
    }
  }

  #scheduleRetry(id: string, source: SyncSource, attempt: number): void {
    if (this.#stopped) return;
    this.#retries.get(id)?.abort();
    const ctl = new AbortController();
    this.#retries.set(id, ctl);
    const delay = this.#retryBaseMs * 2 ** (attempt - 1) * (0.5 + Math.random() / 2);
    this.clock.sleep(delay, ctl.signal).then(
      () => {
        if (this.#retries.get(id) === ctl) this.#retries.delete(id);
        // A retry re-reads the booking: the state that failed may be stale by now.
        void this.syncAppointment(id, {
          ...source,
          appt: undefined,
          at: undefined,
          seen: undefined,
          readEvent: source.readEvent === true || source.seen !== undefined,
          reason: `retry of ${source.reason}`,
          attempt: attempt + 1,
        });
      },
      () => {},
    );
  }

  async #recordDead(id: string, error: string, attempts: number, reason: string, final: boolean): Promise<void> {
    const prev = await this.#dead.get(`appt:${id}`);
    if (!prev) this.#deadCount++;
    const now = this.clock.now();
    await this.#dead.set(`appt:${id}`, {
      appointmentId: id,
      error,
      attempts,
      firstAt: prev?.firstAt ?? now,
      lastAt: now,
      reason,
      final,
    });
    this.metrics.deadLetters.set(this.#deadCount);
  }

  async #clearDead(id: string): Promise<void> {
    if (this.#deadCount === 0) return;
    if (await this.#dead.delete(`appt:${id}`)) {
      this.#deadCount = Math.max(0, this.#deadCount - 1);
      this.metrics.deadLetters.set(this.#deadCount);
    }
  }

  /** Reads the dead-letter count from the store (at start). */
  async loadDeadLetterCount(): Promise<number> {
    let n = 0;
    for await (const [key] of this.#dead.entries()) if (key.startsWith("appt:")) n++;
    this.#deadCount = n;
    this.metrics.deadLetters.set(n);
    return n;
  }

  /** The booking state to act on: the hint when it is newer than what was applied, otherwise a fresh read. */
  /** The booking state the hint gives, when it is complete and newer than what was applied; undefined otherwise. */
  #hintState(link: Link | undefined, source: SyncSource): { appt: Snapshot; sourceAt: number } | undefined {
    const hint = source.appt;
    if (!hint) return undefined;
    const applied = link?.sourceAt ?? 0;
    const merged = merge(link?.booking, hint);
    // A payload whose times cannot be rendered is no hint at all: read the booking instead of failing on it (the
    // webhook would be retried with the same payload, holding up every later event of the appointment).
    const start = merged.start_time ? Date.parse(merged.start_time) : Number.NaN;
    const end = merged.end_time ? Date.parse(merged.end_time) : Number.NaN;
    const usable = end > start && merged.therapist_id && merged.status;
    const fresh =
      (source.at === undefined || !link || source.at > applied) &&
      (source.readAt === undefined || !link || link.syncedAt <= source.readAt);
    return usable && fresh ? { appt: merged, sourceAt: Math.max(applied, source.at ?? 0, updatedAt(hint)) } : undefined;
  }

  /**
   * The action for `source` decided from what the caller already read (the link, a listing item, a listed event),
   * without any I/O or queueing; undefined when that is not enough and syncAppointment must read for itself. The
   * reconciliation plans thousands of unchanged appointments this way.
   */
  planFromHints(id: string, link: Link | undefined, source: SyncSource): Action | undefined {
    if (source.readEvent) return undefined;
    if (source.seen && link && source.seenAt !== undefined && link.syncedAt >= source.seenAt) return undefined;
    const state = this.#hintState(link, source);
    if (!state) return undefined;
    try {
      return this.plan(id, state.appt, link, this.#eventFor(link, state.appt, source), source.seen?.therapistId);
    } catch {
      return undefined; // e.g. a rendering problem: the full path records it properly
    }
  }

  async #bookingState(
    id: string,
    link: Link | undefined,
    source: SyncSource,
  ): Promise<{ appt: Snapshot | null; sourceAt: number }> {
    const applied = link?.sourceAt ?? 0;
    const fromHint = this.#hintState(link, source);
    if (fromHint) return fromHint;
    try {
      const appt = await this.booking.getAppointment(id, { priority: source.priority });
      return { appt: merge(link?.booking, appt), sourceAt: Math.max(applied, source.at ?? 0, updatedAt(appt)) };
    } catch (err) {
      if (isNotFound(err)) return { appt: null, sourceAt: applied };
      throw err;
    }
  }

  async #syncOnce(id: string, source: SyncSource, log: Logger): Promise<Action> {
    const link = await this.#links.get(id);
    const { appt, sourceAt } = await this.#bookingState(id, link, source);
    let event = this.#eventFor(link, appt, source);
    if (event !== undefined && link && source.seenAt !== undefined && link.syncedAt >= source.seenAt) {
      // Taking an old version for the therapist's change would push it back to the booking service (a cancellation
      // or a move nobody made) or undo calbridge's own write.
      event = await this.#calendar(source.seen!.therapistId).get(event?.id ?? link.eventId);
    } else if (source.readEvent && link?.present && event === undefined) {
      event = await this.#calendar(link.therapistId).get(link.eventId);
    }
    for (let round = 0; ; round++) {
      const action = this.plan(id, appt, link, event, source.seen?.therapistId);
      if (source.dryRun) return action;
      try {
        await this.#apply(action, { id, appt, link, sourceAt, event, log, source });
        return action;
      } catch (err) {
        // 412: the therapist changed the event since we last saw it. Read it and decide again, once.
        if (round === 0 && isCalendarKind(err, "precondition") && "therapistId" in action) {
          log.info({ action: action.kind }, "event changed meanwhile; re-reading it before deciding again");
          // Write-backs name no event of their own: theirs is the linked one.
          const eventId = "eventId" in action ? action.eventId : link?.eventId;
          if (eventId === undefined) throw err;
          event = await this.#calendar(action.therapistId).get(eventId);
          continue;
        }
        throw err;
      }
    }
  }

  #eventFor(link: Link | undefined, appt: Snapshot | null, source: SyncSource): CalEvent | null | undefined {
    const seen = source.seen;
    if (!seen) return undefined;
    const where = link?.therapistId ?? (this.therapist(appt?.therapist_id) ? appt?.therapist_id : undefined);
    // Without a link or a mapped owner, the event where it was seen is the one to decide about (an orphan).
    return seen.therapistId === where || where === undefined ? seen.event : undefined;
  }

  /** The action for one appointment, given both sides (pure apart from reading the configuration). */
  plan(
    id: string,
    appt: Snapshot | null,
    link: Link | undefined,
    event: CalEvent | null | undefined,
    seenIn?: string,
  ): Action {
    const target = this.therapist(appt?.therapist_id);
    const notice = link?.notice && appt && !bookingChanged(link, appt) ? link.notice : undefined;
    const desired = appt && target ? this.render(appt, target, notice) : null;
    const owner = this.therapist(link?.therapistId) ?? target;
    const action = decide({
      appointmentId: id,
      appt,
      link,
      event,
      targetTherapistId: target?.therapist_id,
      seenIn: event === undefined ? undefined : seenIn,
      desired,
      eventId: link?.eventId ?? eventIdFor(id),
      writeback: owner ? writebackFor(this.config, owner) : { ...this.config.sync.writeback },
      conflict: this.config.sync.conflict,
    });
    // A change undone in the calendar carries its own notice, replacing any earlier one.
    if ((action.kind === "restore" || action.kind === "update") && action.notice && appt) {
      const owner = this.therapist(action.therapistId);
      const body = owner ? this.render(appt, owner, { text: action.notice, at: 0 }) : null;
      if (body) action.body = body;
    }
    return action;
  }

  render(appt: Snapshot, therapist: TherapistConfig, notice?: Link["notice"]): RenderedEvent | null {
    const body = renderEvent(appt, therapist, {
      ...this.config.event,
      cancelled_events: this.config.sync.cancelled_events,
    });
    if (body && notice) body.description = `${body.description}\n\n${notice.text}`.trim();
    return body;
  }

  #calendar(therapistId: string): CalendarPort {
    const cal = this.calendars.get(therapistId);
    if (!cal) throw new RenderError(therapistId, `no calendar configured for therapist ${therapistId}`);
    return cal;
  }

  linkFrom(a: LinkArgs): Link {
    const event = a.event ?? undefined;
    return {
      appointmentId: a.appointmentId,
      therapistId: a.therapistId,
      calendarId: this.therapist(a.therapistId)?.calendar_id ?? "",
      eventId: a.eventId,
      present: a.present,
      ...(a.removedBy ? { removedBy: a.removedBy } : {}),
      etag: event?.etag ?? undefined,
      fingerprint: a.body ? fingerprint(a.body) : event ? fingerprint(event) : undefined,
      eventStart: instantOf(event?.start) ?? instantOf(a.body?.start),
      eventEnd: instantOf(event?.end) ?? instantOf(a.body?.end),
      booking: a.booking,
      sourceAt: a.sourceAt,
      ...(a.notice ? { notice: a.notice } : {}),
      syncedAt: this.clock.now(),
    };
  }

  async saveLink(link: Link): Promise<void> {
    await this.#links.set(link.appointmentId, link);
    await this.#eventIndex.set(link.eventId, link.appointmentId);
  }

  /** Writes an event body into a therapist's calendar (insert, or update/restore by id) and counts it. */
  async write(
    therapistId: string,
    action: Action,
    body: RenderedEvent,
    eventId: string,
    ifMatch?: string,
  ): Promise<CalEvent> {
    const cal = this.#calendar(therapistId);
    let event: CalEvent;
    if (action.kind === "update" && ifMatch) {
      try {
        event = await cal.update(eventId, body, { ifMatch });
      } catch (err) {
        if (!isNotFound(err)) throw err;
        event = (await cal.upsert(eventId, body)).event;
      }
    } else {
      event = (await cal.upsert(eventId, body, ifMatch ? { ifMatch } : {})).event;
    }
    this.#counted(therapistId, action.kind);
    return event;
  }

  #counted(therapistId: string, kind: string): void {
    this.metrics.operations.inc({ kind, result: "ok" });
    const st = this.#status.get(therapistId);
    if (st) {
      st.writes++;
      st.lastSyncAt = this.clock.now();
    }
  }

  async #apply(
    action: Action,
    c: {
      id: string;
      appt: Snapshot | null;
      link: Link | undefined;
      sourceAt: number;
      event: CalEvent | null | undefined;
      log: Logger;
      source: SyncSource;
    },
  ): Promise<void> {
    const { id, appt, link, sourceAt, log } = c;
    const booking = appt ?? link?.booking ?? { id };
    const notice = link?.notice && appt && !bookingChanged(link, appt) ? link.notice : undefined;
    switch (action.kind) {
      case "none": {
        // Remember what was learnt (a fuller snapshot, a newer source time) without touching any calendar.
        const target = this.therapist(appt?.therapist_id);
        if (link && appt && (link.sourceAt < sourceAt || JSON.stringify(link.booking) !== JSON.stringify(appt))) {
          await this.saveLink({ ...link, booking: appt, sourceAt: Math.max(link.sourceAt, sourceAt) });
        } else if (!link && appt && target) {
          // A tombstone: an older webhook arriving later cannot resurrect this state.
          await this.saveLink(
            this.linkFrom({
              appointmentId: id,
              therapistId: target.therapist_id,
              eventId: eventIdFor(id),
              booking: appt,
              sourceAt,
              present: false,
              removedBy: "booking",
            }),
          );
        }
        this.metrics.operations.inc({ kind: "none", result: "ok" });
        return;
      }
      case "adopt": {
        await this.saveLink(
          this.linkFrom({
            appointmentId: id,
            therapistId: action.therapistId,
            eventId: action.event.id ?? eventIdFor(id),
            booking,
            sourceAt,
            event: action.event,
            present: true,
            notice,
          }),
        );
        this.metrics.operations.inc({ kind: "adopt", result: "ok" });
        return;
      }
      case "create":
      case "update":
      case "restore": {
        const undone = action.notice ? { text: action.notice, at: this.clock.now() } : undefined;
        const body = action.body;
        const event = await this.write(action.therapistId, action, body, action.eventId, action.ifMatch);
        const restoreNotice = undone ?? notice;
        await this.saveLink(
          this.linkFrom({
            appointmentId: id,
            therapistId: action.therapistId,
            eventId: action.eventId,
            booking,
            sourceAt,
            event,
            body,
            present: true,
            notice: restoreNotice,
          }),
        );
        log.info(
          { action: action.kind, therapist_id: action.therapistId, reason: action.reason },
          `event ${action.kind === "create" ? "created" : action.kind === "update" ? "updated" : "restored"}`,
        );
        return;
      }
      case "delete": {
        const cal = this.calendars.get(action.therapistId);
        if (cal) {
          const result = await cal.delete(action.eventId);
          this.#counted(action.therapistId, "delete");
          log.info(
            { action: "delete", therapist_id: action.therapistId, reason: action.reason, result },
            "event deleted",
          );
        } else {
          log.warn({ therapist_id: action.therapistId }, "event left in a calendar that is no longer mapped");
        }
        const therapistId = this.therapist(appt?.therapist_id)?.therapist_id ?? action.therapistId;
        await this.saveLink(
          this.linkFrom({
            appointmentId: id,
            therapistId,
            eventId: action.eventId,
            booking,
            sourceAt,
            present: false,
            removedBy: "booking",
          }),
        );
        return;
      }
      case "move": {
        const event = await this.write(
          action.to.therapistId,
          { ...action, kind: "create" } as unknown as Action,
          action.body,
          action.to.eventId,
        );
        await this.saveLink(
          this.linkFrom({
            appointmentId: id,
            therapistId: action.to.therapistId,
            eventId: action.to.eventId,
            booking,
            sourceAt,
            event,
            body: action.body,
            present: true,
          }),
        );
        try {
          await this.#calendar(action.from.therapistId).delete(action.from.eventId);
        } catch (err) {
          // The link already points at the new calendar; the next reconciliation removes the copy left behind.
          log.warn(
            { err: describeError(err), from: action.from.therapistId },
            "old event not removed yet after a reassignment",
          );
        }
        this.metrics.operations.inc({ kind: "move", result: "ok" });
        log.info(
          { action: "move", from: action.from.therapistId, to: action.to.therapistId },
          "event moved to the new therapist's calendar",
        );
        return;
      }
      case "writeback_reschedule":
      case "writeback_cancel": {
        if (!link) return;
        const st = this.#status.get(action.therapistId);
        if (st) st.writebacks++;
        await applyWriteback(this, action, {
          id,
          appt: booking,
          link,
          event: c.event,
          sourceAt,
          log,
          attempt: c.source.attempt ?? 1,
        });
        return;
      }
    }
  }
}

/** The newer fields over the older snapshot: list items and payloads lack fields that earlier reads supplied. */
export function merge(prev: Snapshot | undefined, next: Appointment): Snapshot {
  const out: Record<string, unknown> = { ...(prev ?? {}) };
  for (const [k, v] of Object.entries(next)) if (v !== undefined && k !== "addons") out[k] = v;
  return out as Snapshot;
}

function updatedAt(appt: Appointment): number {
  const ms = appt.updated_at ? Date.parse(appt.updated_at) : Number.NaN;
  return Number.isNaN(ms) ? 0 : ms;
}
