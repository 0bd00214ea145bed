// Owns the daemon's calendar gateways, one per therapist: credentials from the configuration or the store, the reason
// a therapist has none, and taking up a therapist's new credentials at once after they (re)connect (no restart).
import type { Registry } from "prom-client";
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

  close(): void {
    for (const gw of this.map.values()) gw.close();
  }

  #gateway(t: TherapistConfig, auth: CalendarAuth): CalendarGateway {
    const { config, clock, logger, registry } = this.#o;
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
