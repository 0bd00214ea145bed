// Owns the Google Calendar emulator: an HTTP server (API v3, token endpoint, consent page) and its test-facing controls.
import { createServer, type IncomingMessage, type Server, type ServerResponse } from "node:http";
import type { AddressInfo } from "node:net";
import { type Clock, systemClock } from "../../clock.ts";
import { ruleId, type ScopeRule } from "./acl.ts";
import { handleApi } from "./api.ts";
import { CONSENT_PATHS, ConsentPage, DECISION_PATH } from "./consent.ts";
import { toResource } from "./event-model.ts";
import { Faults } from "./faults.ts";
import { ApiError, googleErrorBody, parseJsonBody, queryOf, readBody, sendEmpty, sendError, sendJson } from "./http.ts";
import { EventLister } from "./list.ts";
import {
  JWT_BEARER,
  type OAuthClientOptions,
  OAuthServer,
  type ServiceAccountKeyJson,
  TokenError,
  type TokenRequestInfo,
} from "./oauth.ts";
import { PersonActions } from "./person.ts";
import { type Delivery, PushChannels } from "./push.ts";
import {
  methodName,
  type QuotaOptions,
  TokenPrincipals,
  UsageCounters,
  UsageLimits,
  type UsageSnapshot,
} from "./quota.ts";
import { findInstance } from "./series.ts";
import { type AccessRole, type CalendarRecord, CalendarStore, type KindSwitches, type WriteCounters } from "./store.ts";

export type { FaultSpec } from "./faults.ts";
export type { ServiceAccountKeyJson } from "./oauth.ts";
export type { Delivery } from "./push.ts";
export { GOOGLE_PATCH_COST, GOOGLE_QUOTAS, type QuotaOptions, type UsageSnapshot } from "./quota.ts";
export type { KindSwitches, WriteCounters } from "./store.ts";

export interface CalendarEmulatorOptions {
  port?: number;
  host?: string;
  /** Drives token expiry, `updated`/`created` and channel expiry (default: the system clock). */
  clock?: Clock;
  accessTokenTtlSeconds?: number;
  /** Send an "exists" notification to the calendar's channels after every change (default off: call notify()). */
  autoNotify?: boolean;
  /** Google's per-minute quotas are on by default with Google's numbers; override them or lift one with `false`. */
  limits?: QuotaOptions;
  /** Delay of every API answer in ms (wall clock), default 0; `latencyJitterMs` adds up to that much at random. */
  latencyMs?: number;
  latencyJitterMs?: number;
}

export interface RequestLogEntry {
  at: number;
  method: string;
  path: string;
  query: Record<string, string | string[]>;
  status: number;
  /** The token's subject (API) or the subject asked for (token endpoint). */
  subject?: string;
  quotaUser?: string;
  sendUpdates?: string;
  ifMatch?: string;
  /** Token endpoint: grant_type, and the service account or OAuth client asking. */
  grantType?: string;
  clientEmail?: string;
  clientId?: string;
  /** Token endpoint, JWT bearer: the assertion's `aud`. */
  audience?: string;
  /** The answer was withheld by dropResponseNext (the write happened). */
  dropped?: boolean;
  /** API: the user the request was charged to (quotaUser, else whom the token stands for), and the units. */
  chargedTo?: string;
  units?: number;
}

const API_PREFIX = "/calendar/v3/";

export class CalendarEmulator {
  readonly faults: Faults;
  /** Google's per-minute quotas (on by default); set a field to undefined to lift it at run time. */
  readonly limits: UsageLimits;
  readonly requestLog: RequestLogEntry[] = [];
  autoNotify: boolean;
  readonly #server: Server;
  readonly #clock: Clock;
  readonly #store: CalendarStore;
  readonly #lister: EventLister;
  readonly #push: PushChannels;
  readonly #oauth: OAuthServer;
  readonly #consent: ConsentPage;
  readonly #person: PersonActions;
  readonly #principals = new TokenPrincipals();
  readonly #usage = new UsageCounters();
  #origin = "";

  constructor(options: CalendarEmulatorOptions = {}) {
    this.#clock = options.clock ?? systemClock;
    this.#store = new CalendarStore(this.#clock);
    this.#lister = new EventLister(this.#store);
    this.#push = new PushChannels(this.#clock);
    this.#oauth = new OAuthServer(this.#clock, () => this.tokenUrl);
    this.#consent = new ConsentPage(this.#oauth, this.#clock);
    this.#person = new PersonActions(this.#store);
    if (options.accessTokenTtlSeconds) this.#oauth.accessTokenTtlSeconds = options.accessTokenTtlSeconds;
    this.limits = new UsageLimits(options.limits);
    this.faults = new Faults({
      ...(options.latencyMs !== undefined ? { ms: options.latencyMs } : {}),
      ...(options.latencyJitterMs !== undefined ? { jitterMs: options.latencyJitterMs } : {}),
    });
    this.autoNotify = options.autoNotify ?? false;
    this.#server = createServer((req, res) => {
      this.#handle(req, res).catch((err: unknown) => {
        if (!res.headersSent) sendJson(res, 500, googleErrorBody(500, "backendError", (err as Error).message));
      });
    });
  }

  async listen(port = 0, host = "127.0.0.1"): Promise<this> {
    await new Promise<void>((resolve, reject) => {
      this.#server.once("error", reject);
      this.#server.listen(port, host, () => resolve());
    });
    const { port: actual } = this.#server.address() as AddressInfo;
    this.#origin = `http://${host}:${actual}`;
    return this;
  }

  /** Pass as `rootUrl`/`api_root`. */
  get rootUrl(): string {
    return `${this.#origin}/`;
  }
  get tokenUrl(): string {
    return `${this.#origin}/token`;
  }
  get authUrl(): string {
    return `${this.#origin}/authorize`;
  }

  // --- credentials -------------------------------------------------------------------------------------------------

  /** A fresh service-account key whose assertions this emulator accepts (delegation allowed unless told otherwise). */
  registerServiceAccount(options: { clientEmail?: string; delegation?: boolean } = {}): ServiceAccountKeyJson {
    return this.#oauth.registerServiceAccount(options);
  }
  /**
   * An OAuth client as the Cloud console makes it: a Desktop app (default; loopback redirects) or a Web application
   * (only `redirectUris`), optionally with its consent screen in "Testing" (refresh tokens die after 7 days).
   */
  registerOAuthClient(options: OAuthClientOptions = {}) {
    return this.#oauth.registerOAuthClient(options);
  }
  /** A refresh token as a finished consent would give it (the calendar scope unless `scopes` says otherwise). */
  issueRefreshToken(subject: string, clientId?: string, scopes?: string[]): string {
    return this.#oauth.issueRefreshToken(subject, clientId, scopes);
  }
  /** Revokes tokens of `subject` (or everyone): the API answers 401, the token endpoint invalid_grant/unauthorized_client. */
  revokeTokens(subject?: string): void {
    this.#oauth.revokeTokens(subject);
  }
  restoreAccess(subject?: string): void {
    this.#oauth.restoreAccess(subject);
  }
  /** Access tokens answer 401 from now on, while refresh tokens and assertions still work (a token revoked early). */
  expireAccessTokens(subject?: string): void {
    this.#oauth.expireAccessTokens(subject);
  }
  /** Token responses without expires_in (the emulator still expires tokens after accessTokenTtlSeconds). */
  set omitExpiresIn(value: boolean) {
    this.#oauth.omitExpiresIn = value;
  }
  /** Who is signed in to Google in the browser that opens the consent page (login_hint names another account). */
  get consent(): { subject: string } {
    return this.#consent;
  }
  /**
   * The Cloud project behind every client and key of this emulator. With `calendarApiEnabled` false every API call
   * answers 403 accessNotConfigured, as Google does while the Calendar API is not enabled in the project.
   */
  get project(): { number: string; calendarApiEnabled: boolean } {
    return this.#oauth.project;
  }

  // --- data ----------------------------------------------------------------------------------------------------------

  createCalendar(id: string, ownerSubject: string, options: { summary?: string; timeZone?: string } = {}): void {
    this.#store.createCalendar(id, ownerSubject, options);
  }
  /**
   * A person deletes a secondary calendar in its settings (calendars.delete): from then on Google answers 404 notFound
   * for it and for every event in it, and it leaves everyone's calendar list.
   */
  deleteCalendar(id: string): void {
    this.#calendar(id);
    this.#store.calendars.delete(id);
  }
  shareCalendar(id: string, subject: string, role: AccessRole = "writer"): void {
    this.#calendar(id).acl.set(subject, role);
  }
  /**
   * A person removes a user's share in the calendar's settings. From then on Google answers that user 404 notFound for
   * the calendar and for every event in it, as for a calendar that does not exist (the project's notes: "An id that
   * never existed: 404 notFound (also: calendar not accessible)").
   */
  unshareCalendar(id: string, subject: string): void {
    this.#calendar(id).acl.delete(subject);
  }
  /**
   * The calendar is not on `subject`'s calendar list, although shared with them: they removed it from the list
   * (calendarList.delete: "Removes a calendar from the user's calendar list"), or never added a calendar shared with
   * them (Google's Calendar API background, developers.google.com/workspace/calendar/api/resource_types: the
   * CalendarList resource "represents metadata for an individual calendar that appears on the user's calendar list in
   * the UI"). calendars.get and events still answer as the share allows; calendarList.get answers 404 notFound, and
   * with it the accessRole it would carry. shareCalendar does not put it back.
   */
  removeFromCalendarList(id: string, subject: string): void {
    this.#calendar(id).unlisted.add(subject);
  }
  /**
   * A person shares the calendar beyond single users in its settings: with the public (`default`: "See only
   * free/busy" is freeBusyReader, "See all event details" reader), a domain or a group; `none` removes the rule.
   * acl.list shows it; access through the API stays per user.
   */
  shareCalendarWith(id: string, scope: Omit<ScopeRule, "role">, role: ScopeRule["role"] | "none"): void {
    const scopes = this.#calendar(id).scopes;
    if (role === "none") scopes.delete(ruleId(scope));
    else scopes.set(ruleId(scope), { ...scope, role });
  }
  /**
   * Every stored event of the calendar as Google would return it, deleted ones (status "cancelled") included: series
   * masters and their stored exceptions, not the instances a series makes (see event()).
   */
  events(calendarId: string): Record<string, unknown>[] {
    const cal = this.#calendar(calendarId);
    return [...cal.events.values()].map((r) => toResource(r, cal));
  }
  /** The event as events.get returns it (an instance of a series too), or undefined where events.get answers 404. */
  event(calendarId: string, eventId: string): Record<string, unknown> | undefined {
    const cal = this.#calendar(calendarId);
    const rec = findInstance(cal, eventId);
    return rec ? toResource(rec, cal) : undefined;
  }
  /**
   * Kind behaviour a test can switch back on, each something real Google does not do:
   * `restorePersonDeletions` lets an API update bring back an event a person deleted in the UI.
   */
  get kind(): KindSwitches {
    return this.#store.kind;
  }

  /**
   * A person edits an event in Google's UI (patch semantics): etag and `updated` change (not for reminders alone). A
   * drag or a new time changes the time only: `{start: {dateTime}, end: {dateTime}}` without timeZone keeps each end's
   * zone (a wall time without offset is read in it). A timeZone given is the person's pick in the editor's "Time zone"
   * control, the way to change the zone itself. `{start: {date}, end: {date}}` is the "All day" toggle; times given to
   * an all-day event are read in the calendar's zone. person.ts (uiTimes) says what Google does.
   */
  userEdit(calendarId: string, eventId: string, changes: object): Record<string, unknown> {
    const cal = this.#calendar(calendarId);
    const resource = toResource(this.#person.edit(cal, eventId, changes as Record<string, unknown>), cal);
    this.#changed(cal.id);
    return resource;
  }
  /**
   * A person deletes an event in Google's UI (one instance of a series: a cancelled exception). Unlike events.delete,
   * the API cannot bring it back under its id: update and patch answer 403, insert 409, even after purgeDeleted.
   */
  userDelete(calendarId: string, eventId: string): void {
    this.#person.delete(this.#calendar(calendarId), eventId);
    this.#changed(calendarId);
  }
  /** Google's "Undo" right after a deletion in the UI: the event is live again, with a new etag and `updated`. */
  userUndoDelete(calendarId: string, eventId: string): Record<string, unknown> {
    const cal = this.#calendar(calendarId);
    const resource = toResource(this.#person.undoDelete(cal, eventId), cal);
    this.#changed(cal.id);
    return resource;
  }
  /** Restore from the Bin (within 30 days of the deletion, before purgeDeleted): live again, as after Undo. */
  userRestoreFromBin(calendarId: string, eventId: string): Record<string, unknown> {
    const cal = this.#calendar(calendarId);
    const resource = toResource(this.#person.restoreFromBin(cal, eventId), cal);
    this.#changed(cal.id);
    return resource;
  }
  /** "Change calendar" in the UI (events.move): `from` keeps a cancelled entry of which only the id is guaranteed. */
  userMove(fromCalendarId: string, eventId: string, toCalendarId: string): Record<string, unknown> {
    const to = this.#calendar(toCalendarId);
    const resource = toResource(this.#person.move(this.#calendar(fromCalendarId), eventId, to), to);
    this.#changed(fromCalendarId);
    this.#changed(toCalendarId);
    return resource;
  }
  /**
   * "This and following events" on the occurrence of series `eventId` that starts at `fromMs`, with `changes`: the
   * series ends before it, and a new one (`<eventId>_R<time>`) goes on from it (person.ts says what Google does).
   */
  userSplitSeries(calendarId: string, eventId: string, fromMs: number, changes: object = {}): Record<string, unknown> {
    const cal = this.#calendar(calendarId);
    const resource = toResource(
      this.#person.splitSeries(cal, eventId, fromMs, changes as Record<string, unknown>),
      cal,
    );
    this.#changed(cal.id);
    return resource;
  }
  /** A person creates an event of their own. */
  userInsert(calendarId: string, body: object): Record<string, unknown> {
    const cal = this.#calendar(calendarId);
    const resource = toResource(this.#person.insert(cal, body as Record<string, unknown>), cal);
    this.#changed(cal.id);
    return resource;
  }
  /** Google forgets deleted events after a while; this does it now (ids a person deleted stay unusable). */
  purgeDeleted(calendarId: string): number {
    return this.#store.purgeDeleted(this.#calendar(calendarId));
  }
  /** Every sync token issued so far (for one calendar, or all) now answers 410 fullSyncRequired. */
  invalidateSyncTokens(calendarId?: string): void {
    for (const cal of this.#store.calendars.values()) if (!calendarId || cal.id === calendarId) cal.tokenEpoch += 1;
  }
  get counters(): Readonly<WriteCounters> {
    return this.#store.counters;
  }
  /** API writes accepted (inserts, updates, patches, deletes, moves). */
  get writes(): number {
    const c = this.#store.counters;
    return c.inserts + c.updates + c.patches + c.deletes + c.moves;
  }
  /** What API clients spent: requests and quota units, per user, calendar and method, and usageLimits answers. */
  get usage(): UsageSnapshot {
    return this.#usage.snapshot();
  }
  resetUsage(): void {
    this.#usage.reset();
  }

  // --- push ----------------------------------------------------------------------------------------------------------

  get channels(): ReadonlyMap<string, { id: string; calendarId: string; address: string; expiration: number }> {
    return this.#push.channels;
  }
  get deliveries(): readonly Delivery[] {
    return this.#push.deliveries;
  }
  /** Posts an "exists" notification to every live channel on the calendar. */
  notify(calendarId: string): Promise<Delivery[]> {
    return this.#push.notify(calendarId);
  }
  /** Waits until notifications in flight were answered. */
  settleNotifications(): Promise<void> {
    return this.#push.settle();
  }
  set requireHttpsChannels(value: boolean) {
    this.#push.requireHttps = value;
  }
  /** Hosts a watch is refused for (401 push.webhookUrlUnauthorized: domain not verified; see PushChannels). */
  get unverifiedPushHosts(): Set<string> {
    return this.#push.unverifiedHosts;
  }
  /** Whether events.watch answers only after its sync message was answered (default true; see PushChannels). */
  set syncBeforeWatchAnswer(value: boolean) {
    this.#push.syncBeforeAnswer = value;
  }
  /** Whether each channel gets a resourceId of its own (default false: one per calendar; see PushChannels). */
  set resourceIdPerChannel(value: boolean) {
    this.#push.resourceIdPerChannel = value;
  }

  async close(): Promise<void> {
    this.#push.close();
    await this.#push.settle();
    this.#server.closeAllConnections();
    await new Promise<void>((resolve) => this.#server.close(() => resolve()));
  }

  // --- HTTP ----------------------------------------------------------------------------------------------------------

  #calendar(id: string): CalendarRecord {
    const cal = this.#store.calendars.get(id);
    if (!cal) throw new Error(`emulator: no calendar ${id} (createCalendar first)`);
    return cal;
  }

  #changed(calendarId: string): void {
    // Guests' copies that followed the change (invitations.ts) are changes of their calendars too.
    const copies = [...this.#store.touched].filter((id) => id !== calendarId);
    this.#store.touched.clear();
    if (!this.autoNotify) return;
    void this.#push.notify(calendarId);
    for (const id of copies) void this.#push.notify(id);
  }

  async #handle(req: IncomingMessage, res: ServerResponse): Promise<void> {
    const url = new URL(req.url ?? "/", this.#origin || "http://127.0.0.1");
    const method = req.method ?? "GET";
    const entry: RequestLogEntry = {
      at: this.#clock.now(),
      method,
      path: url.pathname,
      query: queryOf(url),
      status: 0,
    };
    this.requestLog.push(entry);
    const raw = await readBody(req);
    if (url.pathname === "/token" && method === "POST") return this.#token(raw, entry, res);
    const consent =
      CONSENT_PATHS.includes(url.pathname) && method === "GET"
        ? this.#consent.show(url)
        : url.pathname === DECISION_PATH && method === "POST"
          ? this.#consent.decide(new URLSearchParams(raw))
          : undefined;
    if (consent) {
      entry.status = consent.status;
      if (consent.location) res.writeHead(consent.status, { location: consent.location }).end();
      else res.writeHead(consent.status, { "content-type": "text/html; charset=utf-8" }).end(consent.html ?? "");
      return;
    }
    if (!url.pathname.startsWith(API_PREFIX)) {
      entry.status = 404;
      return sendError(res, new ApiError(404, "notFound"));
    }
    await this.#api(url, method, raw, entry, req, res);
  }

  #token(raw: string, entry: RequestLogEntry, res: ServerResponse): void {
    const info: TokenRequestInfo = { grantType: "" };
    const fault = this.faults.take("token", "POST /token");
    try {
      if (fault) throw new TokenError(fault.status, fault.reason, fault.message ?? fault.reason);
      const body = this.#oauth.token(new URLSearchParams(raw), info);
      this.#notePrincipal(body, info);
      entry.status = 200;
      sendJson(res, 200, body, { "cache-control": "no-store" });
    } catch (err) {
      if (!(err instanceof TokenError)) throw err;
      entry.status = err.status;
      const headers: Record<string, string> = {};
      if (fault?.retryAfter !== undefined) headers["retry-after"] = String(fault.retryAfter);
      sendJson(res, err.status, { error: err.error, error_description: err.message }, headers);
    } finally {
      Object.assign(entry, {
        grantType: info.grantType,
        ...(info.subject ? { subject: info.subject } : {}),
        ...(info.clientEmail ? { clientEmail: info.clientEmail } : {}),
        ...(info.clientId ? { clientId: info.clientId } : {}),
        ...(info.audience ? { audience: info.audience } : {}),
      });
    }
  }

  /** A service account's token is charged to the service account, also when it impersonates someone (quota.ts). */
  #notePrincipal(body: Record<string, unknown>, info: TokenRequestInfo): void {
    if (info.grantType !== JWT_BEARER || !info.clientEmail || typeof body.access_token !== "string") return;
    this.#principals.note(body.access_token, {
      quotaUser: info.clientEmail,
      serviceAccountItself: info.subject === undefined,
    });
  }

  async #api(url: URL, method: string, raw: string, entry: RequestLogEntry, req: IncomingMessage, res: ServerResponse) {
    const quotaUser = url.searchParams.get("quotaUser") ?? undefined;
    const sendUpdates = url.searchParams.get("sendUpdates") ?? undefined;
    const ifMatch = req.headers["if-match"];
    Object.assign(entry, {
      ...(quotaUser ? { quotaUser } : {}),
      ...(sendUpdates ? { sendUpdates } : {}),
      ...(ifMatch ? { ifMatch } : {}),
    });
    const hold = this.faults.takeHold(`${method} ${url.pathname}`);
    if (hold) await hold;
    const delay = this.faults.delay();
    if (delay > 0) await new Promise((r) => setTimeout(r, delay));
    const segments = url.pathname.slice(API_PREFIX.length).split("/").filter(Boolean).map(decodeURIComponent);
    let status = 200;
    let body: unknown;
    let usageLimit = false;
    let answerAfter: Promise<unknown> | undefined;
    const headers: Record<string, string> = {};
    try {
      const subject = this.#oauth.authorizeApi(req.headers.authorization, method, url.pathname);
      entry.subject = subject;
      // Google's system parameters: quotaUser "can be any arbitrary string assigned to a user, but should not exceed 40
      // characters". What Google does with a longer one is not written; the emulator refuses it, so a client that
      // sends one finds out here rather than from a quota charged to someone else.
      if (quotaUser !== undefined && quotaUser.length > 40) {
        throw new ApiError(400, "invalid", "Invalid quotaUser: longer than 40 characters");
      }
      const principal = this.#principals.of(req.headers.authorization);
      entry.chargedTo = quotaUser ?? principal?.quotaUser ?? subject;
      const cost = method === "PATCH" ? this.limits.patchCost : 1;
      const writesTo =
        method !== "GET" && segments[0] === "calendars" && segments[2] === "events" ? segments[1] : undefined;
      const limited = this.limits.check(entry.chargedTo, this.#clock.now(), cost, writesTo);
      if (!limited) entry.units = cost;
      const fault = limited ?? this.faults.take("api", `${method} ${url.pathname}`);
      if (fault?.retryAfter !== undefined) headers["retry-after"] = String(fault.retryAfter);
      if (fault) throw new ApiError(fault.status, fault.reason, fault.message);
      const answer = handleApi(
        { store: this.#store, lister: this.#lister, push: this.#push, faults: this.faults },
        {
          method,
          segments,
          query: entry.query,
          body: parseJsonBody(raw),
          subject,
          ifMatch,
          serviceAccountItself: principal?.serviceAccountItself ?? false,
        },
      );
      status = answer.status;
      body = answer.body;
      answerAfter = answer.answerAfter;
      for (const id of answer.changed ?? []) this.#changed(id);
    } catch (err) {
      if (!(err instanceof ApiError)) throw err;
      status = err.status;
      const error = googleErrorBody(err.status, err.reason, err.message, err.extra, err.domain);
      usageLimit = error.error.errors[0]?.domain === "usageLimits";
      body = error;
    }
    entry.status = status;
    this.#usage.record({
      method: methodName(method, segments),
      units: entry.units ?? 0,
      usageLimit,
      ...(entry.chargedTo !== undefined ? { user: entry.chargedTo } : {}),
      ...(segments[0] === "calendars" && segments[1] ? { calendarId: segments[1] } : {}),
    });
    await answerAfter;
    if (this.faults.takeDrop()) {
      entry.dropped = true;
      req.socket.destroy();
      return;
    }
    if (body === undefined) sendEmpty(res, status);
    else sendJson(res, status, body, headers);
  }
}

/** Starts an emulator on 127.0.0.1 and a free port (or `options.port`). */
export async function startCalendarEmulator(options: CalendarEmulatorOptions = {}): Promise<CalendarEmulator> {
  return new CalendarEmulator(options).listen(options.port ?? 0, options.host ?? "127.0.0.1");
}
