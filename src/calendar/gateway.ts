// Owns all calls to one therapist's Google Calendar: idempotent writes, listings, change feed, push channels, retries.

import { createHash } from "node:crypto";
import type { Credentials, OAuth2Client } from "google-auth-library";
import { calendar_v3 } from "googleapis/build/src/apis/calendar/v3.js";
import { Registry } from "prom-client";
import { type Clock, systemClock } from "../clock.ts";
import { deadline } from "../deadline.ts";
import { type Logger, secrets, silentLogger } from "../log.ts";
import { dropAccessToken } from "./auth.ts";
import { type BackoffPolicy, DEFAULT_BACKOFF } from "./backoff.ts";
import { CalendarHealth, type GatewayHealth } from "./calendar-health.ts";
import { type AttemptOptions, attemptFailure, CallRunner, type CallState } from "./call-runner.ts";
import type { ReconnectRoute } from "./credential-hints.ts";
import { CalendarError, classifyError, IdTakenError, RestoreRefusedError } from "./errors.ts";
import { canonicalJson, fingerprint, ownershipOf } from "./fingerprint.ts";
import { APPOINTMENT_ID_PROPERTY, isInvitation, MANAGED_FILTER, TIMES_PROPERTY } from "./ids.ts";
import { gatewayMetrics } from "./metrics.ts";
import type { GoogleQuotaGate } from "./quota-gate.ts";
import { type OwnedLike, ownedPatch } from "./render.ts";
import { canWriteEvents, grantedScopes } from "./scopes.ts";
import { ServiceAccountCredentials } from "./service-account.ts";

export type { GatewayHealth } from "./calendar-health.ts";
export type CalendarEvent = calendar_v3.Schema$Event;

export interface CalendarGatewayOptions {
  therapistId: string;
  calendarId: string;
  /** Google: https://www.googleapis.com/ (only the origin is used). */
  apiRoot: string;
  auth: OAuth2Client;
  /** Sent on every request so per-user quota is charged per therapist, not to one service account. */
  quotaUser?: string;
  /** The account calbridge acts as on this calendar (the delegation subject), named in fix-it hints. */
  account?: string;
  /** OAuth: how the therapist gets new credentials, named in fix-it hints (default: `calbridge invite`). */
  reconnect?: ReconnectRoute;
  clock?: Clock;
  logger?: Logger;
  registry?: Registry;
  random?: () => number;
  /** Tries per call, the first included (default 6). */
  maxAttempts?: number;
  backoff?: Partial<Omit<BackoffPolicy, "random">>;
  /** How long `quotaExceeded` pauses this calendar (default 1 h). */
  quotaPauseMs?: number;
  /** While credentials are broken, one call per interval tries them again (default 10 min). */
  credentialProbeMs?: number;
  /** Awaited before each such try: takes up credentials stored meanwhile (a reconnect by another process). */
  beforeProbe?: () => Promise<unknown>;
  /** Per-request timeout (default 30 s). */
  timeoutMs?: number;
  /** maxResults of listings (default and Google's maximum: 2500). */
  pageSize?: number;
  /** Google's per-project and per-user quotas, shared by every gateway of the process (none: not paced). */
  quota?: GoogleQuotaGate;
  /**
   * A calendar no mapping names (an old one, `calbridge purge`'s): one Google does not find is the caller's to report,
   * not a mapping error to fix in therapists[].calendar_id.
   */
  outsideMapping?: boolean;
}

export interface WriteOptions {
  /** Only write when the event's etag is still this one (412 → CalendarError kind "precondition"). */
  ifMatch?: string;
}

export type UpsertAction = "inserted" | "updated" | "restored" | "unchanged";

export interface ChangeSet {
  events: CalendarEvent[];
  nextSyncToken: string;
  /** True when `events` is a full listing (no token given, or the token had expired), not a delta. */
  fullSync: boolean;
}

/** A calendar on the account's calendar list, with the account's access role on it (calendarList.list). */
export interface AccountCalendar {
  id: string;
  /** freeBusyReader, reader, writer or owner (Google may add others: compare, never rank). */
  accessRole: string;
  /** The account's own (primary) calendar. */
  primary: boolean;
  summary?: string;
}

/** A child logger with those bindings the given logger does not carry yet (no duplicate keys in the JSON). */
function withBindings(logger: Logger, bindings: Record<string, string>): Logger {
  const have = logger.bindings();
  const missing = Object.fromEntries(Object.entries(bindings).filter(([k]) => !(k in have)));
  return Object.keys(missing).length > 0 ? logger.child(missing) : logger;
}

type Properties = Record<string, string | null> | null | undefined;

/** The extended properties `actual` holds are exactly `wanted` (what a PUT of `wanted` leaves). */
function sameProperties(actual: Properties, wanted: Properties): boolean {
  const present = (p: Properties) => Object.fromEntries(Object.entries(p ?? {}).filter(([, v]) => v != null));
  return canonicalJson(present(actual)) === canonicalJson(present(wanted));
}

/** Every extended property in `wanted` is in `actual` with that value; one set to null is absent (a PATCH's merge). */
function mergedProperties(actual: Properties, wanted: Properties): boolean {
  const have = actual ?? {};
  return Object.entries(wanted ?? {}).every(([k, v]) => (v == null ? have[k] == null : have[k] === v));
}

/**
 * The stored event is what a PUT of `body` makes: the fields calbridge owns (see fingerprint; a body without status
 * keeps the stored one) and exactly the body's extended properties.
 */
function carriesUpdate(stored: CalendarEvent, body: CalendarEvent): boolean {
  const owned = ownershipOf(body);
  return (
    fingerprint(stored, owned) === fingerprint({ ...body, status: body.status ?? stored.status }, owned) &&
    sameProperties(stored.extendedProperties?.private, body.extendedProperties?.private) &&
    sameProperties(stored.extendedProperties?.shared, body.extendedProperties?.shared)
  );
}

/** The stored event is what a PATCH of `partial` makes: the owned fields it sets have its values, its properties too. */
function carriesPatch(stored: CalendarEvent, partial: CalendarEvent): boolean {
  const time = (have: CalendarEvent["start"], set: CalendarEvent["start"]) => (set ? { ...have, ...set } : have);
  const merged = {
    ...stored,
    ...partial,
    start: time(stored.start, partial.start),
    end: time(stored.end, partial.end),
  };
  const owned = ownershipOf(partial);
  return (
    fingerprint(stored, owned) === fingerprint(merged, owned) &&
    mergedProperties(stored.extendedProperties?.private, partial.extendedProperties?.private) &&
    mergedProperties(stored.extendedProperties?.shared, partial.extendedProperties?.shared)
  );
}

/** The events of a listing page; a page whose items are not a list of objects is not a listing to act on. */
/** Pages one listing follows at most (at 250 a page, far more events than a calendar holds). */
const MAX_PAGES = 5_000;

/**
 * A listing's next page token, once it is known to lead somewhere new: a token the listing already followed (Google's,
 * or a caching proxy's, loop) or a listing past MAX_PAGES ends it with an error. It paged for ever before, spending the
 * therapist's whole quota, and the calendar's poll (which later polls join) never finished.
 */
function nextPage(seen: Set<string>, token: string | null | undefined, operation: string): string | undefined {
  if (!token) return undefined;
  if (seen.has(token) || seen.size >= MAX_PAGES) {
    const why = seen.has(token) ? "repeats the token of an earlier page" : `leads past ${MAX_PAGES} pages`;
    throw new CalendarError(
      `${operation}: the answer's nextPageToken ${why}; the listing is given up (read again at the next turn)`,
      { kind: "transient", reason: "pageTokenLoop" },
    );
  }
  seen.add(token);
  return token;
}

function itemsOf(page: { items?: unknown }, operation: string): CalendarEvent[] {
  const items = page.items ?? [];
  if (!Array.isArray(items) || !items.every((e) => e !== null && typeof e === "object" && !Array.isArray(e))) {
    throw new CalendarError(`${operation}: the answer's items are not a list of events`, {
      kind: "transient",
      reason: "invalidResponse",
    });
  }
  return items as CalendarEvent[];
}

export class CalendarGateway {
  readonly therapistId: string;
  readonly calendarId: string;
  readonly #api: calendar_v3.Calendar;
  readonly #timeoutMs: number;
  readonly #auth: OAuth2Client;
  readonly #quotaUser: string;
  readonly #logger: Logger;
  readonly #health: CalendarHealth;
  readonly #runner: CallRunner;
  readonly #pageSize: number;
  readonly #oauth: boolean;
  #credentialsVersion = 0;
  /**
   * A new access token: the credentials work, unless the answer's `scope` shows that the grant cannot write events
   * (a consent where the calendar box was left unticked): then they are broken before any API call fails.
   */
  readonly #onTokens = (tokens: Credentials) => {
    const scopes = grantedScopes(tokens.scope);
    if (this.#oauth && typeof tokens.scope === "string" && !canWriteEvents(scopes)) {
      this.#health.markBroken(
        new CalendarError(
          `OAuth token refresh for calendar ${this.calendarId}: Google granted no calendar scope (granted: ${scopes.join(" ") || "none"})`,
          // The endpoint answered 200: no HTTP status is Google's here; the reason is the API's, which it would answer.
          { kind: "auth", reason: "insufficientPermissions", tokenEndpoint: true },
        ),
      );
      return;
    }
    this.#health.credentialsWork("token");
  };

  constructor(options: CalendarGatewayOptions) {
    this.therapistId = options.therapistId;
    this.calendarId = options.calendarId;
    this.#auth = options.auth;
    this.#quotaUser = quotaUserOf(options.quotaUser ?? options.therapistId);
    const clock = options.clock ?? systemClock;
    this.#logger = withBindings(options.logger ?? silentLogger, {
      component: "calendar",
      therapist_id: this.therapistId,
    });
    const metrics = gatewayMetrics(options.registry ?? new Registry());
    this.#pageSize = Math.min(2500, Math.max(1, options.pageSize ?? 2500));
    this.#oauth = !(options.auth instanceof ServiceAccountCredentials);
    this.#health = new CalendarHealth({
      therapistId: this.therapistId,
      calendarId: this.calendarId,
      clock,
      logger: this.#logger,
      metrics,
      quotaPauseMs: options.quotaPauseMs ?? 3_600_000,
      credentialProbeMs: options.credentialProbeMs ?? 600_000,
      authKind: this.#oauth ? "oauth" : "service_account",
      ...(options.account ? { account: options.account } : {}),
      ...(options.reconnect ? { reconnect: options.reconnect } : {}),
      ...(options.outsideMapping ? { outsideMapping: true } : {}),
    });
    this.#timeoutMs = options.timeoutMs ?? 30_000;
    this.#runner = new CallRunner({
      calendarId: this.calendarId,
      auth: options.auth,
      clock,
      logger: this.#logger,
      metrics,
      health: this.#health,
      backoff: { ...DEFAULT_BACKOFF, ...options.backoff, random: options.random ?? Math.random },
      maxAttempts: Math.max(1, options.maxAttempts ?? 6),
      quotaUser: this.#quotaUser,
      ...(options.quota ? { quota: options.quota } : {}),
      timeoutMs: this.#timeoutMs,
      ...(options.beforeProbe ? { beforeProbe: options.beforeProbe } : {}),
    });
    // gaxios must not retry on its own: CallRunner owns retries (POST/PATCH and 403 rate limits included). Nor time
    // requests out: its limit is an AbortSignal.timeout() per request that fires long after the answer (see deadline.ts);
    // CallRunner hands each attempt a signal whose limit ends with it.
    this.#api = new calendar_v3.Calendar({
      auth: options.auth,
      rootUrl: options.apiRoot,
      retry: false,
    });
    this.#auth.on("tokens", this.#onTokens);
  }

  /** Stops listening to the credentials (the gateway keeps working). */
  close(): void {
    this.#auth.off("tokens", this.#onTokens);
  }

  /**
   * Takes the therapist's credentials and pause series off the registry, for good: the gateway leaves the daemon (see
   * CalendarHealth.retire). Call it before a gateway that replaces this one is used.
   */
  retire(): void {
    this.#health.retire();
  }

  health(): GatewayHealth {
    return this.#health.snapshot();
  }

  /** Changes whenever the credentials change (resetCredentials, useRefreshToken). */
  get credentialsVersion(): number {
    return this.#credentialsVersion;
  }

  /** This process starts leading: what it knew of the calendar's standing may be out of date (see CalendarHealth). */
  forgetStanding(): void {
    this.#health.forgetStanding();
  }

  /** After re-authorization: forget that the credentials were rejected; the next call tries them. */
  resetCredentials(): void {
    this.#credentialsVersion++;
    this.#health.reset();
    dropAccessToken(this.#auth);
  }

  /** Whether this gateway signs in with exactly this refresh token (OAuth). */
  usesRefreshToken(refreshToken: string): boolean {
    return this.#auth.credentials.refresh_token === refreshToken;
  }

  /**
   * After a therapist reconnected (OAuth): use this refresh token from now on, drop the old access token, and forget
   * that the old credentials were rejected. The next call fetches a token with the new grant.
   */
  useRefreshToken(refreshToken: string): void {
    secrets.add(refreshToken);
    this.#credentialsVersion++;
    this.#auth.setCredentials({ refresh_token: refreshToken });
    this.#health.reset();
  }

  /**
   * Makes the event `eventId` carry `body`: insert; on 409 (the id exists, possibly deleted) read it and patch
   * calbridge's own fields into it (restoring a deleted one), leaving everything a therapist added. An insert whose
   * answer was lost and that turns out to be there reports "inserted".
   */
  async upsert(
    eventId: string,
    body: CalendarEvent,
    opts: WriteOptions = {},
  ): Promise<{ event: CalendarEvent; action: UpsertAction }> {
    const state: CallState = { ambiguous: false };
    try {
      const event = await this.#runner.run(
        "events.insert",
        "calendar",
        (attempt) =>
          this.#api.events.insert(
            {
              calendarId: this.calendarId,
              quotaUser: this.#quotaUser,
              sendUpdates: "none",
              requestBody: { ...body, id: eventId },
            },
            attempt,
          ),
        { state },
      );
      return { event, action: "inserted" };
    } catch (err) {
      if (!(err instanceof CalendarError) || err.kind !== "duplicate") throw err;
    }
    const existing = await this.get(eventId);
    if (!existing) {
      // An id a person deleted stays unusable after the Bin is emptied (or 30 days passed): insert answers 409 and get
      // 404 (google-api-ruby-client #1811, google-api-python-client #846). The next generation of the id is used, as
      // for a refused restore; failing here failed the appointment for good, at every reconciliation. Unless this
      // insert may have landed (a lost answer retried): then the event may just not be readable yet, and it is tried
      // again later rather than written twice.
      const message = `events.insert ${eventId}: Google reported a duplicate id but has no such event`;
      if (state.ambiguous) throw new CalendarError(`${message} (yet)`, { kind: "transient", status: 409 });
      throw new RestoreRefusedError(`${message}: the id is unusable (a person deleted the event and it was purged)`, {
        kind: "duplicate",
        status: 409,
        reason: "duplicate",
      });
    }
    if (isInvitation(existing, this.calendarId)) {
      this.#logger.info(
        { calendar_id: this.calendarId, event_id: eventId, organizer: existing.organizer?.email },
        "the event id is taken in this calendar by an invitation (a guest's copy of another calendar's event): it is left alone, and the appointment's event is written under the next generation of its id",
      );
      throw new IdTakenError(
        `events.insert ${eventId}: the id is taken on calendar ${this.calendarId} by an invitation from ${existing.organizer?.email ?? "another calendar"} (a guest's copy of another calendar's event); another generation of the id is used`,
        { kind: "duplicate", status: 409, reason: "duplicate" },
      );
    }
    if (opts.ifMatch && existing.etag !== opts.ifMatch) {
      throw new CalendarError(`events.update ${eventId}: the event changed since etag ${opts.ifMatch}`, {
        kind: "precondition",
        status: 412,
        reason: "conditionNotMet",
      });
    }
    const ifMatch = existing.etag ?? undefined;
    if (existing.status === "cancelled")
      return { event: await this.#restore(eventId, body, ifMatch), action: "restored" };
    const owned = ownershipOf(body);
    // The times mark is stamped anew by each write (times-mark.ts): an event that matches otherwise is not written for
    // it, and the link records the mark the event has.
    const { [TIMES_PROPERTY]: _, ...marks } = body.extendedProperties?.private ?? {};
    if (
      fingerprint(existing, owned) === fingerprint(body, owned) &&
      mergedProperties(existing.extendedProperties?.private, marks)
    ) {
      return { event: existing, action: state.ambiguous ? "inserted" : "unchanged" };
    }
    return { event: await this.patch(eventId, ownedPatch(body as OwnedLike), { ifMatch }), action: "updated" };
  }

  /**
   * Brings a deleted event back with calbridge's fields. Google refuses this for an event a person deleted in the
   * Calendar UI (403; 409 on insert; google-api-ruby-client #1811, google-api-python-client #846): that is a
   * RestoreRefusedError, and the id is unusable from then on.
   */
  async #restore(eventId: string, body: CalendarEvent, ifMatch: string | undefined): Promise<CalendarEvent> {
    try {
      return await this.patch(eventId, ownedPatch(body as OwnedLike, "confirmed"), { ifMatch });
    } catch (err) {
      if (err instanceof CalendarError && (err.kind === "forbidden" || err.kind === "gone")) {
        throw new RestoreRefusedError(
          `Google refused to restore the deleted event ${eventId} on calendar ${this.calendarId} ` +
            `(${err.status} ${err.reason ?? ""}); it cannot be recreated under this id (another generation of the id is used)`,
          { kind: "forbidden", status: err.status, reason: err.reason },
        );
      }
      throw err;
    }
  }

  /** Replaces the event (PUT): fields not in `body` are cleared. */
  update(eventId: string, body: CalendarEvent, opts: WriteOptions = {}): Promise<CalendarEvent> {
    return this.#conditionalWrite(
      "events.update",
      eventId,
      opts,
      (attempt) =>
        this.#api.events.update(
          {
            calendarId: this.calendarId,
            eventId,
            quotaUser: this.#quotaUser,
            sendUpdates: "none",
            requestBody: body,
          },
          this.#options(opts, attempt),
        ),
      (stored) => carriesUpdate(stored, body),
    );
  }

  /** Changes only the fields in `partial`; private extended properties merge per key. */
  patch(eventId: string, partial: CalendarEvent, opts: WriteOptions = {}): Promise<CalendarEvent> {
    return this.#conditionalWrite(
      "events.patch",
      eventId,
      opts,
      (attempt) =>
        this.#api.events.patch(
          {
            calendarId: this.calendarId,
            eventId,
            quotaUser: this.#quotaUser,
            sendUpdates: "none",
            requestBody: partial,
          },
          this.#options(opts, attempt),
        ),
      (stored) => carriesPatch(stored, partial),
    );
  }

  /**
   * Sends an update or patch. With ifMatch, an attempt that may have been applied (lost answer, timeout, 5xx) changed
   * the etag if it was: the resend then gets 412 for our own write. So after such an attempt a 412 reads the event, and
   * if it carries what was sent that is the write's result; otherwise (and for a 412 on a clear path) it stays
   * "precondition": someone else changed the event.
   */
  async #conditionalWrite(
    operation: string,
    eventId: string,
    opts: WriteOptions,
    send: (attempt: AttemptOptions) => Promise<{ data: CalendarEvent; status: number }>,
    carries: (stored: CalendarEvent) => boolean,
  ): Promise<CalendarEvent> {
    const state: CallState = { ambiguous: false };
    try {
      return await this.#runner.run(operation, "event", send, { state });
    } catch (err) {
      if (!(err instanceof CalendarError) || err.kind !== "precondition" || !state.ambiguous || !opts.ifMatch) {
        throw err;
      }
      const stored = await this.get(eventId);
      if (!stored || !carries(stored)) throw err;
      this.#logger.info(
        { calendar_id: this.calendarId, event_id: eventId, operation },
        "412 after an attempt whose answer was lost: the event carries this write, so that attempt was applied",
      );
      return stored;
    }
  }

  /**
   * Deletes the event; an event that is already gone counts as success: 410 (deleted before), or 404 once the calendar
   * itself answers. Google answers 404 notFound also when the calendar is gone or no longer shared (the project's
   * notes), and that is not "the event is gone": the event stays where it was, out of our sight. So a 404 costs one
   * calendars.get, which names a missing calendar as such (the calendar's health then pauses it) instead of the link
   * being forgotten while the event still shows a cancelled appointment.
   */
  async delete(eventId: string, opts: WriteOptions = {}): Promise<"deleted" | "already_gone"> {
    const state: CallState = { ambiguous: false };
    try {
      await this.#runner.run(
        "events.delete",
        "event",
        (attempt) =>
          this.#api.events.delete(
            { calendarId: this.calendarId, eventId, quotaUser: this.#quotaUser, sendUpdates: "none" },
            this.#options(opts, attempt),
          ),
        { state },
      );
      return "deleted";
    } catch (err) {
      if (err instanceof CalendarError && (err.kind === "not_found" || err.kind === "gone")) {
        if (err.kind === "not_found") await this.#calendarAnswers();
        return state.ambiguous ? "deleted" : "already_gone";
      }
      throw err;
    }
  }

  /**
   * The calendar's real id: calendars.get of `primary` answers the account's own calendar id (its address), so two
   * mappings on one calendar can be told (same-calendar.ts). Throws as any call does.
   */
  async ownCalendarId(): Promise<string> {
    const data = await this.#runner.run("calendars.get", "calendar", (attempt) =>
      this.#api.calendars.get({ calendarId: this.calendarId, quotaUser: this.#quotaUser, fields: "id" }, attempt),
    );
    return data.id ?? this.calendarId;
  }

  /** Throws (calendar_not_found for a 404) unless the calendar itself is reachable with these credentials. */
  async #calendarAnswers(): Promise<void> {
    await this.#runner.run("calendars.get", "calendar", (attempt) =>
      this.#api.calendars.get({ calendarId: this.calendarId, quotaUser: this.#quotaUser, fields: "id" }, attempt),
    );
  }

  /**
   * Moves the event to calendar `destination` under the same id (events.move: "changes an event's organizer"); this
   * calendar keeps a cancelled entry. The account must be able to write both calendars: Google answers 404 or 403
   * otherwise (extrabacon/google-oauth-jwt #21: "continously getting 404 not found ... Permission issue"), and 409 when
   * the destination already has the id.
   */
  move(eventId: string, destination: string): Promise<CalendarEvent> {
    return this.#runner.run("events.move", "event", (attempt) =>
      this.#api.events.move(
        { calendarId: this.calendarId, eventId, destination, quotaUser: this.#quotaUser, sendUpdates: "none" },
        attempt,
      ),
    );
  }

  /**
   * The event, or null when the id is unknown. A deleted event is returned with status "cancelled". With
   * `confirmMissing`, a 404 is "unknown" only once the calendar itself answers (as for delete): a calendar no longer
   * shared answers 404 for every event in it, and then calendar_not_found is thrown instead of null (one more call).
   */
  async get(eventId: string, opts: { confirmMissing?: boolean } = {}): Promise<CalendarEvent | null> {
    try {
      return await this.#runner.run("events.get", "event", (attempt) =>
        this.#api.events.get({ calendarId: this.calendarId, eventId, quotaUser: this.#quotaUser }, attempt),
      );
    } catch (err) {
      if (err instanceof CalendarError && err.kind === "not_found") {
        if (opts.confirmMissing) await this.#calendarAnswers();
        return null;
      }
      throw err;
    }
  }

  /**
   * The calendars on the calendar list of the account these credentials act as (calendarList.list, every page, hidden
   * entries too), with its access role on each; `minAccessRole` lets Google leave out the others (Google's reference:
   * "The minimum access role for the user in the returned entries"). A 404 here is no verdict on this calendar.
   */
  async calendarList(minAccessRole?: "reader" | "writer" | "owner"): Promise<AccountCalendar[]> {
    const out: AccountCalendar[] = [];
    let pageToken: string | undefined;
    const seen = new Set<string>();
    do {
      const page = await this.#runner.run("calendarList.list", "event", (attempt) =>
        this.#api.calendarList.list(
          {
            quotaUser: this.#quotaUser,
            maxResults: 250,
            showHidden: true,
            ...(minAccessRole ? { minAccessRole } : {}),
            ...(pageToken ? { pageToken } : {}),
          },
          attempt,
        ),
      );
      const items: unknown = page.items ?? [];
      if (!Array.isArray(items)) {
        throw new CalendarError("calendarList.list: the answer's items are not a list", {
          kind: "transient",
          reason: "invalidResponse",
        });
      }
      for (const e of items as calendar_v3.Schema$CalendarListEntry[]) {
        if (typeof e?.id !== "string") continue;
        out.push({
          id: e.id,
          accessRole: String(e.accessRole ?? ""),
          primary: e.primary === true,
          ...(e.summary ? { summary: e.summary } : {}),
        });
      }
      pageToken = nextPage(seen, page.nextPageToken, "calendarList.list");
    } while (pageToken);
    return out;
  }

  /**
   * The event in another calendar of the same account, or null where Google answers 404 (not there). Whatever that
   * calendar answers says nothing about this one: its failures never mark these credentials broken.
   */
  async getIn(calendarId: string, eventId: string): Promise<CalendarEvent | null> {
    try {
      return await this.#runner.run(
        "events.get",
        "event",
        (attempt) => this.#api.events.get({ calendarId, eventId, quotaUser: this.#quotaUser }, attempt),
        { detached: true, on: calendarId },
      );
    } catch (err) {
      if (err instanceof CalendarError && err.kind === "not_found") return null;
      throw err;
    }
  }

  /**
   * Moves the event from another calendar of the same account to `destination` under its id (events.move, no
   * notifications). Its failures never mark these credentials broken (a calendar the account may no longer write
   * answers 403 requiredAccessLevel, which for this calendar would mean broken credentials).
   */
  moveFrom(calendarId: string, eventId: string, destination: string): Promise<CalendarEvent> {
    return this.#runner.run(
      "events.move",
      "event",
      (attempt) =>
        this.#api.events.move(
          { calendarId, eventId, destination, quotaUser: this.#quotaUser, sendUpdates: "none" },
          attempt,
        ),
      { detached: true, on: calendarId },
    );
  }

  /** Deletes the event from another calendar of the same account; gone already (404, 410) counts as done. */
  async deleteIn(calendarId: string, eventId: string): Promise<void> {
    try {
      await this.#runner.run(
        "events.delete",
        "event",
        (attempt) =>
          this.#api.events.delete({ calendarId, eventId, quotaUser: this.#quotaUser, sendUpdates: "none" }, attempt),
        { detached: true, on: calendarId },
      );
    } catch (err) {
      if (err instanceof CalendarError && (err.kind === "not_found" || err.kind === "gone")) return;
      throw err;
    }
  }

  /** Every managed, not deleted event that overlaps [timeMin, timeMax), all pages. */
  listManaged(range: { timeMin: string | Date; timeMax: string | Date }): AsyncIterable<CalendarEvent> {
    const iso = (t: string | Date) => (typeof t === "string" ? t : t.toISOString());
    return this.#listPages({
      privateExtendedProperty: [MANAGED_FILTER],
      singleEvents: true,
      timeMin: iso(range.timeMin),
      timeMax: iso(range.timeMax),
    });
  }

  /**
   * The not deleted events marked as calbridge's and with the appointment's id, past and future, series as themselves
   * (not expanded): the appointment's event, and series Google split off it ("This and following events").
   */
  listMarked(appointmentId: string): AsyncIterable<CalendarEvent> {
    return this.#listPages({
      privateExtendedProperty: [MANAGED_FILTER, `${APPOINTMENT_ID_PROPERTY}=${appointmentId}`],
      singleEvents: false,
    });
  }

  /**
   * Every not deleted event (none filtered out) ending after `timeMin`, series as themselves: where a series Google
   * split off an appointment's event is found when another client's full update stripped calbridge's marks from it.
   */
  listFrom(timeMin: string): AsyncIterable<CalendarEvent> {
    return this.#listPages({ singleEvents: false, timeMin });
  }

  async *#listPages(params: calendar_v3.Params$Resource$Events$List): AsyncIterable<CalendarEvent> {
    let pageToken: string | undefined;
    const seen = new Set<string>();
    do {
      const page = await this.#runner.run("events.list", "calendar", (attempt) =>
        this.#api.events.list(
          {
            calendarId: this.calendarId,
            quotaUser: this.#quotaUser,
            ...params,
            showDeleted: false,
            maxResults: this.#pageSize,
            pageToken,
          },
          attempt,
        ),
      );
      yield* itemsOf(page, `events.list ${this.calendarId}`);
      pageToken = nextPage(seen, page.nextPageToken, `events.list ${this.calendarId}`);
    } while (pageToken);
  }

  /**
   * Changes since `syncToken` (all pages), or a full listing with deleted events when there is no token or Google
   * answers 410 (token expired). Nothing is filtered: callers pick managed events by id or extended property.
   */
  async incrementalChanges(syncToken: string | undefined): Promise<ChangeSet> {
    if (syncToken) {
      try {
        return { ...(await this.#listAll({ syncToken })), fullSync: false };
      } catch (err) {
        if (!(err instanceof CalendarError) || err.kind !== "gone") throw err;
        this.#logger.info({ calendar_id: this.calendarId, reason: err.reason }, "sync token expired: full sync");
      }
    }
    return { ...(await this.#listAll({ showDeleted: true })), fullSync: true };
  }

  async #listAll(params: { syncToken?: string; showDeleted?: boolean }): Promise<Omit<ChangeSet, "fullSync">> {
    const events: CalendarEvent[] = [];
    let pageToken: string | undefined;
    const seen = new Set<string>();
    for (;;) {
      const page = await this.#runner.run("events.list", "calendar", (attempt) =>
        this.#api.events.list(
          { calendarId: this.calendarId, quotaUser: this.#quotaUser, maxResults: this.#pageSize, ...params, pageToken },
          attempt,
        ),
      );
      events.push(...itemsOf(page, `events.list ${this.calendarId}`));
      pageToken = nextPage(seen, page.nextPageToken, `events.list ${this.calendarId}`);
      if (pageToken) continue;
      if (!page.nextSyncToken) {
        throw new CalendarError(`events.list ${this.calendarId}: last page carried no nextSyncToken`, {
          kind: "unknown",
        });
      }
      return { events, nextSyncToken: page.nextSyncToken };
    }
  }

  /**
   * Opens a push channel for this calendar's events. Its failure never touches the credentials' standing: Google
   * refuses a watch for its address too (401 push.webhookUrlUnauthorized), and polling covers the calendar anyway.
   * A failure is `ambiguous` when the channel may be open all the same: an attempt went unanswered (lost answer,
   * timeout) or met a 5xx, even when its retry was then refused (400 channelIdNotUnique: the first one opened it), or
   * Google answered without a resourceId.
   */
  async watch(channel: {
    channelId: string;
    address: string;
    token?: string;
    ttlSeconds?: number;
  }): Promise<{ resourceId: string; expiration: number }> {
    const state: CallState = { ambiguous: false };
    let res: calendar_v3.Schema$Channel;
    try {
      res = await this.#runner.run(
        "events.watch",
        "calendar",
        (attempt) =>
          this.#api.events.watch(
            {
              calendarId: this.calendarId,
              quotaUser: this.#quotaUser,
              requestBody: {
                id: channel.channelId,
                type: "web_hook",
                address: channel.address,
                ...(channel.token ? { token: channel.token } : {}),
                ...(channel.ttlSeconds ? { params: { ttl: String(channel.ttlSeconds) } } : {}),
              },
            },
            attempt,
          ),
        { detached: true, state },
      );
    } catch (err) {
      if (!state.ambiguous || !(err instanceof CalendarError) || err.ambiguous) throw err;
      throw new CalendarError(`${err.message} (after an attempt that may have opened the channel)`, {
        kind: err.kind,
        ...(err.status !== undefined ? { status: err.status } : {}),
        ...(err.reason !== undefined ? { reason: err.reason } : {}),
        ambiguous: true,
      });
    }
    if (!res.resourceId) {
      throw new CalendarError("events.watch: answer without resourceId", { kind: "unknown", ambiguous: true });
    }
    return { resourceId: res.resourceId, expiration: Number(res.expiration ?? 0) };
  }

  /** Stops a push channel; an unknown (expired, already stopped) channel counts as stopped. */
  async stopChannel(channelId: string, resourceId: string): Promise<void> {
    try {
      await this.#runner.run("channels.stop", "event", (attempt) =>
        this.#api.channels.stop({ quotaUser: this.#quotaUser, requestBody: { id: channelId, resourceId } }, attempt),
      );
    } catch (err) {
      if (!(err instanceof CalendarError) || err.kind !== "not_found") throw err;
    }
  }

  /**
   * For `calbridge doctor`: the calendar is reachable and these credentials may write to it. Tries broken credentials
   * too. `fix` is the hint for credentials found broken (missing scope, API switch, sharing, revoked token).
   */
  async checkAccess(): Promise<{ ok: boolean; detail: string; fix?: string; unverified?: true }> {
    let calendar: calendar_v3.Schema$Calendar;
    try {
      calendar = await this.#runner.run(
        "calendars.get",
        "calendar",
        (attempt) => this.#api.calendars.get({ calendarId: this.calendarId, quotaUser: this.#quotaUser }, attempt),
        { probe: true },
      );
    } catch (err) {
      const hint = this.#health.snapshot().hint;
      return { ok: false, detail: (err as Error).message, ...(hint ? { fix: hint } : {}) };
    }
    const where = `calendar ${this.calendarId} (${calendar.summary ?? "no title"}, ${calendar.timeZone ?? "no time zone"})`;
    try {
      const entry = await this.#runner.run("calendarList.get", "event", (attempt) =>
        this.#api.calendarList.get({ calendarId: this.calendarId, quotaUser: this.#quotaUser }, attempt),
      );
      const role = entry.accessRole ?? "unknown";
      if (role === "owner" || role === "writer") return { ok: true, detail: `${where}: reachable, access ${role}` };
      return {
        ok: false,
        detail: `${where}: access ${role}; calbridge needs "Make changes to events" (writer) on this calendar`,
      };
    } catch (err) {
      if (err instanceof CalendarError && err.kind === "not_found") {
        // Reachable, but whether these credentials may write cannot be told (a share that only lets them see it would
        // fail every write): a warning, never a pass.
        return {
          ok: true,
          unverified: true,
          detail: `${where}: reachable; not in the account's calendar list, write access unverified`,
          fix: `add ${this.calendarId} to the account's calendar list (open it once in Google Calendar) so doctor can read its access role; calbridge needs "Make changes to events" on it`,
        };
      }
      return { ok: false, detail: `${where}: reachable, but ${(err as Error).message}` };
    }
  }

  /**
   * Who the calendar is shared with (acl.list), its id as Google names it (an address, also for "primary"), and the
   * address of the account calbridge acts as (its primary calendar's id: the owner of an OAuth therapist's other
   * calendars), for doctor's privacy check. Called directly, not through the call runner: a refusal here (a token
   * without the ACL scope, read access only) says nothing about the credentials calbridge syncs with.
   */
  async sharing(): Promise<
    { calendarId: string; account?: string; rules: calendar_v3.Schema$AclRule[] } | { error: string }
  > {
    // One limit for the whole check (a few requests), as the runner gives each of its attempts.
    const limit = deadline(this.#timeoutMs);
    try {
      const attempt = { signal: limit.signal };
      const { data: calendar } = await this.#api.calendars.get(
        { calendarId: this.calendarId, quotaUser: this.#quotaUser },
        attempt,
      );
      const rules: calendar_v3.Schema$AclRule[] = [];
      let pageToken: string | undefined;
      do {
        const { data } = await this.#api.acl.list(
          { calendarId: this.calendarId, quotaUser: this.#quotaUser, ...(pageToken ? { pageToken } : {}) },
          attempt,
        );
        rules.push(...(data.items ?? []));
        pageToken = data.nextPageToken ?? undefined;
      } while (pageToken);
      // The account's own rule on a calendar of its own (not "primary") is the therapist's, not someone else's.
      const account =
        this.calendarId === "primary"
          ? (calendar.id ?? undefined)
          : await this.#api.calendars
              .get({ calendarId: "primary", quotaUser: this.#quotaUser }, attempt)
              .then(({ data }) => data.id ?? undefined)
              .catch(() => undefined);
      return { calendarId: calendar.id ?? this.calendarId, ...(account ? { account } : {}), rules };
    } catch (err) {
      return { error: classifyError(attemptFailure(limit, err), "calendar", `acl.list ${this.calendarId}`).message };
    } finally {
      limit.end();
    }
  }

  /** An attempt's request options, with the event's etag as If-Match when the write is conditional. */
  #options(opts: WriteOptions, attempt: AttemptOptions): AttemptOptions & { headers?: Record<string, string> } {
    return opts.ifMatch ? { ...attempt, headers: { "If-Match": opts.ifMatch } } : attempt;
  }
}

/**
 * The quotaUser sent for a therapist. Google's system parameters: any string "but should not exceed 40 characters";
 * a longer therapist id is sent as a digest of itself (the same every time, so its per-user budget stays one).
 */
export function quotaUserOf(id: string): string {
  return id.length <= 40 ? id : `q_${createHash("sha256").update(id).digest("base64url").slice(0, 38)}`;
}
