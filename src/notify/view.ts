// Owns what the notifications observe: a plain snapshot of the running daemon (each therapist's credentials and quota
// pause, the dead letters) read from its parts, and the facts kept in the store (the reconciliation's failure streak
// and guard, the booking webhook endpoint). Nothing in it comes from an appointment: no customer detail can leak.
import type { GatewayHealth } from "../calendar/calendar-health.ts";
import type { Config } from "../config/schema.ts";
import { isWrongKeyError } from "../store/secrets.ts";

export interface TherapistView {
  id: string;
  name?: string;
  auth: "oauth" | "service_account";
  calendarId: string;
  /** The delegation subject (service accounts). */
  impersonate?: string;
  /** unknown: no call since the start; setup: no usable credentials at all (no refresh token, unreadable key). */
  credentials: "ok" | "broken" | "unknown" | "setup";
  /**
   * broken: Google's reason code; setup: not_connected (no refresh token), key (the stored token was sealed under
   * another key than store.encryption_key, or none is set: Google refused nothing) or unusable.
   */
  reason?: string;
  /**
   * broken by a refusal a new consent cannot fix (an API switched off, a Workspace admin's block, a proxy in front of
   * the token endpoint): what a person must do instead (the gateway's hint).
   */
  fix?: string;
  /** A quota pause not yet shown to be over (see GatewayHealth.quotaPause). */
  quotaPause?: { reason: string; until: number };
  /** Calendar changes of this therapist held by the write-back guard. */
  writebacksHeld?: number;
  /** Google answers 404 for the calendar: deleted, or not shared with these credentials (see GatewayHealth). */
  calendarMissing?: true;
}

/** The daemon's state now (in memory). */
export interface LiveView {
  therapists: TherapistView[];
  /** Appointments in the dead letters; undefined while not known. */
  deadLetters: number | undefined;
}

/** What the last reconciliations said, kept in the store by the notifier (see outcomes.ts). */
export interface ReconcileFacts {
  /** Reconciliations failed in a row (0 after one that succeeded). */
  failures: number;
  /** A description of the last failure without any customer detail. */
  lastError?: string;
  /** The mass-deletion guard of the last run that got as far as planning. */
  guard?: { tripped: boolean; destructive: number; managed: number };
  at: number;
}

/** The last answer of GET /v1/webhooks about webhooks.public_url (see endpoint-check.ts). */
export interface EndpointFacts {
  state: "missing" | "disabled" | "enabled";
  url: string;
  checkedAt: number;
}

export interface NotifyView extends LiveView {
  now: number;
  reconcile?: ReconcileFacts;
  endpoint?: EndpointFacts;
}

/** The parts of the daemon the live view reads. */
export interface DaemonParts {
  config: Config;
  calendars: ReadonlyMap<string, { health(): GatewayHealth }>;
  /** Therapists whose credentials could not be built at start, with the reason (app.ts). */
  credentialErrors: ReadonlyMap<string, string>;
  deadLetters(): number | undefined;
  /** Held write-backs per therapist (the write-back guard's count). */
  writebacksHeld?(): ReadonlyMap<string, number>;
}

/** The live view of a running daemon. */
export function daemonView(parts: DaemonParts): () => LiveView {
  const { config } = parts;
  return () => ({
    deadLetters: parts.deadLetters(),
    therapists: config.therapists.map((t): TherapistView => {
      const held = parts.writebacksHeld?.().get(t.therapist_id);
      const base: TherapistView = {
        id: t.therapist_id,
        ...(t.name ? { name: t.name } : {}),
        auth: t.auth?.type ?? config.google.auth.type,
        calendarId: t.calendar_id,
        ...(t.impersonate ? { impersonate: t.impersonate } : {}),
        credentials: "unknown",
        ...(held !== undefined ? { writebacksHeld: held } : {}),
      };
      const setupError = parts.credentialErrors.get(t.therapist_id);
      if (setupError !== undefined) {
        // Only a known reason travels: the raw text of a failure to read a key file may quote the file.
        return {
          ...base,
          credentials: "setup",
          reason: /no OAuth refresh token/.test(setupError)
            ? "not_connected"
            : isWrongKeyError(setupError)
              ? "key"
              : "unusable",
        };
      }
      const health = parts.calendars.get(t.therapist_id)?.health();
      if (!health) return base;
      return {
        ...base,
        credentials: health.credentials,
        ...(health.credentials === "broken" && health.reason ? { reason: health.reason } : {}),
        ...(health.credentials === "broken" && health.reconnectHelps === false && health.hint
          ? { fix: health.hint }
          : {}),
        ...(health.quotaPause ? { quotaPause: health.quotaPause } : {}),
        ...(health.calendarMissing ? { calendarMissing: true as const } : {}),
      };
    }),
  });
}
