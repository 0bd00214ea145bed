// Owns one calendar's standing with Google: quota pause, broken credentials (with the reason and its fix-it hint),
// missing calendar; each logged once.
import type { Clock } from "../clock.ts";
import type { Logger } from "../log.ts";
import { credentialsHint, type HintContext, type ReconnectRoute, reconnectHelps } from "./credential-hints.ts";
import { CalendarError, CREDENTIAL_REFUSALS } from "./errors.ts";
import type { GatewayMetrics } from "./metrics.ts";

export interface GatewayHealth {
  credentials: "ok" | "broken" | "unknown";
  /** While broken: Google's reason (invalid_grant, insufficientPermissions, accessNotConfigured, ...). */
  reason?: string;
  /** While broken: what a person must do. */
  hint?: string;
  /** While broken by a refusal a new consent cannot fix (credential-hints.ts reconnectHelps): false. */
  reconnectHelps?: false;
  /** Epoch ms until which calls fail fast after quotaExceeded. */
  pausedUntil?: number;
  /**
   * A quota pause that no call has yet shown to be over: set when Google answered quotaExceeded, kept after the pause
   * ran out until a call sent afterwards succeeds (notifications say "resumed" only then).
   */
  quotaPause?: { reason: string; until: number };
  lastError?: string;
  /** Google answered 404 for the calendar itself (deleted, or not shared with these credentials) and nothing since. */
  calendarMissing?: true;
}

/** What proved the credentials work: a token obtained, a read answered, a write answered. */
export type Evidence = "token" | "read" | "write";

/** Refusals a read cannot disprove: the account may read (a read-only scope, a reader's share) but not write. */
const WRITE_REFUSALS: ReadonlySet<string> = new Set(["insufficientPermissions", "requiredAccessLevel"]);

export interface CalendarHealthOptions {
  therapistId: string;
  calendarId: string;
  clock: Clock;
  logger: Logger;
  metrics: GatewayMetrics;
  quotaPauseMs: number;
  /** While credentials are broken, one call per this interval is let through to test them again. */
  credentialProbeMs: number;
  /** OAuth per therapist or a service account: the fix-it hints differ. */
  authKind?: HintContext["authKind"];
  /** The account calbridge acts as on this calendar (delegation subject), for the sharing hint. */
  account?: string;
  /** OAuth: how the therapist gets new credentials, for the reconnect hint. */
  reconnect?: ReconnectRoute;
  /** A calendar no mapping names: one not found is no mapping error (the caller reports it). */
  outsideMapping?: boolean;
}

/** Admission decision for one request: whether to test broken credentials, and the pause generation it was sent in. */
export interface Admission {
  probe: boolean;
  /** Pauses begun before the request was sent; hand back to `succeeded()`. */
  generation: number;
  /** The request changes the calendar (only a write's success disproves a refused write). */
  write: boolean;
}

export class CalendarHealth {
  readonly #o: CalendarHealthOptions;
  #credentials: GatewayHealth["credentials"] = "unknown";
  #brokenError: CalendarError | undefined;
  /**
   * The refusal that had the credentials broken when forgetStanding() was called, while no call since has confirmed or
   * disproved it: evidence that could not disprove it then (a token, a read) leaves them unknown, not working.
   */
  #doubted: CalendarError | undefined;
  #nextProbe = 0;
  #pausedUntil: number | undefined;
  /** Counts pauses (begun or extended): a success ends a pause only if its request was sent after the latest one. */
  #pauseGeneration = 0;
  #pauseReason = "";
  #calendarMissing = false;
  #lastError: string | undefined;
  /** The reason label of the credentialsBroken series that is set, if any. */
  #brokenLabel: string | undefined;
  /** The therapist's series are withdrawn (retire()): this calendar's standing is tracked but no longer exported. */
  #retired = false;

  constructor(options: CalendarHealthOptions) {
    this.#o = options;
  }

  /** Log fields; the gateway's child logger already carries therapist_id. */
  get #ids() {
    return { calendar_id: this.#o.calendarId };
  }

  /**
   * Throws a fail-fast CalendarError while paused or broken; `probe` when a broken credential may be tried again.
   * While only writes were refused (a read-only scope, a reader's share), reads are let through: they work, and the
   * probe is kept for a write, the only call that can show the fix.
   */
  admit(operation: string, forceProbe = false, write = false): Admission {
    const generation = this.#pauseGeneration;
    const now = this.#o.clock.now();
    if (this.#pausedUntil !== undefined && now < this.#pausedUntil) {
      throw new CalendarError(
        `${operation}: calendar ${this.#o.calendarId} (therapist ${this.#o.therapistId}) is paused until ` +
          `${new Date(this.#pausedUntil).toISOString()} because Google answered ${this.#pauseReason}; nothing was sent`,
        { kind: "quota", status: 403, reason: this.#pauseReason },
      );
    }
    if (this.#credentials !== "broken") return { probe: false, generation, write };
    if (!write && this.#refused(WRITE_REFUSALS)) return { probe: false, generation, write };
    if (forceProbe || now >= this.#nextProbe) {
      this.#nextProbe = now + this.#o.credentialProbeMs;
      return { probe: true, generation, write };
    }
    throw new CalendarError(
      `${operation}: Google credentials of therapist ${this.#o.therapistId} are broken ` +
        `(${this.#brokenError?.message ?? "rejected"}); nothing was sent. ${this.#fixHint()}`,
      {
        kind: "auth",
        status: this.#brokenError?.status,
        reason: this.#brokenError?.reason,
        // Refused at the token endpoint: said so wherever it shows (/status), as the refusal itself was.
        tokenEndpoint: this.#brokenError?.tokenEndpoint === true,
      },
    );
  }

  /** Broken for one of these reasons (or, since forgetStanding(), doubted to be). */
  #refused(reasons: ReadonlySet<string>): boolean {
    const reason = (this.#credentials === "broken" ? this.#brokenError : this.#doubted)?.reason;
    return reason !== undefined && reasons.has(reason);
  }

  #fixHint(): string {
    return credentialsHint(this.#brokenError ?? {}, {
      therapistId: this.#o.therapistId,
      calendarId: this.#o.calendarId,
      authKind: this.#o.authKind ?? "oauth",
      ...(this.#o.account ? { account: this.#o.account } : {}),
      ...(this.#o.reconnect ? { reconnect: this.#o.reconnect } : {}),
    });
  }

  /**
   * A request admitted with `admission` succeeded (or got Google's answer about an event): credentials work and the
   * calendar exists. It ends a quota pause only if it was sent after the pause began: a request already in flight
   * when another one met quotaExceeded says nothing about the quota now. `calendarFound` false: the answer says
   * nothing of the calendar (a 404 for an event: a deleted calendar answers 404 for each of its events), so a missing
   * calendar stays missing until a call on the calendar itself succeeds.
   */
  succeeded(admission: Admission, calendarFound = true): void {
    this.credentialsWork(admission.write ? "write" : "read");
    if (this.#pausedUntil !== undefined && admission.generation === this.#pauseGeneration) {
      this.#pausedUntil = undefined;
      this.#gauge("paused", 0);
      this.#o.logger.info(this.#ids, "Google Calendar quota pause over: calendar resumed");
    }
    if (this.#calendarMissing && calendarFound) {
      this.#calendarMissing = false;
      this.#o.logger.info(this.#ids, "Google calendar is reachable again");
    }
  }

  /**
   * A token was obtained or a request succeeded. Evidence that cannot disprove the refusal is not taken: a new token
   * says nothing of a refusal by the API (scope, API switch, sharing), and a read nothing of a refused write.
   */
  credentialsWork(evidence: Evidence = "write"): void {
    if (this.#credentials === "broken" || this.#doubted) {
      if (evidence === "token" && this.#refused(CREDENTIAL_REFUSALS)) return;
      if (evidence === "read" && this.#refused(WRITE_REFUSALS)) return;
      if (this.#credentials === "broken") this.#o.logger.info(this.#ids, "Google credentials work again");
    }
    this.#credentials = "ok";
    this.#brokenError = undefined;
    this.#doubted = undefined;
    this.#gauge("credentialsOk", 1);
    this.#setBrokenLabel(undefined);
  }

  /** Logged once per cause: again only when the reason changes. */
  markBroken(err: CalendarError): void {
    this.#lastError = err.message;
    this.#gauge("credentialsOk", 0);
    const was = this.#credentials === "broken" ? this.#brokenError : undefined;
    // A failed probe already set the next one; failing reads while only writes are refused must not postpone it.
    if (this.#credentials !== "broken") this.#nextProbe = this.#o.clock.now() + this.#o.credentialProbeMs;
    this.#doubted = undefined;
    if (was && was.reason === err.reason) return;
    this.#credentials = "broken";
    this.#brokenError = err;
    this.#setBrokenLabel(err.reason ?? (err.status ? String(err.status) : "unknown"));
    this.#o.logger.error(
      { ...this.#ids, status: err.status, reason: err.reason },
      `Google credentials rejected for therapist ${this.#o.therapistId}: ${err.message}. ` +
        `Calls to this calendar fail fast until fixed. ${this.#fixHint()}`,
    );
  }

  #setBrokenLabel(reason: string | undefined): void {
    if (this.#retired) return;
    const therapist = this.#o.therapistId;
    if (this.#brokenLabel !== undefined && this.#brokenLabel !== reason) {
      this.#o.metrics.credentialsBroken.remove({ therapist, reason: this.#brokenLabel });
    }
    if (reason !== undefined) this.#o.metrics.credentialsBroken.set({ therapist, reason }, 1);
    this.#brokenLabel = reason;
  }

  #gauge(name: "credentialsOk" | "paused", value: number): void {
    if (!this.#retired) this.#o.metrics[name].set({ therapist: this.#o.therapistId }, value);
  }

  /**
   * The gateway leaves the daemon (its therapist left the mapping, or a reload gave them another calendar or other
   * credentials): the therapist's credentials and pause series go from /metrics, and whatever the gateway still does
   * (a request in flight, stopping its push channel) sets none again. A gateway that replaces it starts without
   * series, as at start-up. Only this process's registry is touched: every replica retires its own gateways.
   */
  retire(): void {
    if (this.#retired) return;
    this.#setBrokenLabel(undefined);
    this.#retired = true;
    const therapist = { therapist: this.#o.therapistId };
    this.#o.metrics.credentialsOk.remove(therapist);
    this.#o.metrics.paused.remove(therapist);
  }

  /** Clears the broken state (after re-authorization); the next call tries the credentials again. */
  reset(): void {
    this.#credentials = "unknown";
    this.#brokenError = undefined;
    this.#doubted = undefined;
    this.#nextProbe = 0;
    this.#setBrokenLabel(undefined);
  }

  /**
   * What this process knew of the calendar's standing may be out of date: it starts leading, and as a standby it made
   * no calls (or a few, long ago) while another leader's calls may have shown a fix, or a new failure. Credentials,
   * quota pause and missing calendar go back to unknown (the notifications keep what was told until a call shows
   * the state now) and the next call is sent. A refusal known before stays doubted: a new token or a read that cannot
   * disprove it leaves the credentials unknown, so a refusal still there is not told as fixed and then as new.
   */
  forgetStanding(): void {
    if (this.#credentials === "broken") this.#doubted = this.#brokenError;
    this.#credentials = "unknown";
    this.#brokenError = undefined;
    this.#nextProbe = 0;
    // The credentials series stay as last known: the next call sets or clears them (no blip for an alerting rule).
    if (this.#pausedUntil !== undefined) {
      this.#pausedUntil = undefined;
      this.#gauge("paused", 0);
    }
    this.#calendarMissing = false;
  }

  pause(err: CalendarError): void {
    this.#lastError = err.message;
    const already = this.#pausedUntil !== undefined;
    this.#pauseGeneration += 1;
    this.#pausedUntil = this.#o.clock.now() + this.#o.quotaPauseMs;
    this.#pauseReason = err.reason ?? "quotaExceeded";
    this.#gauge("paused", 1);
    if (already) {
      this.#o.logger.info(
        { ...this.#ids, paused_until: new Date(this.#pausedUntil).toISOString() },
        "Google Calendar quota still exhausted: pause extended",
      );
      return;
    }
    this.#o.logger.warn(
      { ...this.#ids, reason: this.#pauseReason, paused_until: new Date(this.#pausedUntil).toISOString() },
      `Google Calendar quota exhausted (${this.#pauseReason}): calendar paused, calls fail fast until the pause ends`,
    );
  }

  calendarMissing(err: CalendarError): void {
    this.#lastError = err.message;
    if (this.#calendarMissing) return;
    this.#calendarMissing = true;
    if (this.#o.outsideMapping) {
      this.#o.logger.info(
        this.#ids,
        `calendar ${this.#o.calendarId} does not exist or is not shared with these credentials`,
      );
      return;
    }
    this.#o.logger.error(
      this.#ids,
      `mapping error: calendar ${this.#o.calendarId} of therapist ${this.#o.therapistId} does not exist or is not ` +
        "shared with these credentials; check therapists[].calendar_id and the calendar's sharing",
    );
  }

  recordError(err: CalendarError): void {
    this.#lastError = err.message;
  }

  snapshot(): GatewayHealth {
    const health: GatewayHealth = { credentials: this.#credentials };
    if (this.#credentials === "broken") {
      const reason = this.#brokenError?.reason ?? this.#brokenError?.status;
      if (reason !== undefined) health.reason = String(reason);
      health.hint = this.#fixHint();
      if (!reconnectHelps(this.#brokenError ?? {})) health.reconnectHelps = false;
    }
    if (this.#pausedUntil !== undefined && this.#o.clock.now() < this.#pausedUntil) {
      health.pausedUntil = this.#pausedUntil;
    }
    if (this.#pausedUntil !== undefined) health.quotaPause = { reason: this.#pauseReason, until: this.#pausedUntil };
    if (this.#lastError) health.lastError = this.#lastError;
    if (this.#calendarMissing) health.calendarMissing = true;
    return health;
  }
}
