// Owns `calbridge doctor`: one check per line (API key, webhook endpoint, the mapped therapist ids, each calendar and
// who else sees its event details, store, clock, and with --notify-test a test message to each notification target),
// each with a fix-it hint when it fails, and a non-zero exit when anything is wrong.

import { request } from "undici";
import { endpointState } from "../booking/endpoints.ts";
import { BookingApiError } from "../booking/errors.ts";
import { givingUpAfter } from "../calendar/call-runner.ts";
import type { TherapistConfig } from "../config/schema.ts";
import type { App } from "../daemon/app.ts";
import { connectCommand } from "../daemon/calendars.ts";
import { checkDisk, checkStore, checkStoreWrite, storeFolderOf } from "../daemon/health.ts";
import { deadline } from "../deadline.ts";
import {
  LEASE_PERMISSIONS_FIX,
  LeasePermissionError,
  SUBSCRIBE_PERMISSIONS_FIX,
  SubscribePermissionError,
} from "../store/lease.ts";
import { EVICTION_FIX, evictionRisk } from "../store/redis-eviction.ts";
import { CredentialDecryptError } from "../store/secrets.ts";
import { probeWrite, redactStoreUrl, StoreMissingError } from "../store/store.ts";
import { describeError } from "../sync/errors.ts";
import { sharingCheck } from "./sharing-check.ts";
import { therapistIdChecks } from "./therapist-ids.ts";

export interface Check {
  name: string;
  status: "ok" | "warn" | "fail";
  detail: string;
  fix?: string;
}

export interface DoctorOptions {
  /** The configured store could not be opened (the app then runs on a stand-in): the store check reports this. */
  storeError?: unknown;
  /** store.url as configured (default: the app's). */
  storeUrl?: string;
  /** How long each calendar's check waits for Google (default 20 s); then it fails with that. */
  googleWaitMs?: number;
  /** Send a test message to every notification target (`--notify-test`). */
  notifyTest?: boolean;
}

export async function runDoctor(app: App, options: DoctorOptions = {}): Promise<Check[]> {
  const checks: Check[] = [];
  const { config } = app;
  const storeUrl = redactStoreUrl(options.storeUrl ?? config.store.url);
  const googleWaitMs = options.googleWaitMs ?? 20_000;

  try {
    const services = await app.booking.listServices({ priority: "webhook" });
    checks.push({
      name: "booking API key",
      status: "ok",
      detail: `accepted (GET /v1/services: ${services.length} services)`,
    });
  } catch (err) {
    const auth = err instanceof BookingApiError && err.kind === "auth";
    checks.push({
      name: "booking API key",
      status: "fail",
      detail: describeError(err),
      fix: auth
        ? "the key was refused: create one under Settings > API and set booking.api_key (e.g. ${BOOKING_API_KEY})"
        : `the booking service at ${config.booking.base_url} did not answer properly: check booking.base_url and the network`,
    });
  }

  checks.push(await webhookCheck(app));
  // Worth asking only of a booking service that took the key (its failure already says what is wrong).
  if (checks[0]?.status === "ok") checks.push(...(await therapistIdChecks(app.booking, config, Date.now())));

  // Checked at once, reported in the order of the configuration.
  const status = await app.status();
  const calendarChecks = await Promise.all(
    config.therapists.map(async (t): Promise<Check> => {
      const held = app.heldCalendar(t.therapist_id);
      const gw = app.calendars.get(t.therapist_id) ?? held;
      const name = `calendar of ${t.therapist_id}`;
      if (!gw) {
        const why = status.therapists.find((s) => s.therapistId === t.therapist_id)?.credentials.detail;
        return {
          name,
          status: "fail",
          detail: `no usable credentials${why ? `: ${why}` : ""}`,
          fix:
            (t.auth?.type ?? config.google.auth.type) === "oauth"
              ? await oauthFix(app, t, options.storeError)
              : "check google.auth.key_file and the delegation of the service account",
        };
      }
      // Bounded: a Google that does not answer fails the check after a while instead of holding doctor for minutes.
      const res = await givingUpAfter(
        googleWaitMs,
        () => new Error(`Google did not answer within ${googleWaitMs / 1000} s`),
        () => gw.checkAccess(),
      );
      // Held (not synced) until Google tells which calendar its `primary` is: never ok, whatever the check found.
      const why = held
        ? status.therapists.find((s) => s.therapistId === t.therapist_id)?.credentials.detail
        : undefined;
      return {
        name,
        status: res.ok && !held ? (res.unverified ? "warn" : "ok") : "fail",
        detail: why && res.ok ? why : res.detail,
        ...(res.ok
          ? res.fix
            ? { fix: res.fix }
            : {}
          : {
              // Broken credentials name their own fix (scope, API switch, sharing, a reconnect link to send).
              fix:
                res.fix ??
                `share ${t.calendar_id} with the service account (or ${t.impersonate ?? "the therapist"}) with "Make changes to events", or fix calendar_id`,
            }),
      };
    }),
  );
  checks.push(...calendarChecks);
  // On the stand-in for a store that could not be opened, the links and holds are empty: nothing to say of them.
  const storeUnread = (name: string): Check => ({
    name,
    status: "warn",
    detail: "not checked: the store could not be opened (see the store check)",
  });
  checks.push(...(options.storeError !== undefined ? [storeUnread("mapping")] : await mappingChecks(app)));
  // Who else sees the customer details the templates show (a line only when someone does, or it cannot be told), for
  // the calendars calbridge can reach (an unreachable one already has its failure line).
  const sharing = await Promise.all(
    config.therapists.map((t, i) =>
      calendarChecks[i]?.status === "ok"
        ? sharingCheck(t, app.sync.planner.settings(t), app.calendars.get(t.therapist_id)).catch(() => undefined)
        : undefined,
    ),
  );
  for (const c of sharing) if (c) checks.push(c);

  checks.push(await storeCheck(app, options, storeUrl));

  checks.push(await clockCheck(config.booking.base_url, config.webhooks.tolerance_seconds, config.booking.timeout_ms));
  checks.push(options.storeError !== undefined ? storeUnread("write-backs") : await writebackCheck(app));
  if (options.notifyTest) checks.push(...(await notifyChecks(app)));
  checks.sort((a, b) => order(a.name) - order(b.name));
  return checks;
}

/**
 * What the readiness checks (/readyz) say of the store: it answers, it takes a write (a ping alone does not show a
 * full disk, a read-only file or Redis over its maxmemory, where every webhook is answered 503), and its folder has
 * store.min_free_mb free. A missing SQLite file is a warning: the daemon creates it at its first start.
 */
async function storeCheck(app: App, options: DoctorOptions, storeUrl: string): Promise<Check> {
  const name = "store";
  const fix = "check store.url and that the folder or Redis is reachable and writable";
  const err = options.storeError;
  if (err instanceof StoreMissingError) {
    return {
      name,
      status: "warn",
      detail: err.message,
      fix: "if the daemon has not run yet, nothing to do: it creates the store at its first start; if it has, this is not its store, and the other checks did not read it",
    };
  }
  if (err !== undefined) return { name, status: "fail", detail: describeError(err), fix };
  const timeoutMs = 5000;
  const ping = await checkStore({ storePing: () => app.store.ping() }, timeoutMs);
  if (!ping.ok) return { name, status: "fail", detail: ping.detail, fix };
  const folder = storeFolderOf(options.storeUrl ?? app.config.store.url);
  const [write, disk] = await Promise.all([
    checkStoreWrite({ storeWrite: () => probeWrite(app.store, `doctor:${process.pid}`) }, timeoutMs),
    checkDisk(folder, app.config.store.min_free_mb * 1024 * 1024),
  ]);
  const outage = "meanwhile /readyz fails and webhooks are answered 503 (the booking service retries them)";
  if (!write.ok) {
    return {
      name,
      status: "fail",
      detail: `${app.store.kind} answers but ${write.detail} (${storeUrl})`,
      fix:
        app.store.kind === "redis"
          ? `Redis refuses writes: look at its maxmemory and maxmemory-policy (INFO memory), or its disk and replication; ${outage}`
          : `the store file or its folder${folder ? ` ${folder}` : ""} cannot be written: free space on the volume, or make the file and folder writable for calbridge's user; ${outage}`,
    };
  }
  if (!disk.ok) {
    return {
      name,
      status: "fail",
      detail: disk.detail,
      fix: `free space on the volume of ${folder} (or grow it), or lower store.min_free_mb; below it ${outage}`,
    };
  }
  // A Redis user without scripting, or without SUBSCRIBE: the daemon refuses to start (its replicas could never lead,
  // or never tell each other of accepted webhooks).
  const refused = await app.lease.checkPermissions().then(
    () => undefined,
    (err: unknown) =>
      err instanceof LeasePermissionError || err instanceof SubscribePermissionError ? err : undefined,
  );
  if (refused instanceof LeasePermissionError) {
    const detail = `Redis answers but refuses the leader lease's script: ${refused.refusal} (${storeUrl})`;
    return { name, status: "fail", detail, fix: LEASE_PERMISSIONS_FIX };
  }
  if (refused instanceof SubscribePermissionError) {
    const detail = `Redis answers but refuses SUBSCRIBE on calbridge's channels: ${refused.refusal} (${storeUrl})`;
    return { name, status: "fail", detail, fix: SUBSCRIBE_PERMISSIONS_FIX };
  }
  const eviction = app.store.redis ? await evictionRisk(app.store.redis) : undefined;
  if (eviction) return { name, status: "fail", detail: `${eviction} (${storeUrl})`, fix: EVICTION_FIX };
  const room = folder ? `; ${disk.detail}` : "";
  return { name, status: "ok", detail: `${app.store.kind} answers and takes a write (${storeUrl})${room}` };
}

/**
 * The fix for an OAuth therapist without usable credentials, from what the store holds for them: no token (not
 * connected yet), a token no configured key opens (the key, not the therapist), a damaged token, or no store at all.
 */
async function oauthFix(app: App, t: TherapistConfig, storeError: unknown): Promise<string> {
  const { config } = app;
  const therapistId = t.therapist_id;
  // Without store.encryption_key neither authorize nor a connect link can keep a token (both refuse): that comes first.
  const reconnect = `${config.store.encryption_key ? "" : "set store.encryption_key (tokens are stored encrypted with it), then "}run \`${connectCommand(config, therapistId)}\`${config.connect ? " and send them the link" : ""}`;
  if (storeError instanceof StoreMissingError)
    return "its refresh token is kept in the store, which is not there: see the store check";
  if (storeError !== undefined)
    return "its refresh token is kept in the store, which is unreachable: fix the store first";
  if (!config.google.oauth)
    return "set google.oauth (client_id, client_secret): OAuth therapists sign in with that client";
  if (t.auth?.type === "oauth" && t.auth.refresh_token)
    return "check the refresh_token given in the file for this therapist";
  try {
    if ((await app.credentials.loadRefreshToken(therapistId)) === undefined) {
      return `the therapist has not connected their calendar yet: ${reconnect}`;
    }
  } catch (err) {
    if (err instanceof CredentialDecryptError) {
      return err.reason === "no_key" || err.reason === "unknown_key"
        ? `the stored token was encrypted with another key: set store.encryption_key to the key it was stored with (after a rotation, list that key in store.previous_encryption_keys); only if that key is lost, have the therapist reconnect: ${reconnect}`
        : `the stored token is damaged or altered: have the therapist reconnect: ${reconnect}`;
    }
    return `the stored token could not be read (${describeError(err)}): check the store`;
  }
  return `have the therapist reconnect: ${reconnect}`;
}

function order(name: string): number {
  return [
    "booking API key",
    "webhook endpoint",
    "therapist id",
    "calendar",
    "mapping",
    "store",
    "clock",
    "write-backs",
    "notify",
  ].findIndex((p) => name.startsWith(p));
}

/** What the links say about the mapping: therapists no longer mapped, events still to move or left behind. */
async function mappingChecks(app: App): Promise<Check[]> {
  let report: Awaited<ReturnType<App["mappingReport"]>>;
  try {
    report = await app.mappingReport();
  } catch (err) {
    return [{ name: "mapping", status: "warn", detail: `the links could not be read: ${describeError(err)}` }];
  }
  const checks: Check[] = [
    ...report.unmapped.map(
      (u): Check => ({
        name: `mapping: ${u.therapistId}`,
        status: "warn",
        detail: `not in therapists:, but calbridge has ${u.events} events in ${u.calendarIds.join(", ") || "their calendar"}; they are left alone`,
        fix: `remove them with \`${u.purge}\` (see them first with --dry-run), or map the therapist again; if their calendar no longer exists, \`${u.purge} --forget-links\` forgets them, deleting nothing`,
      }),
    ),
    ...[...report.misplaced].map(
      ([therapistId, ids]): Check => ({
        name: `mapping: ${therapistId}`,
        status: "warn",
        detail: `${ids.length} events are still in the calendar mapped before; the running daemon moves them`,
        fix: "if this stays, look for `event moved` and `old calendar cannot be reached` in the daemon's log",
      }),
    ),
    ...report.leftBehind.map(
      (l): Check => ({
        name: `mapping: ${l.therapistId}`,
        status: "warn",
        detail: `${l.events} events stayed in ${l.calendarId}, which calbridge could not reach when they were to move (${l.reason}); each is also in the calendar mapped now`,
        fix: `once calbridge can reach ${l.calendarId} again, \`${l.purge}\`; or delete them there by hand; if the calendar no longer exists, \`${l.purge} --forget-links\` forgets them`,
      }),
    ),
  ];
  if (checks.length > 0) return checks;
  return [
    {
      name: "mapping",
      status: "ok",
      detail: `all ${report.managed} calbridge events are in mapped therapists' calendars`,
    },
  ];
}

async function notifyChecks(app: App): Promise<Check[]> {
  const results = await app.notifier.sendTest();
  if (results.length === 0) {
    return [
      {
        name: "notify",
        status: "warn",
        detail: "no notify.targets configured: nobody is told when something breaks",
        fix: "add a chat webhook or an e-mail target under notify.targets",
      },
    ];
  }
  return results.map((r) => ({
    name: `notify ${r.target}`,
    status: r.ok ? "ok" : "fail",
    detail: r.ok ? "test message sent; check that it arrived" : r.detail,
    ...(r.ok ? {} : { fix: `check the address, credentials and format of notify target ${r.target}` }),
  }));
}

/** Held write-backs wait for a person; a grace period under 30 s cannot wait for Google's Undo. */
async function writebackCheck(app: App): Promise<Check> {
  const name = "write-backs";
  let held: Awaited<ReturnType<App["sync"]["guard"]["held"]>>;
  try {
    held = await app.sync.guard.held();
  } catch (err) {
    return { name, status: "warn", detail: `held write-backs could not be read: ${describeError(err)}` };
  }
  if (held.length > 0) {
    const by = new Map<string, number>();
    for (const h of held) by.set(h.therapistId, (by.get(h.therapistId) ?? 0) + 1);
    return {
      name,
      status: "fail",
      detail: `${held.length} calendar change(s) held by the write-back guard, nothing sent: ${[...by].map(([t, n]) => `${t} ${n}`).join(", ")}`,
      fix: "list them with `calbridge writeback held`, then `--apply` to send them or `--restore` to put the events back",
    };
  }
  const short = app.config.therapists
    .map((t) => ({ id: t.therapist_id, grace: app.sync.mapping.writeback(t.therapist_id).cancel_grace_seconds }))
    .filter((t) => t.grace < 30);
  if (short.length > 0) {
    return {
      name,
      status: "warn",
      detail: `cancel_grace_seconds under 30 for ${short.map((t) => `${t.id} (${t.grace} s)`).join(", ")}: a deletion undone in Google Calendar may already have cancelled the appointment`,
      fix: "set sync.writeback.cancel_grace_seconds (and the therapists' overrides) to 30 or more (60 by default)",
    };
  }
  return { name, status: "ok", detail: "none held" };
}

async function webhookCheck(app: App): Promise<Check> {
  const name = "webhook endpoint";
  const url = app.config.webhooks.public_url;
  let endpoints: Record<string, unknown>[];
  try {
    endpoints = await app.booking.listWebhooks({ priority: "webhook" });
  } catch (err) {
    return {
      name,
      status: "fail",
      detail: `GET /v1/webhooks failed: ${describeError(err)}`,
      fix:
        err instanceof BookingApiError && err.kind === "auth"
          ? "the endpoints are listed with the same API key: fix booking.api_key first"
          : `check booking.base_url (${app.config.booking.base_url}) and the network`,
    };
  }
  if (!url) {
    return {
      name,
      status: "warn",
      detail: `webhooks.public_url is not set; ${endpoints.length} endpoint(s) registered, cannot tell which is ours`,
      fix: "set webhooks.public_url to the HTTPS address the booking service delivers to",
    };
  }
  const found = endpointState(endpoints, url);
  if (found.state === "missing") {
    return {
      name,
      status: "fail",
      detail: `no endpoint for ${url} in GET /v1/webhooks`,
      fix: "add it in the dashboard (Settings > Webhooks) with the appointment.* events, and put its signing secret in webhooks.signing_secrets",
    };
  }
  if (found.state === "disabled") {
    return {
      name,
      status: "fail",
      detail: `the endpoint ${url} is DISABLED (the booking service disables it after 7 failed deliveries); no webhooks arrive, only the reconciliation keeps calendars current`,
      fix: "fix what made deliveries fail (see the dashboard's delivery log), then re-enable the endpoint in Settings > Webhooks",
    };
  }
  if (found.missingEvents.length > 0) {
    return {
      name,
      status: "warn",
      detail: `${url} is enabled but not subscribed to ${found.missingEvents.join(", ")}`,
      fix: "subscribe the endpoint to every appointment.* event in Settings > Webhooks",
    };
  }
  return { name, status: "ok", detail: `${url} is registered and enabled` };
}

/**
 * This clock against the booking service's Date header. The header says when the server answered (to the second):
 * some time between this request going out and its answer arriving, on this clock, if both clocks agree. Only a
 * Date outside that interval (with a second's slack for the header's resolution) is skew, so a doctor run made slow
 * by other checks (an unreachable Google, say) or a slow answer never reads as a clock that is off.
 */
async function clockCheck(baseUrl: string, toleranceSeconds: number, timeoutMs: number): Promise<Check> {
  const name = "clock";
  const limit = deadline(timeoutMs);
  try {
    const sent = Date.now();
    const res = await request(new URL("/v1/services", baseUrl), { method: "GET", signal: limit.signal });
    const received = Date.now();
    await res.body.dump();
    const date = res.headers.date;
    const server = typeof date === "string" ? Date.parse(date) : Number.NaN;
    if (Number.isNaN(server))
      return { name, status: "warn", detail: "the booking service sent no Date header; clock not compared" };
    // The header is truncated to the second: the server's time was within [server, server + 1 s).
    const mid = server + 500;
    const aheadMs = server < sent - 1000 ? sent - mid : server > received + 1000 ? received - mid : 0;
    const skew = Math.round(aheadMs / 1000);
    if (Math.abs(skew) > toleranceSeconds / 2) {
      return {
        name,
        status: "fail",
        detail: `this clock is ${skew} s off the booking service's`,
        fix: `run NTP: webhook signatures older than ${toleranceSeconds} s are refused`,
      };
    }
    return { name, status: "ok", detail: `within ${Math.abs(skew)} s of the booking service` };
  } catch (err) {
    const why = limit.expired ? `no answer within ${timeoutMs} ms (booking.timeout_ms)` : describeError(err);
    return { name, status: "warn", detail: `could not compare clocks: ${why}` };
  } finally {
    limit.end();
  }
}

export function formatChecks(checks: Check[]): string {
  const mark = { ok: "ok  ", warn: "WARN", fail: "FAIL" } as const;
  return checks.map((c) => `${mark[c.status]} ${c.name}: ${c.detail}${c.fix ? `\n     fix: ${c.fix}` : ""}`).join("\n");
}
