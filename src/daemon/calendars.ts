// Owns the daemon's calendar gateways, one per therapist: credentials from the configuration or the store, the reason
// a therapist has none, and taking up a therapist's new credentials at once after they (re)connect (no restart).
import { Registry } from "prom-client";
import { type CalendarAuth, createCalendarAuth } from "../calendar/auth.ts";
import { CalendarGateway } from "../calendar/gateway.ts";
import type { GoogleQuotaGate } from "../calendar/quota-gate.ts";
import type { Clock } from "../clock.ts";
import type { Config, TherapistConfig } from "../config/schema.ts";
import type { Logger } from "../log.ts";
import type { CredentialStore } from "../store/secrets.ts";
import type { Store } from "../store/store.ts";
import { describeError } from "../sync/errors.ts";
import type { DaemonMetrics } from "./metrics.ts";

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

export class TherapistCalendars {
  /** therapist id → gateway; the engine holds this very map, so a gateway added here is used at once. */
  readonly map = new Map<string, CalendarGateway>();
  /** therapist id → why there is no gateway. */
  readonly errors = new Map<string, string>();
  readonly #o: TherapistCalendarsOptions;

  constructor(options: TherapistCalendarsOptions) {
    this.#o = options;
  }

  /** Makes a gateway for every therapist whose credentials can be built; records why for the others. */
  async open(): Promise<void> {
    for (const t of this.#o.config.therapists) {
      try {
        this.map.set(t.therapist_id, this.#gateway(t, await this.#auth(t)));
      } catch (err) {
        this.errors.set(t.therapist_id, describeError(err));
        this.#o.metrics.therapistCredentialsOk.set({ therapist: t.therapist_id }, 0);
        this.#o.logger.error(
          { therapist_id: t.therapist_id, err: describeError(err) },
          "therapist's calendar is not usable; its appointments wait",
        );
      }
    }
  }

  /**
   * The therapist's stored refresh token is new (a connect or authorize just stored it): the gateway signs in with it
   * from now on and its broken state clears; a therapist who had no gateway gets one.
   */
  async install(therapistId: string): Promise<InstallResult> {
    const t = this.#o.config.therapists.find((x) => x.therapist_id === therapistId);
    // A token in the file wins over a stored one, here as at start.
    if (!t || !usesOAuth(this.#o.config, t) || (t.auth?.type === "oauth" && t.auth.refresh_token)) return "unchanged";
    const token = (await this.#o.credentials.loadRefreshToken(therapistId))?.token;
    if (!token) return "unchanged";
    const gw = this.map.get(therapistId);
    if (gw) {
      if (gw.usesRefreshToken(token)) return "unchanged";
      gw.useRefreshToken(token);
      this.#o.logger.info({ therapist_id: therapistId }, "new Google credentials in use");
      return "updated";
    }
    this.map.set(therapistId, this.#gateway(t, await this.#auth(t)));
    this.errors.delete(therapistId);
    this.#o.logger.info(
      { therapist_id: therapistId },
      "Google calendar connected: its appointments are synced from now on",
    );
    return "created";
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
        staged.made.set(t.therapist_id, this.#gateway(t, await this.#auth(t)));
      } catch (err) {
        staged.failed.set(t.therapist_id, describeError(err));
      }
    }
    return staged;
  }

  /**
   * Applies a staged change at once (the reload calls it between syncs); answers the gateways it took out. Their
   * therapists' per-therapist series go from /metrics first, so a removed therapist leaves no alert firing and a
   * replacement gateway starts without series, as at start-up (the status snapshot sets therapist_credentials_ok
   * again for a therapist still mapped).
   */
  swap(staged: StagedCalendars): Map<string, CalendarGateway> {
    const retired = new Map<string, CalendarGateway>();
    for (const id of staged.dropped) {
      const gw = this.map.get(id);
      if (gw) {
        gw.retire();
        retired.set(id, gw);
      }
      this.map.delete(id);
      this.errors.delete(id);
      this.#o.metrics.therapistCredentialsOk.remove({ therapist: id });
    }
    for (const [id, gw] of staged.made) this.map.set(id, gw);
    for (const [id, why] of staged.failed) {
      this.errors.set(id, why);
      this.#o.metrics.therapistCredentialsOk.set({ therapist: id }, 0);
      this.#o.logger.error({ therapist_id: id, err: why }, "therapist's calendar is not usable; its appointments wait");
    }
    return retired;
  }

  /**
   * A gateway on another calendar with a therapist's credentials, acting as `subject` under domain-wide delegation:
   * moving events out of a calendar the mapping no longer names. Its metrics are its own (not the therapist's).
   */
  async openAt(t: TherapistConfig, calendarId: string, subject: string | undefined): Promise<CalendarGateway> {
    const at: TherapistConfig = { ...t, calendar_id: calendarId };
    if (subject) at.impersonate = subject;
    else delete at.impersonate;
    return this.#gateway(at, await this.#auth(at), new Registry());
  }

  close(): void {
    for (const gw of this.map.values()) gw.close();
  }

  #gateway(t: TherapistConfig, auth: CalendarAuth, registry = this.#o.registry): CalendarGateway {
    const { config, clock, logger } = this.#o;
    return new CalendarGateway({
      therapistId: t.therapist_id,
      calendarId: t.calendar_id,
      apiRoot: config.google.api_root,
      auth,
      quotaUser: t.therapist_id,
      ...(t.impersonate ? { account: t.impersonate } : {}),
      clock,
      logger: logger.child({ component: "calendar", therapist_id: t.therapist_id }),
      registry,
      quotaPauseMs: config.google.quota_pause_seconds * 1000,
      ...(this.#o.quota ? { quota: this.#o.quota } : {}),
    });
  }

  /** Credentials of one therapist, or the reason there are none. */
  async #auth(t: TherapistConfig): Promise<CalendarAuth> {
    const { config, credentials } = this.#o;
    if (usesOAuth(config, t)) {
      const oauth = config.google.oauth;
      if (!oauth) throw new Error("google.oauth is required for OAuth therapists");
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
