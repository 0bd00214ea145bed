// Owns the wiring of the daemon: from a validated Config to the running parts (store, booking client, one calendar
// gateway per therapist, engine, webhook inbox and processor, calendar poller, scheduler, HTTP server, leader lease)
// and their orderly start and stop.
import { createTask, type ScheduledTask } from "node-cron";
import { Registry } from "prom-client";
import { BookingClient } from "../booking/client.ts";
import { BookingApiError } from "../booking/errors.ts";
import { type CalendarAuth, createCalendarAuth } from "../calendar/auth.ts";
import { CalendarGateway } from "../calendar/gateway.ts";
import { type Clock, systemClock } from "../clock.ts";
import type { Config, TherapistConfig } from "../config/schema.ts";
import { createLogger, type Logger } from "../log.ts";
import { defaultHolderId, LeaderLease } from "../store/lease.ts";
import { CredentialStore, secretBoxFor } from "../store/secrets.ts";
import { openStore, type Store } from "../store/store.ts";
import { CalendarPoller } from "../sync/calendar-poller.ts";
import { SyncEngine } from "../sync/engine.ts";
import { describeError } from "../sync/errors.ts";
import { type ReconcileOptions, type ReconcileReport, reconcile } from "../sync/reconcile.ts";
import { EngineSink } from "../sync/webhook-sink.ts";
import { WebhookInbox } from "../webhooks/inbox.ts";
import { InboxProcessor } from "../webhooks/processor.ts";
import { createWebhookHandler } from "../webhooks/route.ts";
import { reconcileMaxAgeMs } from "./health.ts";
import { createHttpServer, type HttpServer } from "./http.ts";
import { createMetrics, type DaemonMetrics } from "./metrics.ts";
import { PUSH_CHANGED_CHANNEL, PushChannels } from "./push.ts";
import type { StatusSnapshot } from "./status-page.ts";

export interface AppOptions {
  logger?: Logger;
  clock?: Clock;
  /** Folder relative store paths and key files are resolved against. */
  cwd?: string;
  /** Override of webhooks.listen (tests use 127.0.0.1:0). */
  listen?: string;
  /** Start no timers of its own (cron, polling): for one-shot commands. */
  oneShot?: boolean;
  /** Retry policy of the engine (tests shorten it). */
  engine?: { maxAttempts?: number; retryBaseMs?: number };
  /** Retries of one booking request (tests shorten it). */
  bookingMaxRetries?: number;
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
  readonly engine: SyncEngine;
  readonly poller: CalendarPoller;
  readonly inbox: WebhookInbox;
  /** The inbox processor of the current (or last) leadership term; a new one runs each time this replica leads. */
  readonly processor: InboxProcessor;
  readonly lease: LeaderLease;
  readonly push: PushChannels;
  /** Set once start() ran. */
  http: HttpServer | undefined;
  reconcile(options?: ReconcileOptions): Promise<ReconcileReport>;
  status(): Promise<StatusSnapshot>;
  start(): Promise<void>;
  /** Stops accepting webhooks, drains the queues, closes the store; bounded by graceMs. */
  stop(graceMs?: number): Promise<void>;
}

/** Credentials of one therapist, or the reason there are none. */
async function authFor(config: Config, t: TherapistConfig, credentials: CredentialStore): Promise<CalendarAuth> {
  const type = t.auth?.type ?? config.google.auth.type;
  if (type === "oauth") {
    const oauth = config.google.oauth;
    if (!oauth) throw new Error("google.oauth is required for OAuth therapists");
    // A token in the file wins; the store is read only without one (a stored token that cannot be decrypted then
    // fails this therapist alone, with the reason and the fix).
    const refreshToken =
      (t.auth?.type === "oauth" ? t.auth.refresh_token : undefined) ??
      (await credentials.loadRefreshToken(t.therapist_id))?.token;
    if (!refreshToken) {
      throw new Error(`no OAuth refresh token; run \`calbridge authorize --therapist ${t.therapist_id}\``);
    }
    return createCalendarAuth({
      type: "oauth",
      clientId: oauth.client_id,
      clientSecret: oauth.client_secret,
      refreshToken,
      tokenUrl: config.google.token_url,
    });
  }
  if (config.google.auth.type !== "service_account") throw new Error("no service account configured");
  return createCalendarAuth({
    type: "service_account",
    keyFile: config.google.auth.key_file,
    tokenUrl: config.google.token_url,
    ...(t.impersonate ? { subject: t.impersonate } : {}),
  });
}

/** Ids of webhook events accepted by a standby, published so the leader takes them from the shared inbox at once. */
export const INBOX_ACCEPTED_CHANNEL = "calbridge:inbox:accepted";
/** The leader's look through the shared inbox for entries whose notice was lost (pub/sub delivers at most once). */
const INBOX_SWEEP_MS = 30_000;
/** How often expired entries (webhook done marks after their 7 days, ...) are removed from the store. */
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
  });
  const calendars = new Map<string, CalendarGateway>();
  const credentialErrors = new Map<string, string>();
  for (const t of config.therapists) {
    try {
      const auth = await authFor(config, t, credentials);
      calendars.set(
        t.therapist_id,
        new CalendarGateway({
          therapistId: t.therapist_id,
          calendarId: t.calendar_id,
          apiRoot: config.google.api_root,
          auth,
          quotaUser: t.therapist_id,
          clock,
          logger: logger.child({ component: "calendar", therapist_id: t.therapist_id }),
          registry,
          quotaPauseMs: config.google.quota_pause_seconds * 1000,
        }),
      );
    } catch (err) {
      credentialErrors.set(t.therapist_id, describeError(err));
      metrics.therapistCredentialsOk.set({ therapist: t.therapist_id }, 0);
      logger.error(
        { therapist_id: t.therapist_id, err: describeError(err) },
        "therapist's calendar is not usable; its appointments wait",
      );
    }
  }

  const engine = new SyncEngine({
    config,
    booking,
    calendars: calendars as Map<string, import("../sync/types.ts").CalendarPort>,
    store,
    logger: logger.child({ component: "sync" }),
    clock,
    ...options.engine,
    metrics: {
      operations: metrics.syncOperations,
      writebacks: metrics.writebacks,
      guardTripped: metrics.massDeleteGuardTripped,
      lastReconcileSuccess: metrics.lastReconcileSuccess,
      reconcileDuration: metrics.reconcileDuration,
      deadLetters: metrics.deadLetters,
    },
  });
  const poller = new CalendarPoller({ engine, clock, logger: logger.child({ component: "poller" }) });
  const inbox = new WebhookInbox({ store, clock, deadLetterTtlMs: config.webhooks.dead_letter_days * 86_400_000 });
  // A processor cannot start again once stopped: each leadership term gets a fresh one.
  const newProcessor = () =>
    new InboxProcessor({
      inbox,
      sink: new EngineSink(engine),
      logger, // binds component=webhooks itself
      clock,
      registry,
      concurrency: config.sync.concurrency,
    });
  let processor = newProcessor();
  let processorUsed = false;
  const notices = store.notices;
  // With replicas, a standby's accepts are announced; the leader's processor sees its own through the inbox already.
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
  let sweep: NodeJS.Timeout | undefined;
  const sweepInbox = async () => {
    for await (const entry of inbox.pending()) await processor.notify(entry.id);
  };
  const push = new PushChannels({
    config,
    engine,
    poller,
    store,
    logger: logger.child({ component: "push" }),
    isLeader: () => lease.isLeader,
  });

  // Any replica's last successful reconciliation (the leader writes it to the shared store), so a standby stays ready.
  const meta = store.table<number>("meta");
  let lastReconcileAt: number | undefined = await meta.get("last_reconcile_success");
  const refreshLastReconcile = async () => {
    const stored = await meta.get("last_reconcile_success");
    if (stored !== undefined && (lastReconcileAt === undefined || stored > lastReconcileAt)) lastReconcileAt = stored;
  };
  let bookingState: { ok: boolean; detail?: string } = { ok: true, detail: "not checked yet" };
  let cron: ScheduledTask | undefined;
  let running: Promise<ReconcileReport> | undefined;
  let stopping = false;
  let gauges: NodeJS.Timeout | undefined;
  let purge: NodeJS.Timeout | undefined;
  const startedAt = clock.now();

  const runReconcile = async (opts: ReconcileOptions = {}): Promise<ReconcileReport> => {
    // One run at a time: a cron tick during a long run joins the run in progress.
    if (running && !opts.dryRun) return running;
    const run = (async () => {
      try {
        const report = await reconcile(engine, opts);
        bookingState = { ok: true };
        if (!opts.dryRun && report.ok) lastReconcileAt = clock.now();
        return report;
      } catch (err) {
        if (err instanceof BookingApiError && (err.kind === "auth" || err.kind === "transient")) {
          bookingState = { ok: false, detail: describeError(err) };
        }
        logger.error({ err: describeError(err) }, "reconciliation failed; nothing was deleted");
        throw err;
      }
    })();
    if (!opts.dryRun) {
      running = run.finally(() => (running = undefined));
      // Only a caller that joins the run awaits this copy; the caller of `run` handles the rejection itself.
      running.catch(() => {});
    }
    return run;
  };

  const status = async (): Promise<StatusSnapshot> => {
    // Not awaited: the page must answer even when the store does not; the next look shows the fresher value.
    void refreshLastReconcile().catch(() => {});
    const snap = booking.gate.snapshot();
    const iso = (ms: number | undefined) => (ms ? new Date(ms).toISOString() : null);
    return {
      generatedAt: new Date(clock.now()).toISOString(),
      instance: lease.holderId,
      leader: lease.isLeader,
      lastReconcileAt: iso(lastReconcileAt),
      queues: { sync: engine.queueDepth, webhooks: inbox.pendingCount },
      deadLetters: engine.deadLetterCount,
      rateLimit: {
        limit: snap.limit ?? null,
        remaining: snap.remaining ?? null,
        resetAt: iso(snap.resetAt),
        pausedUntil: iso(snap.pausedUntil),
      },
      therapists: config.therapists.map((t) => {
        const st = engine.statusOf(t.therapist_id);
        const health = calendars.get(t.therapist_id)?.health();
        const credError = credentialErrors.get(t.therapist_id);
        const ok = !credError && health?.credentials !== "broken";
        metrics.therapistCredentialsOk.set({ therapist: t.therapist_id }, ok ? 1 : 0);
        return {
          therapistId: t.therapist_id,
          ...(t.name ? { name: t.name } : {}),
          calendarId: t.calendar_id,
          lastSyncAt: iso(st?.lastSyncAt ?? poller.lastPollAt(t.therapist_id)),
          lastError: st?.lastError ? { at: iso(st.lastErrorAt) ?? "", message: st.lastError } : null,
          counts: { eventsMirrored: st?.writes ?? 0, writebacks: st?.writebacks ?? 0 },
          credentials: { ok, ...(credError || health?.lastError ? { detail: credError ?? health?.lastError } : {}) },
          pausedUntil: iso(health?.pausedUntil),
        };
      }),
    };
  };

  const startLeaderWork = () => {
    logger.info("leader: processing the inbox, polling calendars, reconciling");
    metrics.leader.set(1);
    if (processorUsed) processor = newProcessor();
    processorUsed = true;
    void processor.start();
    if (notices) {
      sweep = setInterval(() => {
        sweepInbox().catch((err: unknown) => logger.warn({ err: describeError(err) }, "inbox sweep failed"));
      }, INBOX_SWEEP_MS);
      sweep.unref();
    }
    if (!options.oneShot) {
      poller.start();
      void push.start();
      cron = createTask(config.sync.reconcile_cron, () => {
        void runReconcile().catch(() => {});
      });
      cron.start();
      void runReconcile().catch(() => {});
    }
  };
  const stopLeaderWork = async () => {
    metrics.leader.set(0);
    if (sweep) clearInterval(sweep);
    sweep = undefined;
    await cron?.destroy();
    cron = undefined;
    poller.stop();
    push.stop();
    await processor.stop();
  };

  let leaderWork: Promise<void> = Promise.resolve();
  const lease: LeaderLease = new LeaderLease({
    store,
    holderId: defaultHolderId(),
    leaseMs: config.store.lease_seconds * 1000,
    clock,
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

  const app: App = {
    config,
    logger,
    store,
    credentials,
    registry,
    metrics,
    booking,
    calendars,
    engine,
    poller,
    inbox,
    get processor() {
      return processor;
    },
    lease,
    push,
    http: undefined,
    reconcile: runReconcile,
    status,
    async start() {
      await engine.loadDeadLetterCount();
      const minimised = await inbox.minimiseDeadLetters();
      if (minimised > 0) {
        logger.info({ count: minimised }, "webhook dead letters of an earlier build no longer keep the event body");
      }
      app.http = await createHttpServer({
        listen: options.listen ?? config.webhooks.listen,
        handlers: [
          createWebhookHandler({
            path: config.webhooks.path,
            secrets: config.webhooks.signing_secrets,
            toleranceSec: config.webhooks.tolerance_seconds,
            maxBodyBytes: config.webhooks.max_body_bytes,
            inbox,
            clock,
            logger, // binds component=webhooks itself
            registry,
          }),
          push.handler,
        ],
        health: {
          storePing: async () => {
            await store.ping();
            await refreshLastReconcile();
          },
          lastReconcileAt: () => lastReconcileAt,
          startedAt,
          bookingReachable: () => bookingState,
          status,
        },
        registry,
        logger, // binds component=http itself
        readiness: { maxReconcileAgeMs: await reconcileMaxAgeMs(config.sync.reconcile_cron) },
        clock,
      });
      gauges = setInterval(() => {
        metrics.queueDepth.set({ queue: "sync" }, engine.queueDepth);
        metrics.queueDepth.set({ queue: "webhooks" }, inbox.pendingCount);
      }, 5000);
      gauges.unref();
      purge = setInterval(() => {
        store.purgeExpired().then(
          (removed) => logger.debug({ removed }, "expired store entries removed"),
          (err: unknown) =>
            logger.warn({ err: describeError(err) }, "expired store entries not removed; retried in an hour"),
        );
      }, PURGE_MS);
      purge.unref();
      logger.info({ url: app.http.url, therapists: config.therapists.length, store: store.kind }, "calbridge started");
      if (notices) {
        // Every replica listens; the notice is a no-op unless this one's processor runs (it leads).
        stopNotices = await notices.subscribe(INBOX_ACCEPTED_CHANNEL, (id) => {
          processor.notify(id).catch((err: unknown) => {
            logger.warn({ err: describeError(err), event_id: id }, "inbox notice not followed; the sweep retries");
          });
        });
        if (push.enabled) {
          // A standby's push notification: the leader polls that calendar now (a no-op on the others).
          stopPushNotices = await notices.subscribe(PUSH_CHANGED_CHANNEL, (therapistId) => push.changed(therapistId));
        }
      }
      await lease.start();
      await leaderWork;
    },
    async stop(graceMs = 10_000) {
      stopping = true;
      if (gauges) clearInterval(gauges);
      if (purge) clearInterval(purge);
      const deadline = clock.now() + graceMs;
      app.http?.beginShutdown();
      await app.http?.close(Math.min(graceMs, 5000));
      stopNotices?.();
      stopPushNotices?.();
      await lease.stop();
      await leaderWork;
      await stopLeaderWork();
      // The grace timer is cleared once the engine drained: left running, it kept the process alive for the whole
      // grace period after an orderly stop (20 s for `calbridge run`, past a container's 10 s SIGKILL deadline).
      let graceTimer: NodeJS.Timeout | undefined;
      await Promise.race([
        engine.stop(),
        new Promise((r) => {
          graceTimer = setTimeout(r, Math.max(0, deadline - clock.now()));
        }),
      ]);
      clearTimeout(graceTimer);
      for (const gw of calendars.values()) gw.close();
      await store.close();
      logger.info("calbridge stopped");
    },
  };
  return app;
}
