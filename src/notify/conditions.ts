// Owns the conditions people are told about: for each, how it is observed (open, clear, or not known yet) and what
// the message says when it opens and when it clears. Adding one is one entry in CONDITIONS (and, when it needs a
// fact the view lacks, one field in view.ts). Messages name therapists, calendars and counts, never a customer.
import { reconnectAdvice, reconnectRoute } from "../calendar/credential-hints.ts";
import type { Config } from "../config/schema.ts";
import type { NotifyView, TherapistView } from "./view.ts";

export type Facts = Record<string, string | number | boolean>;

/** One subject of a condition as observed now. `open` undefined: not known yet (the stored state stands). */
export interface Observation {
  /** The thing concerned within the condition ("" when the condition is about the whole daemon). */
  subject: string;
  open: boolean | undefined;
  therapistId?: string;
  /** What the message needs; kept in the store with the notice, so only safe values (ids, counts, codes). */
  facts: Facts;
}

/** A condition that opened or cleared: what is queued for each recipient. */
export interface Notice {
  id: string;
  condition: string;
  subject: string;
  opened: boolean;
  /**
   * Opened again while it stayed open: what kind of open it is (ConditionKind.variant) changed, so what people were
   * told to do no longer holds. Absent on a first opening and on a clearing.
   */
  update?: boolean;
  at: number;
  therapistId?: string;
  facts: Facts;
}

export interface Text {
  title: string;
  text: string;
  link?: { label: string; url: string };
}

export interface DescribeContext {
  config: Config;
  /** admins: the configured recipients; therapist: the therapist concerned (e-mail). */
  audience: "admins" | "therapist";
  /** The therapist's reconnect link, when the condition asks for one and the maker gave one. */
  reconnectLink?: string;
}

export interface ConditionKind {
  /** Stable id: the prefix of its keys in the store (never rename one). */
  readonly id: string;
  observe(view: NotifyView, config: Config): Observation[];
  describe(notice: Notice, ctx: DescribeContext): Text;
  /** How long an observation must stay open before it counts (absorbs what retries clear by themselves). */
  holdMs?(config: Config): number;
  /** Its notices also go to the therapist concerned (e-mail targets with `therapists: true`, OAuth therapists). */
  readonly tellsTherapist?: boolean;
  /** Its opening message carries the therapist's reconnect link (OAuth therapists). */
  readonly reconnect?: boolean;
  /**
   * What kind of open an open observation is, when that changes what people must do: kept with the open state, and a
   * change while it stays open is told as an update (Notice.update), once the new kind has been observed without a
   * break for VARIANT_HOLD_MS. Only what changes the advice, never a detail that may flicker (a reason code), or each
   * flicker would be a message. Undefined: no kind that changes the advice (nothing is told while it stays open).
   */
  variant?(observation: Observation): string | undefined;
}

/**
 * How long another kind of open (ConditionKind.variant) must be observed without a break before people are told again.
 * Longer than the credentials probe interval (10 minutes, gateway.ts): a probe whose answer flips between two reasons
 * (a proxy's 403 page now and then, then invalid_grant again) never keeps one that long, so it sends nothing instead of
 * a message (and a single-use reconnect link) per flip; a flip back to the kind last told is not told at all, and at
 * most one update goes out per hold period.
 */
export const VARIANT_HOLD_MS = 30 * 60_000;

const who = (config: Config, therapistId: string | undefined): string => {
  const t = config.therapists.find((x) => x.therapist_id === therapistId);
  return t?.name ? `${t.name} (${therapistId})` : String(therapistId);
};

const firstName = (config: Config, therapistId: string | undefined): string =>
  config.therapists.find((x) => x.therapist_id === therapistId)?.name ?? "";

const utc = (ms: number): string => `${new Date(ms).toISOString().slice(0, 16).replace("T", " ")} UTC`;

const plural = (n: number, one: string, many = `${one}s`) => `${n} ${n === 1 ? one : many}`;

const perTherapist = (
  view: NotifyView,
  fn: (t: TherapistView) => Omit<Observation, "subject" | "therapistId">,
): Observation[] => view.therapists.map((t) => ({ subject: t.id, therapistId: t.id, ...fn(t) }));

const credentials: ConditionKind = {
  id: "credentials",
  tellsTherapist: true,
  reconnect: true,
  observe: (view) =>
    perTherapist(view, (t) => ({
      // A token that the configured keys do not open says nothing of Google's access: that is credentials_key.
      open: t.credentials === "unknown" || t.reason === "key" ? undefined : t.credentials !== "ok",
      facts: {
        auth: t.auth,
        setup: t.credentials === "setup",
        ...(t.reason ? { reason: t.reason } : {}),
        ...(t.impersonate ? { subject: t.impersonate } : {}),
        // Reconnecting cannot fix it: the administrators get the fix, the therapist no link that cannot help.
        ...(t.fix ? { fix: t.fix } : {}),
      },
    })),
  // Whether reconnecting helps: a Workspace admin's block lifted that left the grant revoked (admin_policy_enforced,
  // then invalid_grant) now wants the reconnect link, and the reverse makes the link sent earlier useless. OAuth
  // therapists only: a service account has nothing to reconnect (its advice is the key and its delegation either way).
  variant: (o) => (o.facts.auth !== "oauth" ? undefined : o.facts.fix ? "fix" : "reconnect"),
  describe(n, { config, audience, reconnectLink }) {
    const name = who(config, n.therapistId);
    const link = reconnectLink ? { link: { label: "Reconnect the calendar", url: reconnectLink } } : {};
    if (audience === "therapist") {
      const hello = firstName(config, n.therapistId) ? `Hello ${firstName(config, n.therapistId)}, ` : "";
      // Never connected (or credentials not loadable at start): Google refused nothing, and nothing was ever updated.
      if (n.opened && n.facts.setup) {
        const never = n.facts.reason === "not_connected";
        return {
          title: never ? "Connect your Google Calendar" : "Your Google Calendar is not updated",
          text:
            `${hello}${never ? "your appointments appear in your Google Calendar once it is connected to the clinic's booking system." : "calbridge cannot use its connection to your Google Calendar, so new and changed appointments do not appear there."}` +
            (reconnectLink ? " Open the link below to connect it." : " The clinic's administrator has been told."),
          ...(reconnectLink ? { link: { label: "Connect the calendar", url: reconnectLink } } : {}),
        };
      }
      if (n.opened && n.facts.fix) {
        return n.update
          ? {
              title: "Your Google Calendar is still not updated: reconnecting does not help",
              text:
                `${hello}calbridge still cannot reach your Google Calendar, now because its access is blocked on the ` +
                "clinic's side: reconnecting does not help. The clinic's administrator has been told; new and changed " +
                "appointments appear there again once it is fixed.",
            }
          : {
              title: "Your Google Calendar is no longer updated",
              text:
                `${hello}calbridge can no longer reach your Google Calendar: its access is blocked on the clinic's side, ` +
                "and reconnecting does not help. The clinic's administrator has been told; new and changed appointments " +
                "appear there again once it is fixed.",
            };
      }
      if (n.opened && n.update) {
        return {
          title: "Your Google Calendar is still not updated: reconnecting now helps",
          text:
            `${hello}calbridge still cannot reach your Google Calendar, but what blocked it on the clinic's side is ` +
            "fixed: it now needs you to reconnect it. New and changed appointments will not appear there until then." +
            (reconnectLink ? " Open the link below to reconnect it." : " The clinic's administrator has been told."),
          ...link,
        };
      }
      return n.opened
        ? {
            title: "Your Google Calendar is no longer updated",
            text:
              `${hello}calbridge can no longer reach your Google Calendar: Google refused its access. New and changed ` +
              "appointments will not appear there until it is reconnected." +
              (reconnectLink ? " Open the link below to reconnect it." : " The clinic's administrator has been told."),
            ...link,
          }
        : { title: "Your Google Calendar is connected again", text: "Your appointments appear in it again." };
    }
    if (!n.opened) {
      return { title: `Google credentials of ${name} work again`, text: "Their appointments are mirrored again." };
    }
    const oauth = n.facts.auth === "oauth";
    const t = config.therapists.find((x) => x.therapist_id === n.therapistId);
    // As the configuration has it now: a token given in the file is replaced there (it wins over a connected one).
    const route = t ? reconnectRoute(config, t) : undefined;
    const fix = n.facts.fix
      ? String(n.facts.fix)
      : oauth
        ? reconnectLink
          ? "Send them the reconnect link below."
          : route?.inFile || config.store.encryption_key
            ? `${reconnectAdvice(String(n.therapistId), route ?? { via: "authorize" })}.`
            : // Without the key neither authorize nor a connect link can keep a token: that comes first.
              "Set store.encryption_key first (calbridge stores the tokens of connected calendars encrypted with it), " +
              `then reconnect their calendar (\`${config.connect ? "calbridge invite" : "calbridge authorize"} --therapist ${n.therapistId}\`).`
        : `Check the service account's key and its domain-wide delegation for ${n.facts.subject ?? "their address"}.`;
    if (n.facts.setup) {
      const why =
        n.facts.reason === "not_connected"
          ? "No refresh token is stored for them: their calendar was never connected."
          : "calbridge could not load their credentials at start (the log says why).";
      return { title: `${name} has no usable Google credentials`, text: `${why} ${fix}`, ...link };
    }
    const reason = n.facts.reason ? ` (${n.facts.reason})` : "";
    const testing =
      oauth && n.facts.reason === "invalid_grant"
        ? ' (An OAuth consent screen left in "Testing" issues refresh tokens that expire after 7 days.)'
        : "";
    if (n.update) {
      const now = n.facts.fix ? "reconnecting does not help" : "reconnecting now helps";
      return {
        title: `Google credentials of ${name} still not working: ${now}`,
        text:
          `Google still refuses calbridge's access to their calendar, now for another reason${reason}: the last ` +
          `message's advice no longer holds. Their appointments are not mirrored and their calendar changes are not ` +
          `read until this is fixed; nothing is lost meanwhile. ${fix}${testing}`,
        ...link,
      };
    }
    return {
      title: `Google credentials of ${name} stopped working`,
      text:
        `Google refused calbridge's access to their calendar${reason}. Their appointments are not mirrored and their ` +
        `calendar changes are not read until this is fixed; nothing is lost meanwhile. ${fix}${testing}`,
      ...link,
    };
  },
};

/**
 * The therapist's stored refresh token is sealed under another key than the configured ones (a wrong or missing
 * store.encryption_key): the admins' to fix, so the therapist is not told and no reconnect link is made.
 */
const credentialsKey: ConditionKind = {
  id: "credentials_key",
  observe: (view) =>
    perTherapist(view, (t) => ({
      // Cleared once the token opens (a call made with it, whatever Google answers); a restart knows nothing before.
      open: t.reason === "key" ? true : t.credentials === "ok" || t.credentials === "broken" ? false : undefined,
      facts: {},
    })),
  describe(n, { config }) {
    const name = who(config, n.therapistId);
    if (!n.opened) {
      return {
        title: `The stored Google credentials of ${name} can be read again`,
        text: "calbridge decrypts their refresh token with the configured key again.",
      };
    }
    const reconnect = config.connect ? "calbridge invite" : "calbridge authorize";
    return {
      title: `The stored Google credentials of ${name} cannot be decrypted`,
      text:
        "Their refresh token in the store was encrypted with another key than store.encryption_key (a wrong or " +
        "missing key in this deploy, or the old key left out of store.previous_encryption_keys during a rotation). " +
        "Google refused nothing, and the therapist is not told. Their appointments are not mirrored and their " +
        "calendar changes are not read until this is fixed; nothing is lost meanwhile. Set store.encryption_key to " +
        "the key it was stored with (after a rotation, list the old key in store.previous_encryption_keys) and " +
        `restart calbridge; only if that key is lost, have them reconnect (\`${reconnect} --therapist ${n.therapistId}\`).`,
    };
  },
};

const quotaPause: ConditionKind = {
  id: "quota_pause",
  observe: (view) =>
    perTherapist(view, (t) => ({
      // Without a call since the start, nothing is known (a pause does not outlive a restart, quotas do).
      open: t.quotaPause ? true : t.credentials === "unknown" || t.credentials === "setup" ? undefined : false,
      facts: t.quotaPause ? { reason: t.quotaPause.reason, until: t.quotaPause.until } : ({} as Facts),
    })),
  describe(n, { config }) {
    const name = who(config, n.therapistId);
    if (!n.opened) {
      return {
        title: `Calendar of ${name} resumed`,
        text: "Google accepts calls to it again; calbridge is catching up.",
      };
    }
    const reason = String(n.facts.reason ?? "quotaExceeded");
    return {
      title: `Google paused the calendar of ${name} (${reason})`,
      text:
        `Google answered ${reason}: the calendar's usage limit is used up. calbridge leaves it alone until ` +
        `${utc(Number(n.facts.until))} and then tries again; nothing is lost meanwhile. If this recurs, ask Google ` +
        "for more Calendar API quota.",
    };
  },
};

const calendarMissing: ConditionKind = {
  id: "calendar_missing",
  observe: (view) =>
    perTherapist(view, (t) => ({
      // Known once a call to the calendar was answered; refused credentials are the credentials condition.
      open: t.calendarMissing ? true : t.credentials === "ok" ? false : undefined,
      facts: { calendar: t.calendarId, ...(t.impersonate ? { subject: t.impersonate } : {}) },
    })),
  describe(n, { config }) {
    const name = who(config, n.therapistId);
    if (!n.opened) {
      return { title: `The calendar of ${name} is found again`, text: "Their appointments are mirrored again." };
    }
    const as = n.facts.subject && n.facts.subject !== n.facts.calendar ? ` (as ${n.facts.subject})` : "";
    return {
      title: `The calendar of ${name} cannot be found`,
      text:
        `Google answers 404 for ${n.facts.calendar}${as}: it was deleted, or it is no longer shared with calbridge's ` +
        "credentials. Their appointments are not mirrored and their calendar changes are not read until this is " +
        "fixed; nothing is lost meanwhile. Share the calendar again (make changes to events), or point " +
        `therapists[].calendar_id of ${n.therapistId} at their calendar and reload.`,
    };
  },
};

const deadLetters: ConditionKind = {
  id: "dead_letters",
  holdMs: (config) => config.notify.dead_letters_after_seconds * 1000,
  observe: (view) => [
    {
      subject: "",
      open: view.deadLetters === undefined ? undefined : view.deadLetters > 0,
      facts: { count: view.deadLetters ?? 0 },
    },
  ],
  describe: (n) =>
    n.opened
      ? {
          title: `${plural(Number(n.facts.count), "appointment")} failed to sync`,
          text:
            "They are in the dead letters after failing repeatedly and are tried again by each reconciliation. " +
            "The log says why (search it for the appointment ids); /status shows the count.",
        }
      : { title: "No appointments left in the dead letters", text: "Every appointment synced again." },
};

const massDeleteGuard: ConditionKind = {
  id: "mass_delete_guard",
  observe: (view) => [
    {
      subject: "",
      open: view.reconcile?.guard?.tripped,
      facts: { destructive: view.reconcile?.guard?.destructive ?? 0, managed: view.reconcile?.guard?.managed ?? 0 },
    },
  ],
  describe: (n) =>
    n.opened
      ? {
          title: "The mass-deletion guard held a reconciliation",
          text:
            `It would have removed ${n.facts.destructive} of ${n.facts.managed} managed events; nothing was deleted or ` +
            "cancelled. Read the plan with `calbridge reconcile --dry-run`; if it is right, apply it with " +
            "`calbridge reconcile --force`.",
        }
      : { title: "The mass-deletion guard is clear", text: "The last reconciliation looked sane and ran in full." },
};

const writebackHold: ConditionKind = {
  id: "writeback_hold",
  observe: (view) =>
    perTherapist(view, (t) => ({
      open: t.writebacksHeld === undefined ? undefined : t.writebacksHeld > 0,
      facts: { held: t.writebacksHeld ?? 0 },
    })),
  describe(n, { config }) {
    const name = who(config, n.therapistId);
    return n.opened
      ? {
          title: `Calendar changes of ${name} are held by the write-back guard`,
          text:
            `${plural(Number(n.facts.held), "cancellation or move", "cancellations or moves")} from ${name}'s calendar ` +
            "came faster than sync.writeback_guard allows (a phone app wiping the calendar, a compromised account?); " +
            "nothing was sent to the booking service and no customer was told. Decide: " +
            `\`calbridge writeback held --therapist ${n.therapistId}\` lists them, \`--apply\` sends them, \`--restore\` ` +
            "puts the events back.",
        }
      : { title: `No write-backs of ${name} are held any more`, text: "The hold was decided; write-backs flow again." };
  },
};

const bookingEndpoint: ConditionKind = {
  id: "booking_endpoint",
  observe: (view, config) => [
    {
      subject: "",
      // Checked against webhooks.public_url only; an answer about an earlier address says nothing.
      open:
        view.endpoint && view.endpoint.url === config.webhooks.public_url
          ? view.endpoint.state !== "enabled"
          : undefined,
      facts: view.endpoint ? { state: view.endpoint.state, url: view.endpoint.url } : ({} as Facts),
    },
  ],
  describe(n) {
    if (!n.opened) {
      return {
        title: "The booking webhook endpoint is enabled again",
        text: `${n.facts.url} receives the booking service's webhooks again.`,
      };
    }
    return n.facts.state === "disabled"
      ? {
          title: "The booking service's webhook endpoint is DISABLED",
          text:
            `No webhooks reach ${n.facts.url}: the booking service disables an endpoint after 7 failed deliveries. ` +
            "Only the reconciliation keeps calendars current meanwhile. Fix the cause (the dashboard's delivery log " +
            "shows it), then re-enable the endpoint in Settings > Webhooks.",
        }
      : {
          title: "The booking webhook endpoint is not registered",
          text:
            `GET /v1/webhooks lists no endpoint for ${n.facts.url}, so no webhooks arrive; only the reconciliation ` +
            "keeps calendars current. Add it in Settings > Webhooks with the appointment events.",
        };
  },
};

const reconcileFailing: ConditionKind = {
  id: "reconcile_failing",
  observe: (view, config) => [
    {
      subject: "",
      open: view.reconcile === undefined ? undefined : view.reconcile.failures >= config.notify.reconcile_failures,
      facts: {
        failures: view.reconcile?.failures ?? 0,
        ...(view.reconcile?.lastError ? { error: view.reconcile.lastError } : {}),
      },
    },
  ],
  describe: (n) =>
    n.opened
      ? {
          title: `Reconciliation failed ${n.facts.failures} times in a row`,
          text:
            `Last error: ${n.facts.error ?? "unknown"}. Calendars may fall behind (webhooks still apply changes); ` +
            "the log has the details.",
        }
      : { title: "Reconciliation succeeds again", text: "The last reconciliation ran without failures." },
};

/** Every condition, in the order their messages are listed in a summary. */
export const CONDITIONS: readonly ConditionKind[] = [
  credentials,
  credentialsKey,
  quotaPause,
  calendarMissing,
  deadLetters,
  massDeleteGuard,
  writebackHold,
  bookingEndpoint,
  reconcileFailing,
];

export function conditionById(id: string): ConditionKind | undefined {
  return CONDITIONS.find((c) => c.id === id);
}
