// Owns the daemon's calendar gateways, one per therapist: credentials from the configuration or the store, the reason
// a therapist has none, and taking up a therapist's new credentials at once after they (re)connect (no restart).
import { Registry } from "prom-client";
import { type CalendarAuth, createCalendarAuth } from "../calendar/auth.ts";
import { reconnectRoute } from "../calendar/credential-hints.ts";
import { CalendarGateway } from "../calendar/gateway.ts";
import type { GoogleQuotaGate } from "../calendar/quota-gate.ts";
import type { Clock } from "../clock.ts";
import { type Config, serviceAccountOwnCalendar, type TherapistConfig } from "../config/schema.ts";
import type { Logger } from "../log.ts";
import type { CredentialStore } from "../store/secrets.ts";
import type { Store } from "../store/store.ts";
import { describeError } from "../sync/errors.ts";
import { sameCalendarId } from "../sync/placement.ts";
import type { DaemonMetrics } from "./metrics.ts";
import { sharedCalendarConflicts, statedCalendar } from "./same-calendar.ts";

export interface TherapistCalendarsOptions {
  config: Config;
  store: Store;
  /** Where refresh tokens from `calbridge authorize` and the connect pages are kept (encrypted). */
  credentials: CredentialStore;
  clock: Clock;
  logger: Logger;
  registry: Registry;
  metrics: DaemonMetrics;
  /** Google's quotas, shared by every therapist's gateway (google.quota). */
  quota?: GoogleQuotaGate;
}

/** Gateways made for a reload before it is applied, so that applying it is one synchronous swap. */
export interface StagedCalendars {
  made: Map<string, CalendarGateway>;
  /** Therapists whose credentials cannot be built, with the reason. */
  failed: Map<string, string>;
  /** Therapists whose gateway goes: no longer mapped, or replaced by one in `made` or `failed`. */
  dropped: Set<string>;
}

/** Whether a therapist's gateway must be made again: another calendar, delegated account or credentials. */
export function gatewayChanged(a: TherapistConfig, b: TherapistConfig): boolean {
  return (
    a.calendar_id !== b.calendar_id ||
    a.impersonate !== b.impersonate ||
    JSON.stringify(a.auth ?? null) !== JSON.stringify(b.auth ?? null)
  );
}

/** What taking up new credentials did: a gateway made for a therapist who had none, new credentials, or nothing. */
export type InstallResult = "created" | "updated" | "unchanged";

/** The command that gives an OAuth therapist credentials, as the configuration offers it. */
export function connectCommand(config: Config, therapistId: string): string {
  return config.connect
    ? `calbridge invite --therapist ${therapistId}`
    : `calbridge authorize --therapist ${therapistId}`;
}

export function usesOAuth(config: Config, t: TherapistConfig): boolean {
  return (t.auth?.type ?? config.google.auth.type) === "oauth";
}

/** How many calendars are resolved at once (calendars.get each, with the gateway's retries). */
const RESOLVE_PARALLEL = 4;
/** The start of the reason an OAuth `primary` therapist is not synced yet (/status, doctor, the log). */
export const NOT_IDENTIFIED = "calendar not identified yet: ";

export class TherapistCalendars {
  /** therapist id → gateway; the engine holds this very map, so a gateway added here is used at once. */
  readonly map = new Map<string, CalendarGateway>();
  /** therapist id → why there is no gateway. */
  readonly errors = new Map<string, string>();
  /** therapist id → the real id of the calendar its mapping reaches (`primary` resolved), once known. */
  readonly resolved = new Map<string, string>();
  /**
   * therapist id → the calendar Google answered for an OAuth `primary` of theirs, with the credentials (auth) it was
   * asked with: kept while those stay, so a mapping that names that calendar by its address is known for the same one.
   */
  readonly #own = new Map<string, { auth: string; id: string }>();
  /** Therapists refused because their calendar is another mapped therapist's (same-calendar.ts), with why. */
  readonly #shared = new Map<string, string>();
  /** OAuth `primary` gateways whose calendar is not known yet: not synced (not in `map`) until it is, and no other's. */
  readonly #held = new Map<string, CalendarGateway>();
  /** The calendars.get in flight for a gateway: verify, install and a reload never ask twice at once. */
  readonly #inflight = new Map<CalendarGateway, Promise<string>>();
  readonly #o: TherapistCalendarsOptions;

  constructor(options: TherapistCalendarsOptions) {
    this.#o = options;
    options.metrics.credentials.read = () => this.#credentialsOk();
  }

  /**
   * calbridge_therapist_credentials_ok at a scrape, from the state now: each mapped therapist with a gateway (ok unless
   * Google refused its credentials) or without one for a reason (not ok); none for a therapist not known yet.
   */
  *#credentialsOk(): Iterable<[string, boolean]> {
    for (const { therapist_id: id } of this.#o.config.therapists) {
      const gw = this.map.get(id);
      if (this.errors.has(id)) yield [id, false];
      else if (gw) yield [id, gw.health().credentials !== "broken"];
    }
  }

  /**
   * Makes a gateway for every therapist whose credentials can be built; records why for the others. Makes no call to
   * Google: an OAuth `primary` calendar is held until verify() tells which calendar it is.
   */
  async open(): Promise<void> {
    for (const t of this.#o.config.therapists) {
      try {
        this.#place(t, this.#gateway(t, await this.#mappedAuth(t)));
      } catch (err) {
        this.errors.set(t.therapist_id, describeError(err));
        this.#o.logger.error(
          { therapist_id: t.therapist_id, err: describeError(err) },
          "therapist's calendar is not usable; its appointments wait",
        );
      }
    }
    this.#settle();
  }

  /**
   * Resolves the calendar of every gateway not resolved yet (in parallel, a few at a time; a failure is tried again
   * at the next call), takes in each held therapist whose calendar is now known and no other mapped therapist's, and
   * takes out (or holds) each therapist whose calendar is another's: nothing is read or written in it for them.
   * Answers the therapists taken in (synced from now on). Called at start (not awaited by a daemon), after a reload
   * and at every credentials check.
   */
  async verify(): Promise<string[]> {
    const todo = [...this.map, ...this.#held].filter(([id]) => !this.resolved.has(id));
    let next = 0;
    const worker = async () => {
      while (next < todo.length) {
        const [id, gw] = todo[next++]!;
        await this.#resolve(id, gw);
      }
    };
    await Promise.all(Array.from({ length: Math.min(RESOLVE_PARALLEL, todo.length) }, worker));
    const { takenIn, lifted } = this.#settle();
    for (const id of lifted) if (await this.#rebuild(id)) takenIn.push(id);
    return takenIn;
  }

  /** The therapist's gateway held until its calendar is identified (not synced), if any. */
  held(therapistId: string): CalendarGateway | undefined {
    return this.#held.get(therapistId);
  }

  /** The resolved calendars of the therapists not refused as on another therapist's calendar (connect pages). */
  inUse(): Map<string, string> {
    return new Map([...this.resolved].filter(([id]) => !this.#shared.has(id)));
  }

  /**
   * Whether a stray event in the therapist's calendar may belong to another mapped therapist: the calendar's own real
   * id is not known yet, or it is also another's (by its real id or as the configuration names it). A therapist whose
   * calendar is not known yet is not synced (held), so has written nothing there this run. The stray pass then
   * removes nothing from it.
   */
  sharesCalendar(therapistId: string): boolean {
    const { therapists, google } = this.#o.config;
    const known = (t: TherapistConfig) => this.resolved.get(t.therapist_id) ?? statedCalendar(t, google.auth);
    const me = therapists.find((t) => t.therapist_id === therapistId);
    const mine = me ? known(me) : undefined;
    if (!mine) return true;
    return therapists.some((o) => o.therapist_id !== therapistId && known(o)?.toLowerCase() === mine.toLowerCase());
  }

  /**
   * What the therapist's calendar is known as besides its calendar_id (Mapping.calendarNames): its real id, once
   * known, and `primary` when Google answered this very calendar for the account's `primary` with these credentials.
   */
  calendarNames(therapistId: string): string[] {
    const t = this.#o.config.therapists.find((x) => x.therapist_id === therapistId);
    const real = t && (this.resolved.get(therapistId) ?? statedCalendar(t, this.#o.config.google.auth));
    if (!t || !real) return [];
    const own = this.#ownCalendar(t);
    return own !== undefined && sameCalendarId(own, real) ? [real, "primary"] : [real];
  }

  /**
   * For a reload, before it is applied: whether `now` reaches the very Google calendar `was` (mapped now) does, as
   * far as known (the real id of `was`'s calendar; `now`'s from the configuration, or for an OAuth `primary` what Google
   * answered for it with the same credentials). Not known is not the same: the relocation asks Google before it deletes.
   */
  sameCalendar(was: TherapistConfig, now: TherapistConfig): boolean {
    const auth = this.#o.config.google.auth;
    const before = this.resolved.get(was.therapist_id) ?? statedCalendar(was, auth);
    const after = statedCalendar(now, auth) ?? this.#ownCalendar(now);
    return before !== undefined && after !== undefined && sameCalendarId(before, after);
  }

  /** What Google answered for the therapist's OAuth `primary`, when asked with the credentials `t` names. */
  #ownCalendar(t: TherapistConfig): string | undefined {
    const own = this.#own.get(t.therapist_id);
    return own && own.auth === JSON.stringify(t.auth ?? null) ? own.id : undefined;
  }

  /** A new gateway: synced at once when the configuration names its calendar, else held until it is resolved. */
  #place(t: TherapistConfig, gw: CalendarGateway): void {
    const id = t.therapist_id;
    this.resolved.delete(id);
    const stated = statedCalendar(t, this.#o.config.google.auth);
    if (stated !== undefined) {
      this.resolved.set(id, stated);
      this.map.set(id, gw);
      this.errors.delete(id);
      return;
    }
    this.#hold(id, gw, "its Google calendar has not been asked yet");
  }

  #hold(id: string, gw: CalendarGateway, why: string): void {
    if (this.map.get(id) === gw) this.map.delete(id);
    this.#held.set(id, gw);
    this.errors.set(
      id,
      `${NOT_IDENTIFIED}${why}; its appointments wait until Google tells (tried again at every credentials check)`,
    );
  }

  async #resolve(therapistId: string, gw: CalendarGateway): Promise<void> {
    const t = this.#o.config.therapists.find((x) => x.therapist_id === therapistId);
    if (!t) return;
    const stated = statedCalendar(t, this.#o.config.google.auth);
    if (stated) {
      this.resolved.set(therapistId, stated);
      return;
    }
    const mine = () => this.map.get(therapistId) === gw || this.#held.get(therapistId) === gw;
    let pending = this.#inflight.get(gw);
    if (!pending) {
      pending = gw.ownCalendarId();
      this.#inflight.set(gw, pending);
      void pending.finally(() => this.#inflight.delete(gw)).catch(() => {});
    }
    try {
      const id = await pending;
      if (!mine()) return;
      this.resolved.set(therapistId, id);
      if (t.calendar_id === "primary") this.#own.set(therapistId, { auth: JSON.stringify(t.auth ?? null), id });
    } catch (err) {
      if (this.#held.get(therapistId) === gw) this.#hold(therapistId, gw, describeError(err));
      this.#o.logger.warn(
        { therapist_id: therapistId, calendar_id: t.calendar_id, err: describeError(err) },
        "which Google calendar this therapist's mapping reaches could not be told; not synced until it can",
      );
    }
  }

  /**
   * Takes out the gateways of therapists on another mapped therapist's calendar, takes in the held ones whose calendar
   * is known and free. Answers those taken in, and the therapists whose refusal lifted with no gateway left (verify
   * makes one again).
   */
  #settle(): { takenIn: string[]; lifted: string[] } {
    const { therapists, google } = this.#o.config;
    const refused = sharedCalendarConflicts(therapists, this.resolved, google.auth);
    for (const [therapistId, why] of refused) {
      const gw = this.map.get(therapistId) ?? this.#held.get(therapistId);
      if (gw) {
        this.map.delete(therapistId);
        this.#held.delete(therapistId);
        gw.retire();
        gw.close();
      }
      if (this.#shared.get(therapistId) !== why) {
        this.#o.logger.error(
          { therapist_id: therapistId, err: why },
          "therapist's calendar is another therapist's calendar: nothing is synced in it for this therapist",
        );
      }
      this.#shared.set(therapistId, why);
      this.errors.set(therapistId, why);
    }
    const lifted: string[] = [];
    for (const therapistId of [...this.#shared.keys()]) {
      if (refused.has(therapistId)) continue;
      // No gateway left: stays listed until verify makes one again (#rebuild).
      if (!this.map.has(therapistId) && !this.#held.has(therapistId)) {
        lifted.push(therapistId);
        continue;
      }
      this.#shared.delete(therapistId);
      if (this.map.has(therapistId)) this.errors.delete(therapistId);
    }
    const takenIn: string[] = [];
    for (const [therapistId, gw] of [...this.#held]) {
      if (!this.resolved.has(therapistId)) continue;
      this.#held.delete(therapistId);
      this.map.set(therapistId, gw);
      this.errors.delete(therapistId);
      takenIn.push(therapistId);
      this.#o.logger.info(
        { therapist_id: therapistId, calendar_id: this.resolved.get(therapistId) },
        "therapist's Google calendar identified (no other therapist's): its appointments are synced from now on",
      );
    }
    return { takenIn, lifted };
  }

  /** A therapist refused only because of another is no longer: a gateway again (its calendar resolved anew). */
  async #rebuild(therapistId: string): Promise<boolean> {
    const t = this.#o.config.therapists.find((x) => x.therapist_id === therapistId);
    if (!t) return false;
    let gw: CalendarGateway;
    try {
      gw = this.#gateway(t, await this.#mappedAuth(t));
    } catch (err) {
      if (this.#shared.delete(therapistId)) this.errors.set(therapistId, describeError(err));
      return false;
    }
    const taken = this.map.has(therapistId) || this.#held.has(therapistId);
    if (!this.#unchangedSince(t) || taken || !this.#shared.has(therapistId)) {
      gw.close();
      return false;
    }
    this.#shared.delete(therapistId);
    this.#place(t, gw);
    if (!this.map.has(therapistId)) {
      await this.#resolve(therapistId, gw);
      if (!this.#settle().takenIn.includes(therapistId)) return false;
    }
    this.#o.logger.info(
      { therapist_id: therapistId },
      "therapist's calendar is no longer another therapist's: its appointments are synced again",
    );
    return true;
  }

  /**
   * Takes up a therapist's stored credentials (default: install); a daemon sets it to take them up as a reconnect does
   * (the leader also backfills). Called before a broken gateway's probe and by the daemon's credentials check.
   */
  takeUp: (therapistId: string) => Promise<unknown> = (therapistId) => this.install(therapistId);

  /**
   * The therapist's stored refresh token is new (a connect or authorize just stored it): the gateway signs in with it
   * from now on and its broken state clears; a therapist who had no gateway gets one. A therapist a reload unmapped
   * (or gave other credentials) while the token was read is left to the reload: nothing is made for them here.
   */
  async install(therapistId: string): Promise<InstallResult> {
    const t = this.#storedTokenUser(therapistId);
    if (!t) return "unchanged";
    const stored = await this.#o.credentials.loadRefreshToken(therapistId);
    const token = stored?.token;
    if (!token || !this.#unchangedSince(t)) return "unchanged";
    const fields = { therapist_id: therapistId, source: stored.meta.source ?? "unknown" };
    const gw = this.map.get(therapistId) ?? this.#held.get(therapistId);
    if (gw) {
      if (gw.usesRefreshToken(token)) return "unchanged";
      const wasSynced = this.map.get(therapistId) === gw;
      this.#own.delete(therapistId); // maybe another Google account: its `primary` is asked again
      gw.useRefreshToken(token);
      // Maybe another Google account: not synced until its calendar is resolved again (no other therapist's).
      this.#place(t, gw);
      await this.#resolve(therapistId, gw);
      this.#settle();
      if (this.map.get(therapistId) !== gw) return "unchanged";
      this.#o.logger.info(fields, "new Google credentials in use");
      return wasSynced ? "updated" : "created";
    }
    const made = this.#gateway(t, await this.#auth(t));
    if (!this.#unchangedSince(t) || this.map.has(therapistId) || this.#held.has(therapistId)) {
      made.close();
      return "unchanged";
    }
    // Not synced before its calendar is known to be no other mapped therapist's.
    this.#shared.delete(therapistId);
    this.#own.delete(therapistId);
    this.#place(t, made);
    await this.#resolve(therapistId, made);
    this.#settle();
    if (this.map.get(therapistId) !== made) return "unchanged";
    this.#o.logger.info(fields, "Google calendar connected: its appointments are synced from now on");
    return "created";
  }

  /**
   * OAuth therapists whose credentials come from the store and are not usable now (none could be loaded, or Google
   * refuses them): the ones a token stored by another process may fix. Service-account therapists and those with a
   * token in the file are never among them.
   */
  waitingForCredentials(): string[] {
    return this.#o.config.therapists
      .filter((t) => this.#storedTokenUser(t.therapist_id))
      .map((t) => t.therapist_id)
      .filter((id) => {
        const gw = this.map.get(id) ?? this.#held.get(id);
        return !gw || gw.health().credentials === "broken";
      });
  }

  /** The mapped therapist, when their credentials are an OAuth refresh token from the store. */
  #storedTokenUser(therapistId: string): TherapistConfig | undefined {
    const t = this.#o.config.therapists.find((x) => x.therapist_id === therapistId);
    return t && this.#takesStoredToken(t) ? t : undefined;
  }

  /** OAuth with no refresh token in the file: a token in the file wins over a stored one, here as at start. */
  #takesStoredToken(t: TherapistConfig): boolean {
    return usesOAuth(this.#o.config, t) && !(t.auth?.type === "oauth" && t.auth.refresh_token);
  }

  /** The therapist is still mapped with the same calendar and credentials as `t` (no reload changed them meanwhile). */
  #unchangedSince(t: TherapistConfig): boolean {
    const now = this.#o.config.therapists.find((x) => x.therapist_id === t.therapist_id);
    return now !== undefined && !gatewayChanged(t, now);
  }

  /**
   * Makes the gateways a new mapping needs (added therapists, and those with another calendar or other credentials);
   * nothing changes until swap().
   */
  async stage(previous: readonly TherapistConfig[], next: readonly TherapistConfig[]): Promise<StagedCalendars> {
    const before = new Map(previous.map((t) => [t.therapist_id, t]));
    const staged: StagedCalendars = { made: new Map(), failed: new Map(), dropped: new Set() };
    const kept = new Set(next.map((t) => t.therapist_id));
    for (const id of before.keys()) if (!kept.has(id)) staged.dropped.add(id);
    for (const t of next) {
      const old = before.get(t.therapist_id);
      if (old && !gatewayChanged(old, t)) continue;
      if (old) staged.dropped.add(t.therapist_id);
      try {
        staged.made.set(t.therapist_id, this.#gateway(t, await this.#mappedAuth(t)));
      } catch (err) {
        staged.failed.set(t.therapist_id, describeError(err));
      }
    }
    return staged;
  }

  /**
   * Applies a staged change at once (the reload calls it between syncs); answers the gateways it took out. Their
   * therapists' per-therapist series go from /metrics first, so a removed therapist leaves no alert firing and a
   * replacement gateway starts without series, as at start-up (therapist_credentials_ok is read from the new state at
   * the next scrape: none for a removed therapist).
   */
  swap(staged: StagedCalendars): Map<string, CalendarGateway> {
    const retired = new Map<string, CalendarGateway>();
    for (const id of staged.dropped) {
      const gw = this.map.get(id);
      if (gw) {
        gw.retire();
        retired.set(id, gw);
      }
      const held = this.#held.get(id);
      if (held) {
        held.retire();
        held.close();
      }
      this.#held.delete(id);
      this.map.delete(id);
      this.errors.delete(id);
      this.resolved.delete(id);
      this.#shared.delete(id);
      if (!this.#o.config.therapists.some((t) => t.therapist_id === id)) this.#own.delete(id);
    }
    for (const [id, gw] of staged.made) {
      const t = this.#o.config.therapists.find((x) => x.therapist_id === id);
      if (t) this.#place(t, gw);
      else this.map.set(id, gw);
    }
    for (const [id, why] of staged.failed) {
      this.errors.set(id, why);
      this.#o.logger.error({ therapist_id: id, err: why }, "therapist's calendar is not usable; its appointments wait");
    }
    this.#settle();
    return retired;
  }

  /**
   * A gateway on another calendar with a therapist's credentials, acting as `subject` under domain-wide delegation:
   * moving events out of a calendar the mapping no longer names, `calbridge purge`. Its metrics are its own (not the
   * therapist's), and a calendar Google does not find there is the caller's to report, not a mapping error.
   */
  async openAt(t: TherapistConfig, calendarId: string, subject: string | undefined): Promise<CalendarGateway> {
    const at: TherapistConfig = { ...t, calendar_id: calendarId };
    if (subject) at.impersonate = subject;
    else delete at.impersonate;
    return this.#gateway(at, await this.#auth(at), new Registry(), true);
  }

  /**
   * A gateway with the credentials that opened a push channel, to stop it once its therapist is no longer mapped (or
   * mapped to another calendar): a mapped therapist's credentials acting as the account that opened it; else the
   * therapist's stored OAuth token, or the service account acting as that account. Undefined when they are gone (no
   * stored token, no service account). Throws when they cannot be built now (the store does not answer, a mapped
   * therapist not connected): tried again later. The caller closes it.
   */
  async forChannel(channel: {
    therapistId: string;
    calendarId?: string;
    subject?: string;
    oauth?: boolean;
  }): Promise<CalendarGateway | undefined> {
    const { config, credentials } = this.#o;
    const mapped = config.therapists.find((t) => t.therapist_id === channel.therapistId);
    const base: TherapistConfig = mapped ?? {
      therapist_id: channel.therapistId,
      calendar_id: channel.calendarId ?? "primary",
      timezone: "UTC",
    };
    const t: TherapistConfig = { ...base, calendar_id: channel.calendarId ?? base.calendar_id };
    const subject = channel.subject ?? mapped?.impersonate;
    if (subject) t.impersonate = subject;
    else delete t.impersonate;
    if (!mapped) {
      // An earlier build's channel does not say: a stored token means the therapist used OAuth.
      const stored = (await credentials.loadRefreshToken(channel.therapistId))?.token;
      const oauth = channel.oauth ?? stored !== undefined;
      if (oauth && (!stored || !config.google.oauth)) return undefined;
      if (!oauth && config.google.auth.type !== "service_account") return undefined;
      t.auth = oauth ? { type: "oauth", refresh_token: stored! } : { type: "service_account" };
    }
    return this.#gateway(t, await this.#auth(t), new Registry());
  }

  /**
   * This replica starts leading: each gateway's standing with Google (credentials, quota pause, missing calendar) is
   * from its last term, or from a standby's few calls, and is found again by the calls made from now on.
   */
  forgetStanding(): void {
    for (const gw of this.map.values()) gw.forgetStanding();
    for (const gw of this.#held.values()) gw.forgetStanding();
  }

  close(): void {
    for (const gw of this.map.values()) gw.close();
    for (const gw of this.#held.values()) gw.close();
  }

  #gateway(
    t: TherapistConfig,
    auth: CalendarAuth,
    registry = this.#o.registry,
    outsideMapping = false,
  ): CalendarGateway {
    const { config, clock, logger } = this.#o;
    const route = reconnectRoute(config, t);
    const gw: CalendarGateway = new CalendarGateway({
      therapistId: t.therapist_id,
      calendarId: t.calendar_id,
      apiRoot: config.google.api_root,
      auth,
      quotaUser: t.therapist_id,
      ...(t.impersonate ? { account: t.impersonate } : {}),
      ...(route ? { reconnect: route } : {}),
      clock,
      logger: logger.child({ component: "calendar", therapist_id: t.therapist_id }),
      registry,
      quotaPauseMs: config.google.quota_pause_seconds * 1000,
      ...(this.#o.quota ? { quota: this.#o.quota } : {}),
      ...(outsideMapping ? { outsideMapping } : {}),
      // Broken credentials are tried again every 10 minutes: a token stored meanwhile by `calbridge authorize` (another
      // process) is read first and taken up, so the try is of it. Only while this gateway is the therapist's.
      ...(this.#takesStoredToken(t)
        ? {
            beforeProbe: async () =>
              this.map.get(t.therapist_id) === gw ? this.#takeUpQuietly(t.therapist_id) : undefined,
          }
        : {}),
    });
    return gw;
  }

  /** takeUp, its failure (the store unreachable, a token that does not decrypt) logged, never thrown. */
  async #takeUpQuietly(therapistId: string): Promise<void> {
    try {
      await this.takeUp(therapistId);
    } catch (err) {
      this.#o.logger.warn(
        { therapist_id: therapistId, err: describeError(err) },
        "stored Google credentials not read; tried again at the next check",
      );
    }
  }

  /**
   * Credentials of a mapped therapist, or the reason there are none: never the service account on its own `primary`
   * calendar (the configuration refuses it; a configuration built in code may not have been checked), which every such
   * therapist would share, each one's events then taken for the others' strays and deleted.
   */
  async #mappedAuth(t: TherapistConfig): Promise<CalendarAuth> {
    const own = serviceAccountOwnCalendar(t, this.#o.config.google.auth);
    if (own) throw new Error(`calendar_id ${own}`);
    return this.#auth(t);
  }

  /** Credentials of one therapist, or the reason there are none. */
  async #auth(t: TherapistConfig): Promise<CalendarAuth> {
    const { config, credentials } = this.#o;
    if (usesOAuth(config, t)) {
      const oauth = config.google.oauth;
      // The configuration refuses an OAuth therapist without it, so only a reload can get here: google.* kept as at start.
      if (!oauth)
        throw new Error(
          "google.oauth is not in the configuration calbridge started with (google.* is read at start only): restart calbridge to take it up for OAuth therapists",
        );
      const configured = t.auth?.type === "oauth" ? t.auth.refresh_token : undefined;
      const refreshToken = configured ?? (await credentials.loadRefreshToken(t.therapist_id))?.token;
      if (!refreshToken) {
        throw new Error(`not connected yet: no OAuth refresh token; run \`${connectCommand(config, t.therapist_id)}\``);
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
}
