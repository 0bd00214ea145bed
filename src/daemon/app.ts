// Owns the wiring of the daemon: from a validated Config to the running parts (store, booking client, one calendar
// gateway per therapist, engine, webhook inbox and processor, calendar poller, scheduler, HTTP server, leader lease,
// notifications) and their orderly start and stop.
import { createTask, type ScheduledTask } from "node-cron";
import { Registry } from "prom-client";
import { BookingClient } from "../booking/client.ts";
import { BookingApiError } from "../booking/errors.ts";
import { givingUpAfter } from "../calendar/call-runner.ts";
import { reconnectCommand, reconnectRoute } from "../calendar/credential-hints.ts";
import type { CalendarGateway } from "../calendar/gateway.ts";
import { GoogleQuotaGate } from "../calendar/quota-gate.ts";
import { type Clock, systemClock } from "../clock.ts";
import type { ConfigChanges } from "../config/changes.ts";
import type { Config } from "../config/schema.ts";
import { countAppointments } from "../connect/count.ts";
import { createInvite, inviteUrl, linksUnusable, notConnectable } from "../connect/invite.ts";
import { createConnectHandler } from "../connect/route.ts";
import { createLogger, type Logger } from "../log.ts";
import { Notifier } from "../notify/notifier.ts";
import { daemonView } from "../notify/view.ts";
import { defaultHolderId, LEASE_PERMISSIONS_FIX, LeaderLease } from "../store/lease.ts";
import { EVICTION_FIX, evictionRisk } from "../store/redis-eviction.ts";
import { CredentialStore, isWrongKeyError, secretBoxFor } from "../store/secrets.ts";
import { openStore, type Store } from "../store/store.ts";
import { CalendarPoller } from "../sync/calendar-poller.ts";
import { createSyncCore, type SyncCore } from "../sync/core.ts";
import type { SyncEngine } from "../sync/engine.ts";
import { describeError } from "../sync/errors.ts";
import { FullListings } from "../sync/full-listings.ts";
import type { MappingReport } from "../sync/mapping-report.ts";
import { sameCalendarId } from "../sync/placement.ts";
import { PushHealth } from "../sync/push-health.ts";
import { type ReconcileOptions, type ReconcileReport, reconcile } from "../sync/reconcile.ts";
import type { RetryPolicy } from "../sync/retry.ts";
import type { CalendarPort } from "../sync/types.ts";
import { EngineSink } from "../sync/webhook-sink.ts";
import { EngineStoppedError } from "../sync/work.ts";
import { WebhookInbox } from "../webhooks/inbox.ts";
import { InboxProcessor } from "../webhooks/processor.ts";
import { createWebhookHandler } from "../webhooks/route.ts";
import { adminRoutes } from "./admin.ts";
import { connectCommand, TherapistCalendars } from "./calendars.ts";
import { reconcileMaxAgeMs, storeFolderOf } from "./health.ts";
import { recentWithLinks } from "./history-page.ts";
import { createHttpServer, type HttpServer, isLoopback } from "./http.ts";
import { MappingUpkeep } from "./mapping-upkeep.ts";
import { createMetrics, type DaemonMetrics } from "./metrics.ts";
import { PUSH_CHANGED_CHANNEL, PushChannels } from "./push.ts";
import { pushStatus, registerPushMetrics } from "./push-status.ts";
import { applyReload } from "./reload.ts";
import type { StatusSnapshot } from "./status-page.ts";

export interface AppOptions {
  logger?: Logger;
  clock?: Clock;
  /** Folder relative store paths and key files are resolved against. */
  cwd?: string;
  /** Override of webhooks.listen, the public listener (tests use 127.0.0.1:0). */
  listen?: string;
  /** Override of admin.listen (tests use 127.0.0.1:0). */
  adminListen?: string;
  /** Start no timers of its own (cron, polling): for one-shot commands. */
  oneShot?: boolean;
  /**
   * How long a one-shot command waits for Google to tell which calendar each OAuth `primary` mapping is (default
   * 20 s); those not told by then are held (not synced) for this run, with the reason.
   */
  resolveWaitMs?: number;
  /** A one-shot command's own hold of the leader lease (reconcile): its syncs stop once it is lost. Default: always. */
  leading?: () => boolean;
  /**
   * Run on the store as soon as it is open, before anything is written to it (stored tokens sealed again under a new
   * key, ...): a one-shot command takes the leader lease there, and its throw (a daemon leads) ends the start with
   * nothing written, the store closed.
   */
  beforeWrites?: (store: Store) => Promise<void>;
  /**
   * A command that changes nothing (doctor, reconcile --dry-run): stored tokens are not sealed again under the current
   * key, at start or when read (run with a rotated key the daemon does not have yet, that would lock the daemon out).
   */
  readOnly?: boolean;
  /**
   * Whether stored tokens are sealed again under the current key (at start and when read); default: unless readOnly.
   * Off for a command that runs beside a daemon without its lease (writeback held): only the daemon and a command
   * holding the lease seal again, or a rotated key the daemon does not have yet would lock the daemon out.
   */
  reseal?: boolean;
  /** Retry policy of the engine (tests shorten it); sync.retry otherwise. */
  engine?: Partial<RetryPolicy>;
  /** Retries of one booking request (tests shorten it). */
  bookingMaxRetries?: number;
  /** A therapist's reconnect link for notifications about broken OAuth credentials (the connect flow's link maker). */
  reconnectLink?: (therapistId: string) => Promise<string | undefined>;
  /** How often the notifier looks at the conditions (default 15 s). */
  notifyIntervalMs?: number;
  /** How often the leader looks through a shared inbox for entries other daemons accepted (default 30 s). */
  inboxSweepMs?: number;
}

export interface App {
  readonly config: Config;
  readonly logger: Logger;
  readonly store: Store;
  /** Stored OAuth refresh tokens, encrypted with store.encryption_key (what `authorize` and the connect flow use). */
  readonly credentials: CredentialStore;
  readonly registry: Registry;
  readonly metrics: DaemonMetrics;
  readonly booking: BookingClient;
  readonly calendars: Map<string, CalendarGateway>;
  /** The gateway of an OAuth `primary` therapist held (not synced) until its calendar is identified: doctor checks it. */
  heldCalendar(therapistId: string): CalendarGateway | undefined;
  /** The sync side's pieces (mapping, links, dead letters, engine, ...). */
  readonly sync: SyncCore;
  readonly engine: SyncEngine;
  readonly poller: CalendarPoller;
  readonly inbox: WebhookInbox;
  /** The inbox processor of the current (or last) leadership term; a new one runs each time this replica leads. */
  readonly processor: InboxProcessor;
  readonly lease: LeaderLease;
  readonly push: PushChannels;
  /** What each calendar's push channel is known to do (the poller's schedule reads it). */
  readonly pushHealth: PushHealth;
  /** When the reconciliation lists each calendar in full next. */
  readonly listings: FullListings;
  readonly notifier: Notifier;
  /** The public listener (booking webhooks, Google push, /healthz); set once start() ran. */
  http: HttpServer | undefined;
  /** The admin listener (/readyz, /metrics, /status, /healthz); set once start() ran. */
  admin: HttpServer | undefined;
  reconcile(options?: ReconcileOptions): Promise<ReconcileReport>;
  /**
   * Removes expired store entries (webhook done marks, links and dead letters of appointments that left the sync
   * window, ...): what the hourly purge runs. Answers how many.
   */
  purge(): Promise<number>;
  /**
   * A therapist's stored credentials changed (connect, authorize): every replica takes them up at once (no restart),
   * and the leader backfills that therapist with a reconciliation.
   */
  credentialsChanged(therapistId: string): Promise<void>;
  status(): Promise<StatusSnapshot>;
  /** What the links say about the mapping: therapists no longer mapped, events still to move or left behind. */
  mappingReport(): Promise<MappingReport>;
  /**
   * Applies a reloaded configuration (SIGHUP) between syncs and reconciliations; settings only a restart takes up are
   * kept as they were. Answers what changed.
   */
  reload(next: Config): Promise<ConfigChanges>;
  start(): Promise<void>;
  /**
   * Stops accepting webhooks, drains the queues, closes the store: bounded by graceMs, plus at most CLOSING_MS for the
   * closing steps (work still running at the deadline is left, and logged as such).
   */
  stop(graceMs?: number): Promise<void>;
}

/**
 * A fresh single-use connect link for a therapist whose OAuth credentials broke (none for service accounts, nor while
 * the connect page would refuse every link: no store.encryption_key).
 */
function reconnectLinkOf(config: Config, therapistId: string, now: number): string | undefined {
  const connect = config.connect;
  if (!connect || notConnectable(config, therapistId) || linksUnusable(config)) return undefined;
  return inviteUrl(connect.public_url, createInvite(therapistId, { secret: connect.secret, now }).token);
}

/** Ids of webhook events accepted by a standby, published so the leader takes them from the shared inbox at once. */
export const INBOX_ACCEPTED_CHANNEL = "calbridge:inbox:accepted";
/** Therapist ids whose stored credentials changed on some replica: every replica takes them up. */
export const CREDENTIALS_CHANGED_CHANNEL = "calbridge:credentials:changed";
/**
 * The leader's look through the shared inbox for entries another daemon accepted whose notice was lost (Redis pub/sub
 * and the SQLite file's notices both deliver at most once; an earlier build's standby sends none on SQLite). It reads
 * the pending entries only (the done marks are left out in SQL: about 60 ms for 100,000 of them).
 */
const INBOX_SWEEP_MS = 30_000;
/** A stop's deadline, and the steps still running at it (left unfinished). */
interface StopGrace {
  deadline: number;
  late: string[];
}
/**
 * How long past a stop's grace its closing steps (lease, history, store) may take together: they run even when the
 * grace is over, and 8 s + 1 s stays inside `calbridge run`'s last-resort 9.5 s (and a container's 10 s).
 */
const CLOSING_MS = 1000;
/** How often expired entries (webhook done marks after their 7 days, links of past appointments, ...) are removed. */
const PURGE_MS = 3_600_000;

export async function createApp(config: Config, options: AppOptions = {}): Promise<App> {
  const logger = options.logger ?? createLogger();
  const clock = options.clock ?? systemClock;
  const registry = new Registry();
  const metrics = createMetrics(registry);
  const store = await openStore(config.store.url, {
    ...(options.cwd ? { cwd: options.cwd } : {}),
    logger: logger.child({ component: "store" }),
  });
  if (options.beforeWrites) {
    try {
      await options.beforeWrites(store);
    } catch (err) {
      await store.close().catch(() => {});
      throw err;
    }
  }

  const booking = new BookingClient({
    baseUrl: config.booking.base_url,
    apiKey: config.booking.api_key,
    requestsPerMinute: config.booking.requests_per_minute,
    timeoutMs: config.booking.timeout_ms,
    ...(options.bookingMaxRetries !== undefined ? { maxRetries: options.bookingMaxRetries } : {}),
    clock,
    logger: logger.child({ component: "booking" }),
    registry,
  });

  const credentials = new CredentialStore({
    store,
    box: secretBoxFor(config.store),
    logger: logger.child({ component: "credentials" }),
    reseal: options.reseal ?? options.readOnly !== true,
  });
  const quota = new GoogleQuotaGate({
    projectPerMinute: config.google.quota.project_per_minute,
    userPerMinute: config.google.quota.user_per_minute,
    clock,
    logger: logger.child({ component: "calendar" }),
    registry,
  });
  // Every stored token under the current key before any is used, also those of therapists not mapped now: after
  // this start the previous key can be removed (README "The encryption key"); none for a read-only command nor one
  // beside a daemon (reseal: false). Upkeep: a failure does not stop a start.
  await credentials.resealAll().catch((err: unknown) => {
    logger.warn(
      { component: "credentials", err: describeError(err) },
      "stored refresh tokens not all sealed again under the current key; tried again at the next start",
    );
  });
  const gateways = new TherapistCalendars({ config, store, credentials, clock, logger, registry, metrics, quota });
  await gateways.open();
  const calendars = gateways.map;
  const credentialErrors = gateways.errors;

  const syncLogger = logger.child({ component: "sync" });
  const sync = createSyncCore({
    config,
    // A one-shot command's lease is its own (or none); a daemon writes back only while it leads.
    leading: () => (options.oneShot === true ? (options.leading?.() ?? true) : lease.isLeader),
    booking,
    calendars: calendars as Map<string, CalendarPort>,
    unavailable: credentialErrors,
    store,
    clock,
    logger: syncLogger,
    openCalendar: (t, calendarId, subject) => gateways.openAt(t, calendarId, subject),
    ...(options.engine ? { retry: options.engine } : {}),
    quota,
    metrics: {
      operations: metrics.syncOperations,
      writebacks: metrics.writebacks,
      guardTripped: metrics.massDeleteGuardTripped,
      writebacksHeld: metrics.writebacksHeld,
      writebackGuardTripped: metrics.writebackGuardTripped,
      lastReconcileSuccess: metrics.lastReconcileSuccess,
      reconcileDuration: metrics.reconcileDuration,
      deadLetters: metrics.deadLetters,
    },
  });
  const { engine } = sync;
  sync.mapping.sharesCalendar = (therapistId) => gateways.sharesCalendar(therapistId);
  sync.mapping.calendarNames = (therapistId) => gateways.calendarNames(therapistId);
  const tokens = store.table<string>("tokens");
  const pushHealth = new PushHealth();
  const listings = new FullListings({
    everyMs: config.sync.calendar_full_listing_hours * 3_600_000,
    clock,
    covered: (therapistId) => poller.covers(therapistId),
  });
  const poller = new CalendarPoller({
    mapping: sync.mapping,
    links: sync.links,
    sync: engine,
    tokens,
    clock,
    logger: logger.child({ component: "poller" }),
    intervalMs: config.sync.calendar_poll_seconds * 1000,
    push: pushHealth,
    safetyIntervalMs: config.sync.push_safety_poll_minutes * 60_000,
    // A sync token Google no longer accepts: the calendar may not be the one the links know; the next run lists it.
    onFullRead: (therapistId) => listings.forget(therapistId),
    held: (appointmentId) => sync.guard.knowsHeld(appointmentId),
  });
  const inbox = new WebhookInbox({ store, clock, deadLetterTtlMs: config.webhooks.dead_letter_days * 86_400_000 });
  inbox.trackPending(false); // until this replica leads and processes it
  // A processor cannot start again once stopped: each leadership term gets a fresh one.
  const newProcessor = () =>
    new InboxProcessor({
      inbox,
      sink: new EngineSink(engine),
      logger, // binds component=webhooks itself
      clock,
      registry,
    });
  let processor = newProcessor();
  let processorUsed = false;
  const notices = store.notices;
  // With replicas (Redis, or a standby on the same SQLite file), a standby's accepts are announced; the leader's
  // processor sees its own through the inbox already.
  if (notices) {
    inbox.subscribe((entry) => {
      if (lease.isLeader) return;
      notices.publish(INBOX_ACCEPTED_CHANNEL, entry.id).catch((err: unknown) => {
        logger.debug(
          { err: describeError(err), event_id: entry.id },
          "inbox notice not published; the leader's sweep finds it",
        );
      });
    });
  }
  let stopNotices: (() => void) | undefined;
  let stopPushNotices: (() => void) | undefined;
  let stopCredentialNotices: (() => void) | undefined;
  let sweep: NodeJS.Timeout | undefined;
  const sweepInbox = async () => {
    for await (const entry of inbox.pending()) await processor.notify(entry.id);
  };
  const push = new PushChannels({
    config,
    calendars,
    poller,
    store,
    logger: logger.child({ component: "push" }),
    isLeader: () => lease.isLeader,
    registry,
    health: pushHealth,
    clock,
    credentialsOf: (channel) => gateways.forChannel(channel),
  });
  registerPushMetrics({
    registry,
    health: pushHealth,
    enabled: () => push.enabled,
    isLeader: () => lease.isLeader,
    therapists: () => config.therapists.map((t) => t.therapist_id),
    now: () => clock.now(),
  });

  const notifier = new Notifier({
    config,
    store,
    registry,
    clock,
    logger: logger.child({ component: "notify" }),
    isLeader: () => lease.isLeader,
    live: daemonView({
      config,
      calendars,
      credentialErrors,
      deadLetters: () => sync.dead.count,
      writebacksHeld: () => sync.guard.counts,
    }),
    // Rarely asked, and never in a hurry: the rate budget left over after everything else.
    listWebhooks: (signal) => booking.listWebhooks({ priority: "enrich", ...(signal ? { signal } : {}) }),
    // A new leader re-reads the dead letters, which the last leader may have changed since this replica started.
    prepare: () => sync.dead.load().then(() => {}),
    ...(options.reconnectLink
      ? { reconnectLink: options.reconnectLink }
      : config.connect
        ? { reconnectLink: async (therapistId: string) => reconnectLinkOf(config, therapistId, clock.now()) }
        : {}),
    ...(options.notifyIntervalMs ? { intervalMs: options.notifyIntervalMs } : {}),
  });
  const recordOutcome = (outcome: Parameters<Notifier["reconcileFinished"]>[0]) =>
    notifier
      .reconcileFinished(outcome)
      .catch((err: unknown) =>
        logger.warn({ err: describeError(err) }, "reconciliation outcome not recorded for notifications"),
      );

  // Any replica's last successful reconciliation (the leader writes it to the shared store), so a standby stays ready.
  // The gauge shows it too: after a restart it is the last success in the store, not 0 until this process has one
  // (CalbridgeReconcileStale would fire 5 minutes after a restart while the booking API is down).
  const meta = store.table<number>("meta");
  let lastReconcileAt: number | undefined;
  const refreshLastReconcile = async () => {
    const stored = await meta.get("last_reconcile_success");
    if (stored !== undefined && (lastReconcileAt === undefined || stored > lastReconcileAt)) {
      lastReconcileAt = stored;
      metrics.lastReconcileSuccess.set(Math.floor(stored / 1000));
    }
  };
  await refreshLastReconcile();
  const upkeep = new MappingUpkeep({ sync, tokens, clock, logger: syncLogger });
  // A reload in progress: reconciliations wait for it, so none plans on one mapping and applies on the other.
  let reloading: Promise<unknown> | undefined;
  // The leader's pass moving events to re-pointed calendars: a reconciliation listing the calendars meanwhile would take
  // an event caught between two calendars for a stray copy, so it waits for the pass.
  let relocating: Promise<unknown> | undefined;
  const relocate = (therapistIds?: readonly string[]): Promise<void> => {
    const pass = upkeep.relocate(therapistIds);
    const gate = pass.catch(() => {});
    relocating = gate;
    void gate.then(() => {
      if (relocating === gate) relocating = undefined;
    });
    return pass;
  };
  const readiness: { maxReconcileAgeMs?: number; scheduleChangedAt?: number; minFreeBytes: number } = {
    maxReconcileAgeMs: await reconcileMaxAgeMs(config.sync.reconcile_cron),
    minFreeBytes: config.store.min_free_mb * 1024 * 1024,
  };
  let cron: ScheduledTask | undefined;
  let running: Promise<ReconcileReport> | undefined;
  /** What the run in progress covers: "*" (every therapist) or one therapist's id. */
  let runningScope: string | undefined;
  let stopping = false;
  let gauges: NodeJS.Timeout | undefined;
  let purge: NodeJS.Timeout | undefined;
  /** Ends the credentials check (stop()). */
  const credentialsCheck = new AbortController();
  const startedAt = clock.now();

  const reconcileContext = {
    removed: (therapistId: string) => sync.fx.counted(therapistId, "delete"),
    mapping: sync.mapping,
    booking,
    links: sync.links,
    sync: engine,
    metrics: {
      guardTripped: metrics.massDeleteGuardTripped,
      reconcileDuration: metrics.reconcileDuration,
      lastReconcileSuccess: metrics.lastReconcileSuccess,
    },
    meta,
    guard: sync.guard,
    history: sync.history,
    managed: sync.managed,
    // A sync given up on whose appointment is in step now (an update whose read kept failing) needs no more retries.
    inStep: (ids: readonly string[]) => sync.dead.clearMany(ids.map((id) => `appt:${id}`)),
    enrichPerMinute: () => booking.gate.enrichPerMinute(),
    listings,
    clock,
    logger: syncLogger,
  };

  const runReconcile = async (opts: ReconcileOptions = {}): Promise<ReconcileReport> => {
    const scope = opts.therapistId ?? "*";
    // Only a full run counts as the reconciliation (/readyz, /status, the gauge, the failure streak): a run of one
    // therapist (a backfill after a connect or a reload) that succeeded hid full runs that kept failing.
    const full = !opts.dryRun && scope === "*";
    for (;;) {
      while (reloading || relocating) await (reloading ?? relocating);
      if (!running || opts.dryRun) break;
      // One run at a time: a cron tick during a long run joins the run in progress, when that run covers it (a full
      // run waits for one therapist's backfill, and then runs: joined, it was a tick skipped).
      if (runningScope === "*" || runningScope === scope) return running;
      await running.catch(() => {});
    }
    const run = (async () => {
      try {
        const report = await reconcile(reconcileContext, opts);
        if (full && report.ok) lastReconcileAt = clock.now();
        if (full) await recordOutcome({ report });
        return report;
      } catch (err) {
        // A stop (a deploy) or a leader hand-over gives up the syncs the run waits for: no failure, so it neither
        // counts toward notify.reconcile_failures nor reads as one in the log; the next leader's run does the work.
        // A replica that lost the lease writes nothing of its plan: the engine refuses its syncs and stray deletions.
        if (stopping || err instanceof EngineStoppedError) {
          const why = stopping ? "stopping" : "leadership was lost; the next leader reconciles";
          logger.info({ err: describeError(err) }, `reconciliation given up: ${why}`);
          throw err;
        }
        if (err instanceof BookingApiError && (err.kind === "auth" || err.kind === "transient")) {
          booking.reachability.failedOutright(err);
        }
        logger.error({ err: describeError(err) }, "reconciliation failed; nothing was deleted");
        if (full) await recordOutcome({ error: err });
        throw err;
      }
    })();
    if (!opts.dryRun) {
      runningScope = scope;
      running = run.finally(() => {
        running = undefined;
        runningScope = undefined;
      });
      // Only a caller that joins the run awaits this copy; the caller of `run` handles the rejection itself.
      running.catch(() => {});
    }
    return run;
  };

  const refreshHolds = () =>
    sync.guard.refreshAll(config.therapists.map((t) => t.therapist_id)).then(
      () => {},
      (err: unknown) => logger.warn({ err: describeError(err) }, "held write-backs not counted: the store failed"),
    );

  const status = async (): Promise<StatusSnapshot> => {
    // Not awaited: the page must answer even when the store does not; the next look shows the fresher value.
    void refreshLastReconcile().catch(() => {});
    void sync.history.log.loadRecent().catch(() => {});
    const mapping = upkeep.status();
    const snap = booking.gate.snapshot();
    const iso = (ms: number | undefined) => (ms ? new Date(ms).toISOString() : null);
    return {
      generatedAt: new Date(clock.now()).toISOString(),
      instance: lease.holderId,
      leader: lease.isLeader,
      ...(lease.problem ? { leaseProblem: `${lease.problem}; ${LEASE_PERMISSIONS_FIX}` } : {}),
      lastReconcileAt: iso(lastReconcileAt),
      queues: { sync: engine.queueDepth, webhooks: inbox.pendingCount },
      deadLetters: sync.dead.count,
      writebacksHeld: [...sync.guard.counts.values()].reduce((a, b) => a + b, 0),
      rateLimit: {
        limit: snap.limit ?? null,
        remaining: snap.remaining ?? null,
        resetAt: iso(snap.resetAt),
        pausedUntil: iso(snap.pausedUntil),
      },
      therapists: config.therapists.map((t) => {
        const st = sync.activity.of(t.therapist_id);
        const health = (calendars.get(t.therapist_id) ?? gateways.held(t.therapist_id))?.health();
        const credError = credentialErrors.get(t.therapist_id);
        const ok = !credError && health?.credentials !== "broken";
        // A token the configured keys do not open is the key's problem, not Google's: no reconnect link for it.
        const wrongKey = credError !== undefined && isWrongKeyError(credError);
        // None for the service account, nor for a token given in the file (replaced there: see the hint).
        const route = reconnectRoute(config, t);
        const reconnect = !ok && !wrongKey && route ? reconnectCommand(t.therapist_id, route) : undefined;
        const hint = wrongKey
          ? "set store.encryption_key to the key the stored token was encrypted with (after a rotation, list that key " +
            "in store.previous_encryption_keys) and restart; only if that key is lost, have the therapist reconnect " +
            `(${connectCommand(config, t.therapist_id)})`
          : health?.hint;
        return {
          therapistId: t.therapist_id,
          ...(t.name ? { name: t.name } : {}),
          calendarId: t.calendar_id,
          lastSyncAt: iso(st?.lastSyncAt ?? poller.lastPollAt(t.therapist_id)),
          lastError: st?.lastError ? { at: iso(st.lastErrorAt) ?? "", message: st.lastError } : null,
          counts: { eventsMirrored: st?.writes ?? 0, writebacks: st?.writebacks ?? 0 },
          credentials: {
            ok,
            ...(credError || health?.lastError ? { detail: credError ?? health?.lastError } : {}),
            ...(!ok && health?.reason ? { reason: health.reason } : {}),
            ...(!ok && hint ? { hint } : {}),
            ...(reconnect ? { reconnect } : {}),
          },
          pausedUntil: iso(health?.pausedUntil),
          writebacksHeld: sync.guard.counts.get(t.therapist_id) ?? 0,
          // The leader's channels (a standby opens none).
          ...(push.enabled && lease.isLeader ? { push: pushStatus(pushHealth, t.therapist_id, clock.now()) } : {}),
        };
      }),
      history: { retentionDays: config.history.retention_days, recent: recentWithLinks(sync.history.log.recent()) },
      ...(mapping ? { mapping } : {}),
    };
  };

  /** One therapist reconciled once the run in progress (if any) is over: a run that began before it had no gateway. */
  const backfill = async (therapistId: string) => {
    if (running) await running.catch(() => {});
    await runReconcile({ therapistId });
  };

  /** Takes up a therapist's new stored credentials here; the leader also starts watching a new calendar and backfills. */
  const takeUp = async (therapistId: string): Promise<void> => {
    const result = await gateways.install(therapistId);
    // Credentials for maybe another Google account: its calendar may not hold the linked events, so list it in full.
    if (result === "updated") listings.forget(therapistId);
    if (result === "unchanged") return;
    joined([therapistId], result === "created");
  };

  /** Therapists synced from now on (or with new credentials): the leader watches their calendars and backfills. */
  const joined = (therapistIds: readonly string[], created: boolean): void => {
    if (therapistIds.length === 0 || !lease.isLeader || options.oneShot || stopping) return;
    if (created) {
      // The poller watches the calendars it was started with: restart it to include the new one, and open its channel.
      poller.stop();
      poller.start();
      void push.renew();
    }
    for (const therapistId of therapistIds) {
      void backfill(therapistId).catch((err: unknown) =>
        logger.warn(
          { therapist_id: therapistId, err: describeError(err) },
          "backfill after connecting failed; the next reconciliation retries",
        ),
      );
    }
  };

  /**
   * OAuth `primary` calendars resolved (calendars.get): those known and no other therapist's are taken in. Never
   * awaited before the daemon listens: Google down at start holds only those therapists, tried again at every
   * credentials check.
   */
  const resolveCalendars = async (): Promise<void> => joined(await gateways.verify(), true);

  // A broken gateway's probe (every 10 minutes) reads the stored token first and takes a new one up this way.
  gateways.takeUp = takeUp;

  /**
   * Every replica, every sync.calendar_poll_seconds: the stored token of each OAuth therapist without working
   * credentials (none loaded, or refused by Google) is read and a new one taken up, one store read each (none for the
   * others). `calbridge authorize` runs as a process of its own: it also publishes a notice (taken up at once), and this
   * is how a daemon learns of its token when the notice is lost (or an earlier build's daemon runs on the SQLite file).
   */
  const checkCredentials = async (signal: AbortSignal): Promise<void> => {
    while (!signal.aborted) {
      await clock.sleep(config.sync.calendar_poll_seconds * 1000, signal).catch(() => {});
      // Calendars whose real id could not be told yet are resolved (and two mappings on one calendar refused).
      if (!signal.aborted && !stopping) await resolveCalendars().catch(() => {});
      for (const therapistId of signal.aborted || stopping ? [] : gateways.waitingForCredentials()) {
        await takeUp(therapistId).catch((err: unknown) =>
          logger.debug(
            { therapist_id: therapistId, err: describeError(err) },
            "stored Google credentials not read; tried again at the next check",
          ),
        );
      }
    }
  };

  const credentialsChanged = async (therapistId: string): Promise<void> => {
    await takeUp(therapistId);
    await notices?.publish(CREDENTIALS_CHANGED_CHANNEL, therapistId).catch((err: unknown) => {
      logger.warn(
        { therapist_id: therapistId, err: describeError(err) },
        "other replicas were not told of the new credentials; they take them up at their next start",
      );
    });
  };

  /** Write-backs that were waiting out their grace period when the last leader stopped: synced again, read afresh. */
  const resumeWritebacks = async () => {
    const waiting = await sync.pendingWritebacks.all();
    if (waiting.length === 0) return;
    logger.info(
      { count: waiting.length },
      "write-backs waiting at the last stop: their calendar changes are read again",
    );
    for (const { appointmentId } of waiting) {
      // Its outcome is the engine's (retries, dead letters); a stop meanwhile leaves the wait for the next leader.
      engine
        .syncAppointment(appointmentId, {
          reason: "write-back waiting at the last stop",
          priority: "writeback",
          origin: "calendar",
          calendar: { reread: true },
        })
        .catch(() => {});
    }
  };

  /**
   * The leader's first step, before anything reads a calendar: a therapist mapped again since the ledger was last
   * settled begins a new watch, and the sync token of the earlier one would report what they changed meanwhile as new
   * (see watched.ts). Only the leader settles (a standby started with an edited file would otherwise rewrite the
   * ledger, and the tokens, of the mapping the leader syncs). While the store fails, tried again every few seconds:
   * no leader work starts without it. Answers false when leadership ended (or the daemon stops) meanwhile.
   */
  const settleWatches = async (): Promise<boolean> => {
    for (;;) {
      try {
        await sync.watched.settle(
          config.therapists,
          async (begun) => {
            await tokens.deleteMany(begun);
            logger.info(
              { therapists: begun },
              "therapists mapped again (or to another calendar) since the last run: what changed in their calendars meanwhile is put back, not written back",
            );
          },
          // `primary` written as the account's own address is the same watch, once Google told which calendar it is.
          (t, watched) => gateways.calendarNames(t.therapist_id).some((n) => sameCalendarId(n, watched)),
        );
        return true;
      } catch (err) {
        if (stopping || !lease.isLeader) return false;
        logger.error(
          { err: describeError(err) },
          "leader work waits: the mapping's watches could not be read or stored (the store failed); tried again in 5 s",
        );
        await systemClock.sleep(5000);
        if (stopping || !lease.isLeader) return false;
      }
    }
  };

  const startLeaderWork = async () => {
    // Before any call of this term, and before the notifier looks: the Google health this replica kept from an earlier
    // term (or as a standby) was never refreshed meanwhile, and another leader may have told its conditions fixed. The
    // notifier keeps what was told until this term's calls show the state now (review16: a false "stopped working").
    gateways.forgetStanding();
    if (!(await settleWatches())) return;
    logger.info("leader: processing the inbox, polling calendars, reconciling");
    metrics.leader.set(1);
    // The pair's last success as the store has it now (a standby's own was read at its start, maybe days ago).
    refreshLastReconcile().catch(() => {});
    if (processorUsed) processor = newProcessor();
    processorUsed = true;
    inbox.trackPending(true); // the processor's replay counts what is pending now
    // Enrichments run where the reconciliation that queues them runs (its first run resumes those left by a restart).
    engine.setEnrichment(true);
    void processor.start();
    // Another daemon may accept webhooks into the inbox: a Redis replica, or a standby on the same SQLite file.
    if (notices || store.kind === "sqlite") {
      sweep = setInterval(() => {
        sweepInbox().catch((err: unknown) => logger.warn({ err: describeError(err) }, "inbox sweep failed"));
      }, options.inboxSweepMs ?? INBOX_SWEEP_MS);
      sweep.unref();
    }
    if (!options.oneShot) {
      void resumeWritebacks().catch((err: unknown) =>
        logger.warn(
          { err: describeError(err) },
          "write-backs waiting at the last stop not resumed; retried at next start",
        ),
      );
      // Events still in a calendar the mapping no longer names (calendar_id changed while stopped) move first.
      void relocate().catch((err: unknown) =>
        logger.warn({ err: describeError(err) }, "events of changed calendars not moved yet; their syncs move them"),
      );
      poller.start();
      void push.start();
      cron = createTask(config.sync.reconcile_cron, () => {
        void runReconcile().catch(() => {});
      });
      cron.start();
      void runReconcile().catch(() => {});
      notifier.start();
    }
  };
  /** Set by stop(): when its grace ends, and the steps it left unfinished then (still running, no longer awaited). */
  let stopGrace: StopGrace | undefined;
  /**
   * Waits for one step of the leader's or the daemon's stop: during a stop only for what is left of its grace (a
   * closing step: of the grace and CLOSING_MS), noting a step still running then (left unfinished) instead of waiting.
   */
  const stopStep = async (name: string, work: Promise<unknown>, closing = false): Promise<void> => {
    const grace = stopGrace;
    if (!grace) {
      await work;
      return;
    }
    let timer: NodeJS.Timeout | undefined;
    const late = new Promise<"late">((r) => {
      timer = setTimeout(() => r("late"), graceLeft(grace) + (closing ? CLOSING_MS : 0));
    });
    const outcome = await Promise.race([
      work.then(
        () => "done" as const,
        (err: unknown) => ({ err }),
      ),
      late,
    ]);
    clearTimeout(timer);
    if (outcome === "late") grace.late.push(name);
    else if (outcome !== "done") throw outcome.err;
  };
  const graceLeft = (grace: StopGrace) => Math.max(0, grace.deadline - clock.now());

  const stopLeaderWork = async () => {
    metrics.leader.set(0);
    engine.setEnrichment(false);
    // Syncs waiting for Google's quota (or a retry) have sent nothing: given up now, not waited for below (their
    // webhook events stay in the inbox); syncs whose calls can go still get what is left of the grace.
    engine.giveUpWaits();
    if (sweep) clearInterval(sweep);
    sweep = undefined;
    await cron?.destroy();
    cron = undefined;
    poller.stop();
    push.stop();
    await stopStep("notifications", notifier.stop());
    // Webhook events in flight get a moment to finish (a stop's: what is left of its grace); whatever the engine still
    // holds is given up (their events stay in the inbox, and the next leader replays and reconciles them).
    const grace = stopGrace;
    await stopStep("webhook events in flight", processor.stop(grace ? graceLeft(grace) : undefined));
    await stopStep("syncs in flight", engine.abandon());
    inbox.trackPending(false); // the next leader processes what this one accepts
  };

  /** A reload's leader follow-ups: the poller and cron start again with the new mapping and settings. */
  const restartLeaderTimers = () => {
    if (options.oneShot || stopping || !lease.isLeader) return;
    poller.stop();
    poller.start();
    void cron?.destroy();
    cron = createTask(config.sync.reconcile_cron, () => {
      void runReconcile().catch(() => {});
    });
    cron.start();
  };

  const reload = (next: Config): Promise<ConfigChanges> =>
    applyReload(
      {
        config,
        gateways,
        sync,
        poller,
        push,
        tokens,
        readiness,
        now: () => clock.now(),
        logger,
        async betweenReconciliations(fn) {
          const turn = (async () => {
            if (running) await running.catch(() => {});
            return fn();
          })();
          const gate = turn.catch(() => {});
          reloading = gate;
          try {
            return await turn;
          } finally {
            if (reloading === gate) reloading = undefined;
          }
        },
        leading: () => lease.isLeader && !options.oneShot && !stopping,
        restartLeaderTimers,
        relocate,
        backfill,
        forgetListing: (therapistId) => listings.forget(therapistId),
        released: (therapistIds) => {
          for (const id of therapistIds) {
            listings.release(id);
            pushHealth.closed(id);
          }
        },
      },
      next,
    ).finally(() => {
      // The new mapping's calendars resolved: two therapists on one calendar are refused before the next sync.
      void resolveCalendars().catch(() => {});
      void upkeep.report().catch(() => {});
      // The held gauge follows the new mapping now, not at the next count: a removed therapist with nothing held goes.
      void refreshHolds();
    });

  let leaderWork: Promise<void> = Promise.resolve();
  const lease: LeaderLease = new LeaderLease({
    store,
    holderId: defaultHolderId(),
    leaseMs: config.store.lease_seconds * 1000,
    // A SQLite lease row is compared between processes, which share the host's clock only: a test's ManualClock
    // moves this process's time alone (a jump would read as a stall and end leadership).
    clock: store.kind === "sqlite" ? systemClock : clock,
    logger, // binds component=lease and the holder itself
    onChange: (leader) => {
      // One transition at a time, so a new term's work never starts while the last term's is still stopping.
      if (leader) leaderWork = leaderWork.then(startLeaderWork);
      else {
        if (stopping) logger.info("leadership released");
        else logger.warn("no longer the leader: leader-only work stops");
        leaderWork = leaderWork.then(stopLeaderWork);
      }
      leaderWork = leaderWork.catch((err: unknown) =>
        logger.error({ err: describeError(err) }, "leader work did not start or stop cleanly"),
      );
    },
  });
  // A one-shot command (doctor, reconcile) knows its calendars before it runs; a daemon listens first.
  if (options.oneShot) await verifyWithin(gateways, options.resolveWaitMs ?? ONE_SHOT_RESOLVE_WAIT_MS);
  else
    void resolveCalendars().catch((err: unknown) =>
      logger.warn({ err: describeError(err) }, "calendars not resolved; tried again at the next credentials check"),
    );

  const app: App = {
    config,
    logger,
    store,
    credentials,
    registry,
    metrics,
    booking,
    calendars,
    heldCalendar: (therapistId) => gateways.held(therapistId),
    sync,
    engine,
    poller,
    inbox,
    get processor() {
      return processor;
    },
    lease,
    push,
    pushHealth,
    listings,
    notifier,
    http: undefined,
    admin: undefined,
    reconcile: runReconcile,
    async purge() {
      const removed = await store.purgeExpired();
      // Engine dead letters of appointments that left the window are among them.
      await sync.dead.load();
      logger.debug({ removed }, "expired store entries removed");
      return removed;
    },
    credentialsChanged,
    status,
    mappingReport: () => upkeep.report(),
    reload,
    async start() {
      // A Redis user without scripting would never lead (every renewal refused), silently: not started at all.
      await lease.checkPermissions();
      // A Redis that may evict keys loses acknowledged webhooks silently once full: said at every start.
      const eviction = store.redis ? await evictionRisk(store.redis) : undefined;
      if (eviction) logger.error({ fix: EVICTION_FIX }, eviction);
      await sync.dead.load();
      await refreshHolds();
      await sync.history.log.loadRecent();
      const minimised = await inbox.minimiseDeadLetters();
      if (minimised > 0) {
        logger.info({ count: minimised }, "webhook dead letters of an earlier build no longer keep the event body");
      }
      const links = await sync.links.minimise();
      if (links > 0) {
        logger.info({ count: links }, "links of an earlier build no longer keep the booking's customer details");
      }
      app.http = await createHttpServer({
        name: "public",
        listen: options.listen ?? config.webhooks.listen,
        maxConnections: config.webhooks.max_connections,
        routes: [
          createWebhookHandler({
            path: config.webhooks.path,
            secrets: config.webhooks.signing_secrets,
            toleranceSec: config.webhooks.tolerance_seconds,
            maxBodyBytes: config.webhooks.max_body_bytes,
            maxVerifiedBodyBytes: config.webhooks.max_verified_body_bytes,
            maxBufferedBytes: config.webhooks.max_buffered_bytes,
            inbox,
            clock,
            logger, // binds component=webhooks itself
            registry,
          }),
          push.handler,
          ...(config.connect
            ? [
                createConnectHandler({
                  config,
                  store,
                  credentials,
                  clock,
                  logger,
                  connected: credentialsChanged,
                  countAppointments: (therapistId) => countAppointments(booking, config, therapistId, clock.now()),
                  calendarsInUse: () => gateways.inUse(),
                }),
              ]
            : []),
        ],
        registry,
        logger, // binds component=http itself
      });
      const adminListen = options.adminListen ?? config.admin.listen;
      const storeFolder = storeFolderOf(config.store.url, options.cwd);
      app.admin = await createHttpServer({
        name: "admin",
        listen: adminListen,
        routes: [
          adminRoutes({
            health: {
              storePing: async () => {
                await store.ping();
                await refreshLastReconcile();
              },
              // One small entry per replica, expiring by itself: proves writes still land (a full disk does not
              // stop a ping).
              storeWrite: () => meta.set(`readyz_probe:${lease.holderId}`, clock.now(), 600_000),
              ...(storeFolder ? { storeFolder } : {}),
              lastReconcileAt: () => lastReconcileAt,
              startedAt,
              // The booking client's own requests say whether the service answers (webhook reads, write-backs,
              // reconciliations; a connection test while it does not). A standby makes none and needs none.
              bookingReachable: () =>
                options.oneShot === true || lease.isLeader
                  ? booking.reachability.state({ recheck: true })
                  : { ok: true, detail: "standby: the leader makes the booking API calls" },
              status,
            },
            registry,
            readiness,
            clock,
            ...(config.admin.bearer_token ? { bearerToken: config.admin.bearer_token } : {}),
            history: { read: (id) => sync.history.log.read(id), retentionDays: config.history.retention_days },
          }),
        ],
        registry,
        logger,
      });
      if (!isLoopback(adminListen) && !config.admin.bearer_token) {
        logger.warn(
          { listen: adminListen },
          "the admin listener is reachable from the network without admin.bearer_token: /status shows therapists and calendars to whoever reaches it",
        );
      }
      let ticks = 0;
      gauges = setInterval(() => {
        metrics.queueDepth.set({ queue: "sync" }, engine.queueDepth);
        metrics.queueDepth.set({ queue: "webhooks" }, inbox.pendingCount);
        // Held write-backs are counted from the store (an administrator's decision may come from another process).
        if (++ticks % 6 === 0) {
          void refreshHolds();
          // Another replica's (or an earlier leader's) success too: the gauge is read by Prometheus, not by /readyz.
          refreshLastReconcile().catch(() => {});
        }
      }, 5000);
      gauges.unref();
      purge = setInterval(() => {
        app
          .purge()
          .catch((err: unknown) =>
            logger.warn({ err: describeError(err) }, "expired store entries not removed; retried in an hour"),
          );
      }, PURGE_MS);
      purge.unref();
      logger.info(
        { url: app.http.url, admin_url: app.admin.url, therapists: config.therapists.length, store: store.kind },
        "calbridge started",
      );
      await upkeep.atStart();
      if (notices) {
        // Every replica listens; the notice is a no-op unless this one's processor runs (it leads).
        stopNotices = await notices.subscribe(INBOX_ACCEPTED_CHANNEL, (id) => {
          processor.notify(id).catch((err: unknown) => {
            logger.warn({ err: describeError(err), event_id: id }, "inbox notice not followed; the sweep retries");
          });
        });
        // Another replica stored a therapist's new credentials: take them up here too (the leader backfills).
        stopCredentialNotices = await notices.subscribe(CREDENTIALS_CHANGED_CHANNEL, (therapistId) => {
          takeUp(therapistId).catch((err: unknown) => {
            logger.warn({ therapist_id: therapistId, err: describeError(err) }, "new credentials not taken up");
          });
        });
        if (push.enabled) {
          // A standby's push notification: the leader polls that calendar now (a no-op on the others).
          stopPushNotices = await notices.subscribe(PUSH_CHANGED_CHANNEL, (notice) => push.noticed(notice));
        }
      }
      void checkCredentials(credentialsCheck.signal);
      await lease.start();
      await leaderWork;
    },
    async stop(graceMs = 10_000) {
      stopping = true;
      if (gauges) clearInterval(gauges);
      if (purge) clearInterval(purge);
      // One deadline for the whole stop, each step waited for only as long as is left of it: steps that each kept
      // their own limit (the processor's 10 s, the syncs in flight none, the lease release 5 s) added up past a
      // container's 10 s SIGKILL when Google answered slowly or Redis did not answer at all.
      const grace: StopGrace = { deadline: clock.now() + graceMs, late: [] };
      stopGrace = grace;
      app.http?.beginShutdown();
      app.admin?.beginShutdown();
      const httpMs = Math.min(graceLeft(grace), 5000);
      await Promise.all([app.http?.close(httpMs), app.admin?.close(httpMs)]);
      stopNotices?.();
      stopPushNotices?.();
      stopCredentialNotices?.();
      credentialsCheck.abort();
      // Leader-only work ends while the lease is still this replica's: released first, the standby took over while
      // the inbox processor and syncs here were still running (the same webhook applied on both).
      leaderWork = leaderWork
        .then(stopLeaderWork)
        .catch((err: unknown) => logger.error({ err: describeError(err) }, "leader work did not stop cleanly"));
      // Its own steps keep to the grace and name what they left (a closing step: they get to say so).
      await stopStep("leader work", leaderWork, true);
      // For the same reason, a replica whose leader work is still running at the end of the grace does not release
      // the lease: it lapses by itself (store.lease_seconds) after this process has exited.
      await stopStep(
        "leader lease",
        lease.stop({ release: grace.late.length === 0, timeoutMs: graceLeft(grace) }),
        true,
      );
      await stopStep("leader work", leaderWork, true);
      await stopLeaderWork();
      // The grace timer is cleared once the engine drained: left running, it kept the process alive for the whole
      // grace period after an orderly stop (20 s for `calbridge run`, past a container's 10 s SIGKILL deadline).
      await stopStep("syncs in flight", engine.stop());
      // Closed even when the grace is over: what was stored stays, and a store that does not answer is left.
      await stopStep("history", sync.history.log.close(), true);
      gateways.close();
      notifier.close();
      await stopStep("store", store.close(), true);
      if (grace.late.length > 0) {
        // Nothing is lost: a webhook is acknowledged only once stored in the inbox, and leaves it only once synced.
        logger.warn(
          { grace_ms: graceMs, unfinished: [...new Set(grace.late)] },
          "stop grace exceeded: unfinished work stays in the inbox or is retried at next start",
        );
      }
      logger.info("calbridge stopped");
    },
  };
  // A start that fails part way (a listener's port taken, the store gone) closes what it opened before it rejects:
  // left open, the public listener answered /healthz 200 and took webhooks that nothing would ever process, and its
  // handles kept `calbridge run` from exiting (so it was never restarted).
  const startAll = app.start;
  app.start = async () => {
    try {
      await startAll();
    } catch (err) {
      logger.error({ err: describeError(err) }, "calbridge did not start: closing what it opened");
      await app
        .stop(2000)
        .catch((stopErr: unknown) =>
          logger.warn({ err: describeError(stopErr) }, "not everything closed after the failed start"),
        );
      throw err;
    }
  };
  return app;
}

/** How long a one-shot command waits for Google to identify the OAuth `primary` calendars (resolveWaitMs). */
const ONE_SHOT_RESOLVE_WAIT_MS = 20_000;

/**
 * A one-shot command (doctor, reconcile, purge's calendars) identifies its calendars before it runs, but does not wait
 * out a Google that does not answer: each of those calls retries for minutes (30 s a request, five tries), and doctor,
 * run at 3 a.m. because something is wrong, would say nothing meanwhile. After `waitMs` the calls are given up; a
 * therapist not identified by then is held for this run, its check says why, and the rest goes on.
 */
async function verifyWithin(gateways: TherapistCalendars, waitMs: number): Promise<void> {
  const seconds = Math.round(waitMs / 1000);
  await givingUpAfter(
    waitMs,
    () => new Error(`Google did not tell within ${seconds} s which calendar this is (asked again at the next run)`),
    () => gateways.verify(),
  );
}
