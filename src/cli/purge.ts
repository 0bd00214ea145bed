// Owns the `calbridge purge` command: which calendar and which credentials (the mapping's, or for a therapist no longer
// mapped the links' calendar and google.auth; --calendar and --impersonate override), the plan or its application, and
// the output. Opens the store and Google only: the booking service is never called.
import { Registry } from "prom-client";
import type { CalendarGateway } from "../calendar/gateway.ts";
import { systemClock } from "../clock.ts";
import type { Config, TherapistConfig } from "../config/schema.ts";
import { TherapistCalendars } from "../daemon/calendars.ts";
import { createMetrics } from "../daemon/metrics.ts";
import type { Logger } from "../log.ts";
import { CredentialDecryptError, CredentialStore, secretBoxFor } from "../store/secrets.ts";
import { openStore, type Store } from "../store/store.ts";
import { describeError, isCalendarKind } from "../sync/errors.ts";
import { LeftBehindEvents } from "../sync/left-behind.ts";
import { LinkStore, purgeable } from "../sync/links.ts";
import { Mapping } from "../sync/mapping.ts";
import { calendarKey, isUserAddress } from "../sync/placement.ts";
import { applyPurge, type PurgePlan, planPurge } from "../sync/purge.ts";
import { describeHolder, type HeldLease, takeCommandLease } from "./command-lease.ts";
import { forgotten, purgeCalendarGone } from "./purge-gone.ts";
import { ownersNow, PurgeRefusedError, refuseWatched } from "./purge-owners.ts";

export { PurgeRefusedError };

export interface PurgeArgs {
  therapist: string;
  calendar?: string;
  impersonate?: string;
  dryRun?: boolean;
  force?: boolean;
  /** For a calendar Google does not find: forget its links (and the left-behind record), delete nothing. */
  forgetLinks?: boolean;
}

/** A problem with the command's arguments (exit 2). */
export class PurgeUsageError extends Error {}

/** Why a purge that held the store's leader lease stops: it no longer does. */
const LEASE_LOST =
  "this command no longer holds the store's leader lease (a daemon may lead now, and sync this calendar); run it again once no daemon syncs the calendar";

/** What ran: the text to print and whether it succeeded. */
export interface PurgeOutcome {
  ok: boolean;
  text: string;
}

interface Target {
  therapist: TherapistConfig;
  calendarId: string;
  /** With the therapist's own OAuth token (else the service account). */
  oauth: boolean;
  /** How calbridge signs in there, for the output. */
  as: string;
}

export async function runPurge(config: Config, args: PurgeArgs, log: Logger): Promise<PurgeOutcome> {
  // The daemon's store or none: an empty one knows no links or stored tokens, and would answer "nothing to remove".
  const store = await openStore(config.store.url, { mustExist: true });
  try {
    const links = new LinkStore(store, new Mapping(config, new Map()), systemClock);
    const mapped = config.therapists.find((t) => t.therapist_id === args.therapist);
    // Which calendars: read only (no stored token sealed again yet), so that a usage error comes before the lease.
    const reading = new CredentialStore({ store, box: secretBoxFor(config.store), logger: log, reseal: false });
    const targets = mapped
      ? [target(config, { ...mapped }, args.calendar ?? calendarKey(mapped), args.impersonate ?? mapped.impersonate)]
      : await unmappedTargets(config, args, links, reading);
    // No daemon leads: the lease is this command's until it is done (a daemon started meanwhile stands by). One leads:
    // the purge goes on only in calendars it does not sync.
    let held: HeldLease | undefined;
    let holder: string | undefined;
    if (!args.dryRun) {
      const got = await takeCommandLease(store, config, log);
      if (got.kind === "busy") {
        holder = describeHolder(got);
        await refuseWatched(store, targets, holder);
      } else held = got;
    }
    try {
      // A stored token is sealed again under the current key only while this command holds the lease: beside a
      // daemon (that may not have the new key yet) it would lock the daemon out of it; a dry run changes nothing.
      const credentials = new CredentialStore({
        store,
        box: secretBoxFor(config.store),
        logger: log,
        reseal: held !== undefined,
      });
      const calendars = new TherapistCalendars({
        config,
        store,
        credentials,
        clock: systemClock,
        logger: log,
        registry: new Registry(),
        metrics: createMetrics(new Registry()),
      });
      // Asked again before each deletion: the lease this command holds can be lost (a stalled renewal), and the daemon
      // beside it can map the therapist again (a reload) while the purge runs; either way it stops there.
      const goOn = (t: Target) => async (): Promise<string | undefined> => {
        if (held) return held.leading() ? undefined : LEASE_LOST;
        return refuseWatched(store, [t], holder ?? "a calbridge daemon").then(
          () => undefined,
          (err: unknown) =>
            err instanceof PurgeRefusedError
              ? err.message.replace("; nothing was deleted", "")
              : `the store could not tell which calendars the daemon syncs (${describeError(err)})`,
        );
      };
      return await purgeAll(config, store, links, calendars, targets, args, log, mapped !== undefined, goOn);
    } finally {
      await held?.release().catch((err: unknown) => log.warn({ err: (err as Error).message }, "lease not released"));
    }
  } finally {
    await store.close();
  }
}

async function purgeAll(
  config: Config,
  store: Store,
  links: LinkStore,
  calendars: TherapistCalendars,
  targets: Target[],
  args: PurgeArgs,
  log: Logger,
  mapped: boolean,
  goOn: (t: Target) => () => Promise<string | undefined>,
): Promise<PurgeOutcome> {
  const out: string[] = [];
  let ok = true;
  for (const t of targets) {
    const gw = await calendars.openAt(t.therapist, t.calendarId, t.therapist.impersonate);
    try {
      const r = await purgeOne(config, store, links, gw, t, args, log, goOn(t));
      out.push(r.text);
      ok &&= r.ok;
    } finally {
      gw.close();
    }
  }
  if (mapped && !args.dryRun) {
    out.push(
      `  ${args.therapist} is still in therapists:: a running daemon writes the events again at its next reconciliation; remove the therapist from the mapping and reload (SIGHUP).`,
    );
  }
  return { ok, text: out.join("\n") };
}

/** A therapist no longer mapped: the calendars their links name (or --calendar), with credentials that reach them. */
async function unmappedTargets(
  config: Config,
  args: PurgeArgs,
  links: LinkStore,
  credentials: CredentialStore,
): Promise<Target[]> {
  const named = new Set<string>();
  // Also the calendars of links a purge marked and did not forget (it stopped or died): their events may be there.
  for await (const l of links.all())
    if (l.therapistId === args.therapist && purgeable(l) && l.calendarId) named.add(l.calendarId);
  const calendarIds = args.calendar ? [args.calendar] : [...named];
  if (calendarIds.length === 0) {
    throw new PurgeUsageError(
      `--therapist ${args.therapist}: not in the configuration, and no links name a calendar of theirs; give --calendar (and --impersonate)`,
    );
  }
  const stored = args.impersonate ? undefined : await storedToken(config, args.therapist, credentials);
  return calendarIds.map((calendarId) => {
    const base = { therapist_id: args.therapist, calendar_id: calendarId, timezone: "UTC" } as TherapistConfig;
    // The account that may reach the calendar: the one named, else a token the therapist connected, else (service
    // account) the calendar's own address: a user's primary calendar is named by the user's address.
    if (args.impersonate)
      return target(config, { ...base, auth: { type: "service_account" } }, calendarId, args.impersonate);
    if (stored && config.google.oauth)
      return target(config, { ...base, auth: { type: "oauth" } }, calendarId, undefined);
    if (config.google.auth.type === "service_account" && isUserAddress(calendarId)) {
      return target(config, { ...base, auth: { type: "service_account" } }, calendarId, calendarId);
    }
    throw new PurgeUsageError(
      `--therapist ${args.therapist}: cannot tell which account may reach ${calendarId}; give --impersonate <address> (service account)`,
    );
  });
}

/**
 * The refresh token the therapist connected, if one is stored. One that the configured keys do not open stops the
 * command with the decryption error (it names store.encryption_key): the calendar is not tried with another account
 * meanwhile. A store that fails is a failure, not "no token".
 */
async function storedToken(config: Config, therapistId: string, credentials: CredentialStore) {
  try {
    return (await credentials.loadRefreshToken(therapistId))?.token;
  } catch (err) {
    if (!(err instanceof CredentialDecryptError)) throw err;
    const sa =
      config.google.auth.type === "service_account"
        ? "; or give --impersonate <address> to purge through the service account instead"
        : "";
    throw new PurgeUsageError(`${err.message}${sa}`);
  }
}

function target(config: Config, t: TherapistConfig, calendarId: string, subject: string | undefined): Target {
  if (subject) t.impersonate = subject;
  else delete t.impersonate;
  const oauth = (t.auth?.type ?? config.google.auth.type) === "oauth";
  if (subject && oauth) throw new PurgeUsageError("--impersonate needs the service account (google.auth)");
  if (!oauth && config.google.auth.type !== "service_account") {
    throw new PurgeUsageError("a service account (google.auth.type service_account) is needed to act as an address");
  }
  const as = oauth ? `${t.therapist_id}'s connected Google account` : `${subject ?? "the service account itself"}`;
  return { therapist: { ...t, calendar_id: calendarId }, calendarId, oauth, as };
}

async function purgeOne(
  config: Config,
  store: Store,
  links: LinkStore,
  calendar: CalendarGateway,
  t: Target,
  args: PurgeArgs,
  log: Logger,
  goOn: () => Promise<string | undefined>,
): Promise<PurgeOutcome> {
  const id = args.therapist;
  const o = {
    therapistId: id,
    calendarId: t.calendarId,
    calendar,
    links,
    maxDeleteRatio: config.sync.max_delete_ratio,
    owners: await ownersNow(config, store, t),
  };
  let plan: PurgePlan;
  try {
    plan = await planPurge(o);
  } catch (err) {
    if (!isCalendarKind(err, "calendar_not_found")) throw err;
    return purgeCalendarGone(store, links, { therapistId: id, calendarId: t.calendarId, as: t.as }, { ...args, goOn });
  }
  const lines = [describePlan(plan, t)];
  if (args.forgetLinks) {
    lines.push(
      `  --forget-links is for a calendar Google does not find; ${t.calendarId} answers: nothing was deleted or forgotten. Run it without --forget-links to delete the events and forget their links.`,
    );
    return { ok: false, text: lines.join("\n") };
  }
  if (args.dryRun) {
    if (plan.guard.tripped && !args.force) lines.push(`  ${guardText(plan)}: a purge without --dry-run needs --force.`);
    lines.push("  dry run: nothing was deleted or forgotten.");
    return { ok: true, text: lines.join("\n") };
  }
  if (plan.guard.tripped && !args.force) {
    lines.push(`  ${guardText(plan)}: nothing was deleted. If this is intended, run it again with --force.`);
    return { ok: false, text: lines.join("\n") };
  }
  const r = await applyPurge(plan, { ...o, goOn }, log.child({ therapist_id: id, calendar_id: t.calendarId }));
  if (r.failed.length === 0 && !r.stopped) await new LeftBehindEvents(store, systemClock).clear(id, t.calendarId);
  lines.push(
    `  deleted ${r.deleted} events (${r.alreadyGone} were gone already), forgot ${forgotten(r.forgotten, r.records)}` +
      (r.failed.length ? `; ${r.failed.length} not deleted (${r.failed[0]!.error}); run it again` : ""),
  );
  if (r.stopped) lines.push(`  stopped with ${r.stopped.left} events left (not deleted): ${r.stopped.reason}`);
  return { ok: r.failed.length === 0 && !r.stopped, text: lines.join("\n") };
}

function guardText(plan: PurgePlan): string {
  const g = plan.guard;
  return `mass-deletion guard: ${g.destructive} events are more than sync.max_delete_ratio of calbridge's ${g.managed} events (limit ${g.limit})`;
}

function describePlan(plan: PurgePlan, t: Target): string {
  const lines = [
    `calbridge purge ${plan.therapistId}: calendar ${plan.calendarId}, as ${t.as}; the booking service is not called`,
    `  ${plan.events.length} calbridge events to delete (past and future), ${plan.links.length - plan.records} links to forget`,
  ];
  if (plan.records > 0) {
    lines.push(
      `  and ${plan.records} records to forget of appointments calbridge saw while ${plan.therapistId} was not mapped: it never mirrored them`,
    );
  }
  if (plan.events.length > 0) {
    const width = Math.max(5, ...plan.events.map((e) => e.eventId.length));
    const appt = Math.max(11, ...plan.events.map((e) => e.appointmentId.length));
    lines.push(`  ${"EVENT".padEnd(width)}  ${"APPOINTMENT".padEnd(appt)}  START`);
    for (const e of plan.events) {
      lines.push(`  ${e.eventId.padEnd(width)}  ${e.appointmentId.padEnd(appt)}  ${e.start ?? "—"}`);
    }
  }
  for (const s of plan.skipped) lines.push(`  left alone: ${s.eventId}: ${s.reason}`);
  return lines.join("\n");
}
