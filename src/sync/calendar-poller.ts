// Owns change detection in the therapists' calendars: an incremental sync (syncToken) per calendar on a timer and on
// push notifications, filtering out calbridge's own writes (echo suppression) before handing real changes to the
// engine, which pushes them back to the booking service. Notifications for one calendar are coalesced (one sync in
// flight, at most one more queued); while a calendar's push channel is trusted its timer is only a slow safety net.
import PQueue from "p-queue";
import { givingUpWaits } from "../calendar/call-runner.ts";
import { eventIdFor, isInvitation } from "../calendar/ids.ts";
import { type Clock, systemClock } from "../clock.ts";
import { type Logger, silentLogger } from "../log.ts";
import type { Table } from "../store/store.ts";
import { CALENDAR_READS_AT_ONCE } from "./calendar-reads.ts";
import { isEcho } from "./echo.ts";
import type { SyncEngine } from "./engine.ts";
import { describeError } from "./errors.ts";
import type { LinkReader } from "./links.ts";
import type { Mapping } from "./mapping.ts";
import { checkAnnounced } from "./missed-changes.ts";
import { handedOver } from "./poll-handover.ts";
import type { PushHealth } from "./push-health.ts";
import type { CalEvent } from "./types.ts";
import { changedAppointment } from "./unreadable-links.ts";

export interface PollerOptions {
  mapping: Mapping;
  links: LinkReader;
  sync: Pick<SyncEngine, "syncAppointment">;
  /** Sync tokens by therapist id. */
  tokens: Table<string>;
  clock?: Clock;
  logger?: Logger;
  /** How often a calendar without a trusted push channel is polled (sync.calendar_poll_seconds). */
  intervalMs: number;
  /** Which calendars' push channels announce their changes. */
  push?: PushHealth;
  /** How often a calendar with a trusted channel is polled anyway (sync.push_safety_poll_minutes); jittered. */
  safetyIntervalMs?: number;
  random?: () => number;
  /** How many calendars' first polls after start() run at once (default CALENDAR_READS_AT_ONCE). */
  firstPollsAtOnce?: number;
  /** A sync token expired and the calendar was read in full again: links may no longer match it (FullListings). */
  onFullRead?: (therapistId: string) => void;
  /** Whether the guard holds the appointment's write-back (as this process knows, no store read): see isEcho. */
  held?: (appointmentId: string) => boolean;
}

export type PollResult = { changes: number; echoes: number; fullSync: boolean };

/** Google's quota guide: "If you need to do something periodically, adjust the interval by +/- 25%" (guides/quota). */
const JITTER = 0.25;
type Trigger = "timer" | "push" | "call";

interface CalendarPolls {
  running?: Promise<PollResult>;
  /** The one poll queued behind the running one: every request meanwhile is answered by it. */
  queued?: Promise<PollResult>;
  /** Our clock when the last poll of this calendar began (failed ones included), and when the last one succeeded. */
  lastAttemptAt?: number;
  lastPollAt?: number;
  /** The safety interval drawn for this calendar's current cycle. */
  safetyMs?: number;
  /** Push announced a change and its poll failed: polled at the short interval until a poll succeeds. */
  pending?: boolean;
  wake?: AbortController;
}

export class CalendarPoller {
  readonly #mapping: Mapping;
  readonly #links: LinkReader;
  readonly #sync: Pick<SyncEngine, "syncAppointment">;
  readonly #tokens: Table<string>;
  readonly #clock: Clock;
  readonly #logger: Logger;
  #intervalMs: number;
  readonly #safetyMs: number;
  readonly #push: PushHealth | undefined;
  readonly #random: () => number;
  readonly #calendars = new Map<string, CalendarPolls>();
  #abort = new AbortController();
  #startedAt: number | undefined;
  readonly #firstPolls: PQueue;
  readonly #onFullRead: ((therapistId: string) => void) | undefined;
  readonly #held: (appointmentId: string) => boolean;

  constructor(options: PollerOptions) {
    this.#mapping = options.mapping;
    this.#links = options.links;
    this.#sync = options.sync;
    this.#tokens = options.tokens;
    this.#clock = options.clock ?? systemClock;
    this.#logger = options.logger ?? silentLogger;
    this.#intervalMs = options.intervalMs;
    this.#safetyMs = Math.max(options.safetyIntervalMs ?? options.intervalMs, options.intervalMs);
    this.#push = options.push;
    this.#random = options.random ?? Math.random;
    this.#onFullRead = options.onFullRead;
    this.#held = options.held ?? (() => false);
    this.#firstPolls = new PQueue({ concurrency: Math.max(1, options.firstPollsAtOnce ?? CALENDAR_READS_AT_ONCE) });
    // A channel trusted or distrusted now: that calendar's next poll is due at another time.
    this.#push?.onChange((therapistId) => this.#calendars.get(therapistId)?.wake?.abort());
  }

  /**
   * Whether the calendar's changes reach the engine through this poller now: it runs, and polled the calendar since it
   * started (so it holds a sync token, and its timer and push keep taking the changes).
   */
  covers(therapistId: string): boolean {
    const last = this.#calendars.get(therapistId)?.lastPollAt;
    return !this.#abort.signal.aborted && this.#startedAt !== undefined && (last ?? -Infinity) >= this.#startedAt;
  }

  /** Polls every calendar now and then on its schedule, until stop(). */
  start(): void {
    this.#startedAt = this.#clock.now();
    this.#abort = new AbortController();
    const signal = this.#abort.signal;
    // A therapist a reload took out of the mapping leaves nothing behind (a poll still running keeps its state).
    for (const [id, c] of this.#calendars) if (!c.running && !this.#mapping.therapist(id)) this.#calendars.delete(id);
    for (const therapistId of this.#mapping.calendars.keys()) void this.#loop(therapistId, signal);
  }

  stop(): void {
    this.#abort.abort();
    this.#firstPolls.clear();
  }

  /** The pause between two polls of a calendar (a reload changed sync.calendar_poll_seconds); from the next one on. */
  set intervalMs(ms: number) {
    this.#intervalMs = ms;
  }

  lastPollAt(therapistId: string): number | undefined {
    return this.#calendars.get(therapistId)?.lastPollAt;
  }

  /** Polls running or queued now, over every calendar. */
  get busy(): number {
    let n = 0;
    for (const c of this.#calendars.values()) n += (c.running ? 1 : 0) + (c.queued ? 1 : 0);
    return n;
  }

  /** How long the calendar waits between polls now: the safety interval while push announces its changes. */
  intervalFor(therapistId: string): number {
    return this.#interval(this.#state(therapistId), this.#push?.healthyUntil(therapistId, this.#clock.now()));
  }
  /** ...unless a change push announced is still unread (its poll failed). */
  #interval(c: CalendarPolls, healthyUntil: number | undefined): number {
    return healthyUntil !== undefined && !c.pending ? c.safetyMs! : this.#intervalMs;
  }

  /**
   * One incremental sync of one calendar. Calls while one runs are coalesced: one more runs after it (it sees every
   * change made meanwhile), and every call meanwhile resolves with that one.
   */
  poll(therapistId: string, trigger: Trigger = "call"): Promise<PollResult> {
    const c = this.#state(therapistId);
    if (!c.running) return this.#start(therapistId, c, trigger);
    if (!c.queued) {
      const after = () => {
        c.queued = undefined;
        return this.#start(therapistId, c, trigger);
      };
      c.queued = c.running.then(after, after);
    }
    return c.queued;
  }

  #state(therapistId: string): CalendarPolls {
    let c = this.#calendars.get(therapistId);
    if (!c) {
      c = { safetyMs: this.#drawSafety() };
      this.#calendars.set(therapistId, c);
    }
    return c;
  }

  #drawSafety(): number {
    return Math.round(this.#safetyMs * (1 - JITTER + 2 * JITTER * this.#random()));
  }

  #start(therapistId: string, c: CalendarPolls, trigger: Trigger): Promise<PollResult> {
    c.lastAttemptAt = this.#clock.now();
    c.safetyMs = this.#drawSafety();
    // stop() gives up the poll's Google calls still waiting for quota (nothing sent): the next poll reads the changes.
    const run = givingUpWaits(this.#abort.signal, () => this.#poll(therapistId, trigger))
      .catch((err: unknown) => {
        // A change push announced is still unread: the timer runs on the short interval until a poll succeeds.
        const woke = trigger === "push" && !c.pending;
        c.pending ||= woke;
        if (woke) c.wake?.abort();
        throw err;
      })
      .finally(() => {
        if (c.running === run) c.running = undefined;
      });
    c.running = run;
    return run;
  }

  /** One calendar's timer: polls when due, else sleeps until due or until its schedule changes. */
  async #loop(therapistId: string, signal: AbortSignal): Promise<void> {
    const c = this.#state(therapistId);
    let first = true;
    while (!signal.aborted) {
      const now = this.#clock.now();
      const healthyUntil = this.#push?.healthyUntil(therapistId, now);
      const interval = this.#interval(c, healthyUntil);
      const due = c.lastAttemptAt === undefined ? now : c.lastAttemptAt + interval;
      if (first) {
        // The start's first polls (a full read of each calendar without a sync token) take turns, a few at once.
        first = false;
        await this.#firstPolls
          .add(() => (signal.aborted ? undefined : this.poll(therapistId, "timer")))
          .catch(() => {});
        continue;
      }
      if (due <= now) {
        await this.poll(therapistId, "timer").catch(() => {});
        continue;
      }
      // Not past the channel's expiry: then the calendar is back on the short interval.
      const until = healthyUntil !== undefined ? Math.min(due, healthyUntil) : due;
      const wake = new AbortController();
      c.wake = wake;
      const stop = () => wake.abort();
      signal.addEventListener("abort", stop, { once: true });
      await this.#clock.sleep(Math.max(1, until - now), wake.signal).catch(() => {});
      signal.removeEventListener("abort", stop);
      if (c.wake === wake) c.wake = undefined;
    }
  }

  async #poll(therapistId: string, trigger: Trigger): Promise<PollResult> {
    const version = this.#mapping.version;
    const cal = this.#mapping.calendar(therapistId);
    const log = this.#logger.child({ therapist_id: therapistId });
    // Whether calbridge owns the reminders of this therapist's events (they are configured).
    const reminders =
      (this.#mapping.therapist(therapistId)?.reminders ?? this.#mapping.config.event.reminders) !== undefined;
    const token = await this.#tokens.get(therapistId);
    const readAt = this.#clock.now();
    const result = await cal.incrementalChanges(token).catch((err: unknown) => {
      if (err !== this.#abort.signal.reason)
        log.warn({ err: describeError(err) }, "calendar changes could not be read; trying again next poll");
      throw err;
    });
    if (result.fullSync && token) {
      log.info("sync token expired; read the whole calendar again");
      this.#onFullRead?.(therapistId);
    }
    if (trigger === "timer" && !result.fullSync) checkAnnounced(this.#push, therapistId, result.events, readAt, log);
    let changes = 0;
    let echoes = 0;
    const work: Promise<unknown>[] = [];
    const untold: CalEvent[] = [];
    for (const event of result.events) {
      if (isInvitation(event)) continue; // a colleague's invitation under calbridge's id: another calendar's event
      const of = await changedAppointment(this.#links, event, log, untold);
      if (!of) continue; // not ours, or its appointment cannot be told (untold: the token stays)
      const { id, link } = of;
      if (this.#mapping.version !== version) {
        // A reload changed the mapping meanwhile: this calendar may no longer be the therapist's (an event moved out of
        // it is no deletion). The rest is read again from the mapping as it is now; the token is not advanced.
        log.info("mapping reloaded during the poll; the calendar is read again at the next poll");
        await handedOver(work, log);
        return { changes, echoes, fullSync: result.fullSync };
      }
      if (!of.damaged && event.id !== (link?.eventId ?? eventIdFor(id))) {
        // Marked but not its event: an occurrence of a series made of it, or a copy. Says nothing about the booking.
        log.debug(
          { appointment_id: id, event_id: event.id },
          "event marked with an appointment but not its own; ignored",
        );
        continue;
      }
      if (isEcho(link, therapistId, event, { reminders }, this.#held(id))) {
        echoes++;
        continue;
      }
      changes++;
      log.info({ appointment_id: id, event_status: event.status }, "calendar change seen");
      work.push(
        this.#sync.syncAppointment(id, {
          reason: "calendar change",
          priority: "writeback",
          origin: "calendar",
          // A deletion stays an event with status "cancelled": only that, never a missing event, means deleted.
          calendar: { therapistId, event, seenAt: readAt },
          log,
        }),
      );
    }
    // Saved once changes are handled and told (a crash, refusal, retry, untold one re-reads them), if not re-pointed.
    if ((await handedOver(work, log)) && untold.length === 0 && this.#mapping.version === version)
      await this.#tokens.set(therapistId, result.nextSyncToken);
    Object.assign(this.#state(therapistId), { lastPollAt: this.#clock.now(), pending: false });
    return { changes, echoes, fullSync: result.fullSync };
  }
}
