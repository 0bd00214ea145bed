// Owns the command line: run, reconcile, writeback held, purge, doctor, history, demo, authorize, invite,
// config-schema. Exit 0 ok, 1 failure, 2 usage or configuration error (printed one problem per line, never as a
// stack trace). The entry is cli.ts, which loads this module after catching `run`'s signals.
// First: how the heap grows is set before the rest loads.
import { calendarTakenBy } from "./daemon/same-calendar.ts";
import "./heap.ts";
import { readFileSync } from "node:fs";
import { Command, CommanderError } from "commander";
import { runConsentFlow } from "./calendar/auth.ts";
import { quotaUserOf } from "./calendar/gateway.ts";
import { reachCalendar } from "./calendar/reach.ts";
import { describeHolder, type HeldLease, takeCommandLease } from "./cli/command-lease.ts";
import { takeEarlySignals } from "./cli/early-signals.ts";
import { historyCommand } from "./cli/history.ts";
import { formatPlan, writeJsonInPieces } from "./cli/plan-output.ts";
import { PurgeRefusedError, PurgeUsageError, runPurge } from "./cli/purge.ts";
import { FORCED_EXIT_CODE, takeStopSignals } from "./cli/stop-signals.ts";
import { formatHeld, writebackHeld } from "./cli/writeback-held.ts";
import { configJsonSchema } from "./config/json-schema.ts";
import { ConfigError, loadConfig } from "./config/load.ts";
import type { Config, TherapistConfig } from "./config/schema.ts";
import { createInvite, inviteUrl, linksUnusable, MAX_TTL_MS, notConnectable, parseTtl } from "./connect/invite.ts";
import { type App, CREDENTIALS_CHANGED_CHANNEL, createApp } from "./daemon/app.ts";
import { ConfigReloader } from "./daemon/reload.ts";
import { createLogger, type Logger, LogLevelError, logLevel } from "./log.ts";
import { CredentialStore, EncryptionKeyMissingError, secretBoxFor } from "./store/secrets.ts";
import { missingStoreFile, openStore, probeWrite, redactStoreUrl, StoreMissingError } from "./store/store.ts";
import { describeError } from "./sync/errors.ts";

const version = (JSON.parse(readFileSync(new URL("../package.json", import.meta.url), "utf8")) as { version: string })
  .version;

class ExitCode extends Error {
  readonly code: number;
  constructor(code: number, message = "") {
    super(message);
    this.code = code;
  }
}

/**
 * Why `calbridge authorize` must not keep a consent whose fresh access token is `accessToken`, in words for the
 * terminal and the browser alike; undefined when the account opens the calendar and, as far as Google tells, may change
 * its events (a role Google does not tell is noted on stderr and accepted).
 */
async function authorizeRefusal(config: Config, t: TherapistConfig, accessToken: string): Promise<string | undefined> {
  const reach = await reachCalendar({
    apiRoot: config.google.api_root,
    calendarId: t.calendar_id,
    accessToken,
    quotaUser: quotaUserOf(t.therapist_id),
  });
  switch (reach.outcome) {
    case "no_access":
      return `the Google account chosen cannot open calendar ${t.calendar_id} (${describeError(reach.error)}): nothing was stored; run authorize again and choose the account that owns it, or share the calendar with that account ("Make changes to events")`;
    case "failed":
      return `access to calendar ${t.calendar_id} could not be checked (${describeError(reach.error)}): nothing was stored; run authorize again`;
    case "view_only":
      return `the Google account chosen can only see calendar ${t.calendar_id} (access ${reach.role}), not change its events: nothing was stored; the account needs the "Make changes to events" permission on it (have the owner change the share in the calendar's "Settings and sharing"), then run authorize again, or run it again and choose the account that owns it`;
  }
  const taken = reach.calendarId
    ? calendarTakenBy(config.therapists, t.therapist_id, reach.calendarId, config.google.auth)
    : undefined;
  if (taken) {
    return `the Google account chosen is the one whose calendar ${reach.calendarId} is already the calendar of ${taken.therapist_id}: two therapists cannot share one calendar (each would take the other's events for deletions), so nothing was stored; run authorize again and sign in with ${t.therapist_id}'s own Google account`;
  }
  if (reach.writeUnverified) {
    process.stderr.write(
      `note: whether this account may change events in calendar ${t.calendar_id} could not be told (${reach.writeUnverified}); taken as it opens the calendar\n`,
    );
  }
  return undefined;
}

/** A whole number in [min, max] given for `option`, or exit code 2 naming it (Number("abc") || 0 read as "none"). */
function wholeNumber(option: string, value: string, min: number, max: number): number {
  const n = /^\d+$/.test(value.trim()) ? Number(value) : Number.NaN;
  if (!Number.isInteger(n) || n < min || n > max) {
    throw new ExitCode(2, `${option} ${value}: expected a whole number from ${min} to ${max}`);
  }
  return n;
}

function configPath(opts: { config?: string }): string {
  // An empty CALBRIDGE_CONFIG (`CALBRIDGE_CONFIG=` in a compose file) is unset, as an empty LOG_LEVEL is.
  return opts.config ?? (process.env.CALBRIDGE_CONFIG || "./config/calbridge.yaml");
}

function load(opts: { config?: string }): Config {
  return loadConfig(configPath(opts));
}

function logger(): Logger {
  return createLogger();
}

/** A logger for one-shot commands: warnings and errors only, on stderr, so stdout stays the command's output. */
function quietLogger(): Logger {
  return createLogger({ level: logLevel(process.env.LOG_LEVEL, "warn"), destination: process.stderr as never });
}

/**
 * A one-shot app around `fn`; `readOnly` for the commands that change nothing (doctor, reconcile --dry-run). With
 * `lease` (a command that writes calendars or the booking service) the store's leader lease is taken as soon as the
 * store is open and released after `fn`; while a daemon leads the store, `lease` is called with the holder's
 * description and its answer is the refusal (exit 1), before anything is written (not even a token sealed again).
 * Stored tokens are sealed again under the file's key only with `lease`; without it (writeback held, which runs beside
 * a daemon) they are read with any configured key and never sealed again.
 */
async function withApp<T>(
  config: Config,
  log: Logger,
  fn: (app: App) => Promise<T>,
  o: { readOnly?: boolean; lease?: (holder: string) => string } = {},
): Promise<T> {
  let held: HeldLease | undefined;
  let app: App | undefined;
  const lease = o.lease;
  try {
    app = await createApp(config, {
      logger: log,
      oneShot: true,
      readOnly: o.readOnly === true,
      // Stored tokens are sealed again under this file's key only with the lease (the daemon's own, or a command's that
      // holds it): beside a daemon (writeback held), a rotated key it does not have yet would lock it out of them.
      reseal: lease !== undefined && o.readOnly !== true,
      // Taken before createApp writes anything (it seals stored tokens again under a new key): refused, the command
      // has written nothing at all.
      ...(lease
        ? {
            leading: () => held?.leading() === true,
            beforeWrites: async (store) => {
              const got = await takeCommandLease(store, config, log);
              if (got.kind === "busy") throw new ExitCode(1, lease(describeHolder(got)));
              held = got;
            },
          }
        : {}),
    });
    return await fn(app);
  } finally {
    await held?.release().catch((err: unknown) => log.warn({ err: (err as Error).message }, "lease not released"));
    await app?.stop(2000);
  }
}

export function program(): Command {
  const cmd = new Command("calbridge")
    .description(
      "Mirrors booking-service appointments into therapists' Google Calendars, and pushes their changes back.",
    )
    .version(version)
    .option("-c, --config <file>", "configuration file (default: $CALBRIDGE_CONFIG, then ./config/calbridge.yaml)")
    .exitOverride()
    .showHelpAfterError()
    // Each subcommand's --help lists --config too (subcommands inherit this; set before they are made).
    .configureHelp({ showGlobalOptions: true })
    // LOG_LEVEL is checked once, before any command runs: a level pino does not know (`warning`) is a configuration
    // error for every command (exit 2, main), also for those that log nothing and would never have read it.
    .hook("preAction", () => {
      logLevel(process.env.LOG_LEVEL);
    });

  cmd
    .command("run")
    .description("run the daemon: webhooks, reconciliation, calendar polling, HTTP server")
    .action(async () => {
      // The signals are handled before the file is loaded and the store opened (seconds), and taken over from the
      // entry, which held them while the modules loaded (early-signals.ts): Node's default for SIGHUP ends the process,
      // and SIGTERM's skips the orderly stop. A SIGHUP before the daemon has started is answered by one reload once it
      // has; a SIGTERM or SIGINT while the store opens closes it and exits 0 without starting, one during the start
      // stops the daemon as soon as the start is over. A second SIGTERM during the stop is ignored, a second Ctrl-C
      // ends the process at once (stop-signals.ts).
      let reloader: ConfigReloader | undefined;
      let runLog: Logger | undefined; // set before any signal can be handled (the file loads synchronously)
      let hangupWaiting = false;
      let stopSignal: string | undefined;
      let stop: ((signal: string) => void) | undefined;
      // Once the stop began, a SIGHUP is ignored (a reload would race the stop), not Node's default: no kill.
      const onHangup = () => {
        if (stopSignal) return;
        if (reloader) void reloader.request();
        else hangupWaiting = true;
      };
      process.on("SIGHUP", onHangup);
      const releaseStopSignals = takeStopSignals({
        stop: (signal) => {
          stopSignal = signal;
          // However far the start got, the process ends within a container's 10-second stop deadline.
          setTimeout(() => process.exit(1), 9_500).unref();
          stop?.(signal);
        },
        repeated: (signal) => runLog?.info({ signal }, "stop already in progress"),
        forced: () =>
          runLog?.warn(
            { signal: "SIGINT", exit_code: FORCED_EXIT_CODE },
            "second Ctrl-C: exiting at once, without finishing the stop",
          ),
      });
      if (takeEarlySignals().hangup) onHangup();
      try {
        const file = configPath(cmd.opts());
        const config = loadConfig(file);
        const log = logger();
        runLog = log;
        const app = await createApp(config, { logger: log });
        if (stopSignal) {
          log.info({ signal: stopSignal }, "stopping before the start");
          await app.stop(2_000);
          return;
        }
        // A start that fails has closed what it opened (listeners, store): its error ends the command with exit 1.
        const started = app.start();
        const stopped = new Promise<void>((resolve) => {
          stop = (signal: string) => {
            stop = undefined;
            log.info({ signal }, "stopping");
            started
              .then(
                () =>
                  app.stop(8_000).catch((err: unknown) => log.error({ err: (err as Error).message }, "unclean stop")),
                () => {}, // the start failed: its error is the command's (below)
              )
              .then(resolve);
          };
        });
        await started;
        if (!stopSignal) {
          reloader = new ConfigReloader({ file, load: loadConfig, reload: app.reload, logger: log });
          if (hangupWaiting) void reloader.request();
        }
        await stopped;
        // Work the stop gave up at the end of its grace (a request Google has not answered yet, a store that does not
        // answer) may still hold a socket open: once the stop is over, the process ends without waiting for it.
        setTimeout(() => process.exit(), 100).unref();
      } finally {
        process.off("SIGHUP", onHangup);
        releaseStopSignals();
      }
    });

  cmd
    .command("reconcile")
    .description("one reconciliation pass")
    .option("--dry-run", "write nothing anywhere; print the plan")
    .option("--therapist <id>", "only this therapist")
    .option("--force", "apply deletions even when the mass-deletion guard would hold them")
    .option("--json", "print the report as JSON")
    .action(async (o: { dryRun?: boolean; therapist?: string; force?: boolean; json?: boolean }) => {
      const config = load(cmd.opts());
      if (o.therapist && !config.therapists.some((t) => t.therapist_id === o.therapist)) {
        throw new ExitCode(2, `--therapist ${o.therapist}: not in the configuration`);
      }
      // A dry run plans against the daemon's store or none: a new, empty one (the relative default store.url run from
      // another folder) would be written although nothing may be, and would plan to adopt every event. A real run with
      // no store may be the first one: it creates the store, and says where.
      const missing = missingStoreFile(config.store.url);
      if (missing && o.dryRun) throw missing;
      const log = quietLogger();
      if (missing) log.warn({ file: missing.file }, "no store there yet: a new, empty store is created");
      const report = await withApp(
        config,
        log,
        (app) =>
          app.reconcile({
            dryRun: o.dryRun === true,
            force: o.force === true,
            ...(o.therapist ? { therapistId: o.therapist } : {}),
          }),
        // A second writer beside the daemon's: the same inserts and patches raced, write-backs sent twice, a second
        // rate budget against the booking API. A dry run writes nothing and runs beside it.
        o.dryRun
          ? { readOnly: true }
          : {
              lease: (holder) =>
                `a calbridge daemon leads this store (${holder}): a reconciliation here would write the same calendars and booking service beside it; nothing was written. ` +
                "The daemon reconciles at its start and on sync.reconcile_cron: restart it for a reconciliation now (or stop it, then run this command); `calbridge reconcile --dry-run` shows the plan beside it",
            },
      );
      if (o.json) await writeJsonInPieces(process.stdout, report);
      else process.stdout.write(`${formatPlan(report)}\n`);
      // A dry run excuses only a tripped mass-deletion guard (it shows what would be held): a failed appointment, a
      // calendar that could not be listed or a link that cannot be read fails it as it fails the real run.
      const unlisted = Object.keys(report.calendarErrors).length > 0 || report.unreadableLinks.length > 0;
      if (!report.ok && !(o.dryRun && report.failed === 0 && !unlisted)) throw new ExitCode(1);
    });

  cmd
    .command("writeback")
    .description("write-backs of therapists' calendar changes")
    .command("held")
    .description("list the write-backs the write-back guard holds; --apply sends them, --restore puts the events back")
    .option("--therapist <id>", "only this therapist's")
    .option("--appointment <id>", "only this appointment's")
    .option("--apply", "send them to the booking service (cancel or reschedule the appointments)")
    .option("--restore", "put the events back from the booking; send nothing")
    .option("--json", "print the result as JSON")
    .action(
      async (o: { therapist?: string; appointment?: string; apply?: boolean; restore?: boolean; json?: boolean }) => {
        if (o.apply && o.restore) throw new ExitCode(2, "--apply and --restore: choose one");
        const config = load(cmd.opts());
        // The daemon's store or none: a new empty one would list nothing held.
        const missing = missingStoreFile(config.store.url);
        if (missing) throw missing;
        const decision = o.apply ? "apply" : o.restore ? "restore" : undefined;
        const known = o.therapist === undefined || config.therapists.some((t) => t.therapist_id === o.therapist);
        const result = await withApp(config, quietLogger(), async (app) => {
          // A therapist removed from the mapping may still have holds; an id that has neither is a typo, not "none".
          if (!known && (await app.sync.guard.held(o.therapist)).length === 0) {
            throw new ExitCode(2, `--therapist ${o.therapist}: not in the configuration and nothing held for it`);
          }
          return writebackHeld(app, {
            ...(o.therapist ? { therapistId: o.therapist } : {}),
            ...(o.appointment ? { appointmentId: o.appointment } : {}),
            ...(decision ? { decision } : {}),
          });
        });
        if (o.appointment !== undefined && result.held.length === 0) {
          // A typo must not read as "nothing is held" (nor a decision as done): holds may exist, just not this one.
          const of = o.therapist ? ` of ${o.therapist}` : "";
          if (decision) throw new ExitCode(2, `--appointment ${o.appointment}: nothing held for it${of}; nothing done`);
          if (!o.json) return void process.stdout.write(`nothing held for appointment ${o.appointment}${of}\n`);
        }
        process.stdout.write(`${o.json ? JSON.stringify(result, null, 2) : formatHeld(result, decision)}\n`);
        if (result.decided.some((d) => !d.ok)) throw new ExitCode(1);
      },
    );

  cmd
    .command("purge")
    .description(
      "remove calbridge's own events of a therapist (no longer mapped, or leaving) from their calendar, and forget them",
    )
    .requiredOption("--therapist <id>", "therapist whose events to remove")
    .option("--dry-run", "list what would be deleted; delete nothing")
    .option("--force", "delete even when the mass-deletion guard would hold it")
    .option("--calendar <id>", "the calendar to clean (default: the mapping's, or the one the links name)")
    .option("--impersonate <address>", "the account the service account acts as there (default: see README)")
    .option(
      "--forget-links",
      "for a calendar Google does not find (deleted): forget its links and the record of events left there; delete nothing",
    )
    .action(
      async (o: {
        therapist: string;
        dryRun?: boolean;
        force?: boolean;
        calendar?: string;
        impersonate?: string;
        forgetLinks?: boolean;
      }) => {
        const config = load(cmd.opts());
        let outcome: Awaited<ReturnType<typeof runPurge>>;
        try {
          outcome = await runPurge(config, o, quietLogger());
        } catch (err) {
          if (err instanceof PurgeUsageError) throw new ExitCode(2, err.message);
          if (err instanceof PurgeRefusedError) throw new ExitCode(1, err.message);
          throw err;
        }
        process.stdout.write(`${outcome.text}\n`);
        if (!outcome.ok) throw new ExitCode(1);
      },
    );

  cmd
    .command("doctor")
    .description("check the configuration, credentials, webhook endpoint, calendars, store and clock")
    .option("--json", "print the checks as JSON")
    .option("--notify-test", "also send a test message to every notification target")
    .action(async (o: { json?: boolean; notifyTest?: boolean }) => {
      // The doctor and its checks load when it runs, not with every command (the daemon never needs them).
      const { formatChecks, runDoctor } = await import("./cli/doctor.ts");
      let config: Config;
      try {
        config = load(cmd.opts());
      } catch (err) {
        // With --json a refused configuration is JSON too (one failed check) for whatever reads it; the message on
        // stderr and the exit code (2) are those of every command.
        if (o.json && err instanceof ConfigError) {
          const check = { name: "configuration", status: "fail", detail: err.problems.join("\n") };
          process.stdout.write(`${JSON.stringify({ ok: false, checks: [check] }, null, 2)}\n`);
        }
        throw err;
      }
      // An unreachable store is one failed check, not the end: the other checks run on a stand-in store. A missing
      // SQLite file is not created (it would be an empty store to check, not the daemon's).
      let storeError: unknown;
      try {
        await (await openStore(config.store.url, { connectTimeoutMs: 5000, mustExist: true })).close();
      } catch (err) {
        storeError = err;
      }
      const usable = storeError === undefined ? config : { ...config, store: { ...config.store, url: "memory://" } };
      const checks = await withApp(
        usable,
        quietLogger(),
        (app) => runDoctor(app, { storeError, storeUrl: config.store.url, notifyTest: o.notifyTest === true }),
        { readOnly: true },
      );
      process.stdout.write(
        `${o.json ? JSON.stringify({ ok: checks.every((c) => c.status !== "fail"), checks }, null, 2) : formatChecks(checks)}\n`,
      );
      if (checks.some((c) => c.status === "fail")) throw new ExitCode(1);
    });

  cmd
    .command("history")
    .description("print every decision calbridge took about an appointment, and which side caused it")
    .argument("<appointment_id>", "the booking service's appointment id")
    .option("--json", "print the entries as JSON")
    .action(async (id: string, o: { json?: boolean }) => {
      const result = await historyCommand(load(cmd.opts()), id, o.json === true);
      (result.found || o.json ? process.stdout : process.stderr).write(`${result.output}\n`);
      if (!result.found) throw new ExitCode(1);
    });

  cmd
    .command("demo")
    .description("the daemon against the built-in simulators, with sample bookings flowing in (no credentials)")
    // No commander default: help would print it beside the description's (default: "0").
    .option("--duration <seconds>", "stop after this many seconds (default: run until Ctrl-C)")
    .action(async (o: { duration?: string }) => {
      const { runDemo } = await import("./cli/demo.ts");
      const ctl = new AbortController();
      // As `run`: a second SIGTERM does not end the demo partway, a second Ctrl-C does (exit 130).
      const releaseStopSignals = takeStopSignals({
        stop: () => {
          process.stderr.write("calbridge demo: stopping (Ctrl-C again to exit at once)\n");
          ctl.abort();
        },
        repeated: (signal) => process.stderr.write(`calbridge demo: ${signal}: stop already in progress\n`),
        forced: () => process.stderr.write("calbridge demo: second Ctrl-C: exiting at once\n"),
      });
      try {
        const durationSec = wholeNumber("--duration", o.duration ?? "0", 0, 365 * 86_400);
        const result = await runDemo({ durationSec, logger: quietLogger(), signal: ctl.signal });
        if (!result.converged) throw new ExitCode(1);
      } finally {
        releaseStopSignals();
      }
    });

  cmd
    .command("authorize")
    .description("OAuth consent for a therapist's personal calendar; stores the refresh token")
    .requiredOption("--therapist <id>", "therapist whose calendar to authorize")
    .option("--port <port>", "loopback port for the redirect (default: any free port)") // 0, as --duration
    .action(async (o: { therapist: string; port?: string }) => {
      const port = wholeNumber("--port", o.port ?? "0", 0, 65_535);
      const config = load(cmd.opts());
      const t = config.therapists.find((x) => x.therapist_id === o.therapist);
      if (!t) throw new ExitCode(2, `--therapist ${o.therapist}: not in the configuration`);
      if (!config.google.oauth)
        throw new ExitCode(2, "google.oauth (client_id, client_secret) is required for authorize");
      // Checked before the consent: the therapist must not consent for a token that then cannot be kept.
      const box = secretBoxFor(config.store);
      if (!box) throw new ExitCode(2, new EncryptionKeyMissingError(t.therapist_id).message);
      // A SQLite store that is not there yet may be a first setup (authorize before the daemon's first start), or a
      // relative store.url run from another folder than the daemon's: said before the consent, with the file.
      const missing = missingStoreFile(config.store.url);
      if (missing) {
        process.stderr.write(
          `warning: store: no SQLite store at ${missing.file}: a new store is created there for the token. A daemon on another file will not see it: run this command from the daemon's working folder, or set store.url to its absolute path (sqlite:///ABSOLUTE/PATH)\n`,
        );
      }
      // So is the store: open, and taking a write, before the consent, and kept open through it to the save.
      const store = await openStore(config.store.url, { connectTimeoutMs: 5000 });
      let told: boolean | undefined;
      try {
        try {
          await probeWrite(store, `authorize:${process.pid}`);
        } catch (err) {
          throw new Error(
            `store: ${redactStoreUrl(config.store.url)} refuses writes (${(err as Error).message}); nothing was asked of the therapist: fix the store first`,
          );
        }
        await runConsentFlow({
          clientId: config.google.oauth.client_id,
          clientSecret: config.google.oauth.client_secret,
          authUrl: config.google.auth_url,
          tokenUrl: config.google.token_url,
          port,
          ...(t.impersonate ? { loginHint: t.impersonate } : {}),
          // Decided before the browser's page is answered, so that it says what this terminal says.
          accept: async (result) => {
            // As the connect page does: the account chosen must open the mapped calendar (a shared one may belong to
            // another account) and may change its events (not a view-only share), or every write would fail while the
            // token looked fine. Nothing is stored otherwise.
            const refusal = await authorizeRefusal(config, t, result.access_token);
            if (refusal) return { message: refusal };
            await new CredentialStore({ store, box }).saveRefreshToken(t.therapist_id, result.refresh_token, {
              source: "authorize",
              scope: result.scopes.join(" "),
            });
            // Daemons on this store take the token up at once (Redis pub/sub, or the SQLite file's notices, read every
            // second); without the notice (it failed) each one reads it at its credentials check, every
            // sync.calendar_poll_seconds.
            told = await store.notices?.publish(CREDENTIALS_CHANGED_CHANNEL, t.therapist_id).then(
              () => true,
              (err: unknown) => {
                process.stderr.write(
                  `warning: running daemons were not told of the new token: ${(err as Error).message}\n`,
                );
                return false;
              },
            );
            return undefined;
          },
        });
      } finally {
        await store.close();
      }
      const where = missing ? `a new store, ${missing.file}` : redactStoreUrl(config.store.url);
      process.stdout.write(
        `authorized ${t.therapist_id}; the refresh token is stored encrypted in ${where}\n` +
          (missing
            ? "a daemon started on this store uses it (no daemon ran on it before)\n"
            : `a running daemon takes it up ${told ? "at once" : `within ${config.sync.calendar_poll_seconds} s (sync.calendar_poll_seconds)`}, without a restart\n`),
      );
    });

  cmd
    .command("invite")
    .description("print a signed, single-use link where a therapist connects (or reconnects) their Google Calendar")
    .requiredOption("--therapist <id>", "therapist the link is for")
    .option("--ttl <duration>", "how long the link works: 7d, 12h or 90m (at most 30d)", "7d")
    .action((o: { therapist: string; ttl: string }) => {
      const config = load(cmd.opts());
      if (!config.connect) {
        throw new ExitCode(
          2,
          "connect (public_url, secret, clinic_name) is not configured: add it (see config/example.yaml), or use calbridge authorize",
        );
      }
      const problem = notConnectable(config, o.therapist);
      if (problem) throw new ExitCode(2, `--therapist ${o.therapist}: ${problem}`);
      const unusable = linksUnusable(config);
      if (unusable) throw new ExitCode(2, unusable);
      const ttlMs = parseTtl(o.ttl);
      if (ttlMs === undefined || ttlMs > MAX_TTL_MS) {
        throw new ExitCode(2, `--ttl ${o.ttl}: expected a duration such as 7d, 12h or 90m, at most 30d`);
      }
      const { token, invite } = createInvite(o.therapist, { secret: config.connect.secret, ttlMs });
      const t = config.therapists.find((x) => x.therapist_id === o.therapist);
      process.stdout.write(`${inviteUrl(config.connect.public_url, token)}\n`);
      process.stderr.write(
        `Send this link to ${t?.name ?? o.therapist}: it works once, until ${new Date(invite.expiresAt).toISOString()}, ` +
          "and connects the Google account they choose. Anyone holding it can connect a calendar, so send it privately.\n",
      );
    });

  cmd
    .command("config-schema")
    .description("print the JSON Schema of the configuration file")
    .action(() => {
      process.stdout.write(`${JSON.stringify(configJsonSchema(), null, 2)}\n`);
    });

  return cmd;
}

export async function main(argv: string[]): Promise<number> {
  try {
    await program().parseAsync(argv);
    return 0;
  } catch (err) {
    if (err instanceof CommanderError) {
      return err.exitCode === 0 ? 0 : 2;
    }
    if (err instanceof ConfigError) {
      process.stderr.write(`calbridge: invalid configuration ${err.message}\n`);
      return 2;
    }
    // store.url names no store here (a relative path run from another folder): a configuration error, not a failure.
    if (err instanceof StoreMissingError || err instanceof LogLevelError) {
      process.stderr.write(`calbridge: ${err.message}\n`);
      return 2;
    }
    if (err instanceof ExitCode) {
      if (err.message) process.stderr.write(`calbridge: ${err.message}\n`);
      return err.code;
    }
    process.stderr.write(`calbridge: ${(err as Error).message ?? String(err)}\n`);
    if (process.env.CALBRIDGE_DEBUG) process.stderr.write(`${(err as Error).stack}\n`);
    return 1;
  }
}
