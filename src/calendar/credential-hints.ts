// Owns the fix-it hint for broken Google credentials: one sentence per cause (revoked or expired token, missing
// scope, Calendar API off in the project, no write access to the calendar, delegation not granted), shared by the
// gateway's log line, /status and `calbridge doctor`; and how a therapist gets new credentials (the reconnect command
// and advice, as the configuration has it), shared by those and the notifications.
import type { Config, TherapistConfig } from "../config/schema.ts";
import { isGrantError } from "./errors.ts";
import { CALENDAR_SCOPE, CALENDAR_SCOPE_LABEL } from "./scopes.ts";

export interface HintContext {
  therapistId: string;
  calendarId: string;
  /** How the therapist's calendar is reached: per-therapist OAuth or a service account with delegation. */
  authKind: "oauth" | "service_account";
  /** The account that must have access (the delegation subject), when known. */
  account?: string;
  /** OAuth: how the therapist gets new credentials (default: a link from `calbridge invite`). */
  reconnect?: ReconnectRoute;
}

export interface RejectedCredentials {
  reason?: string | undefined;
  status?: number | undefined;
  message?: string;
  /** Refused at the token endpoint: no token was had (CalendarError.tokenEndpoint). */
  tokenEndpoint?: boolean;
}

/**
 * How an OAuth therapist gets new credentials, as the configuration has them: a link from `calbridge invite` (connect
 * configured) or `calbridge authorize` (not configured); with a token given in the file
 * (therapists[].auth.refresh_token), which wins over any connected one, a new token there instead.
 */
export interface ReconnectRoute {
  via: "invite" | "authorize";
  /** The therapist's refresh token is given in the configuration file: `invite` refuses them, `authorize` is moot. */
  inFile?: boolean;
}

const INVITE: ReconnectRoute = { via: "invite" };

/** How this therapist gets new credentials; undefined for the service account (there is nothing to reconnect). */
export function reconnectRoute(config: Config, t: TherapistConfig): ReconnectRoute | undefined {
  if ((t.auth?.type ?? config.google.auth.type) !== "oauth") return undefined;
  const inFile = t.auth?.type === "oauth" && Boolean(t.auth.refresh_token);
  return { via: config.connect ? "invite" : "authorize", ...(inFile ? { inFile } : {}) };
}

/** The command that gives an OAuth therapist new credentials; none when their token is given in the file. */
export function reconnectCommand(therapistId: string, route: ReconnectRoute = INVITE): string | undefined {
  return route.inFile ? undefined : `calbridge ${route.via} --therapist ${therapistId}`;
}

/** What to do to give an OAuth therapist new credentials: one sentence, without its full stop. */
export function reconnectAdvice(therapistId: string, route: ReconnectRoute = INVITE): string {
  const authorize = `\`calbridge authorize --therapist ${therapistId}\``;
  if (route.inFile) {
    const then =
      route.via === "invite"
        ? "send them a new link from `calbridge invite` (or use `calbridge authorize`)"
        : `run ${authorize} on a machine with a browser`;
    return (
      "Their refresh token is given in the configuration file, and it wins over a connected one: replace " +
      `therapists[].auth.refresh_token of ${therapistId} there with a new token and reload (SIGHUP), or remove it ` +
      `from the file, reload, and ${then}`
    );
  }
  return route.via === "invite"
    ? `Reconnect the therapist's Google account: \`calbridge invite --therapist ${therapistId}\` prints a link to ` +
        `send them (or run ${authorize} on a machine with a browser)`
    : `Reconnect the therapist's Google account: run ${authorize} on a machine with a browser`;
}

function reconnect(ctx: HintContext): string {
  return reconnectAdvice(ctx.therapistId, ctx.reconnect);
}

/** The Cloud project number in Google's accessNotConfigured message, if it names one. */
function projectOf(message: string | undefined): string | undefined {
  return message?.match(/project[= ](\d+)/)?.[1];
}

/**
 * Refusals that reconnecting the therapist's Google account does not fix: the Calendar API switched off in the Cloud
 * project, an account without write access to a shared calendar, a Workspace admin's block of the app.
 */
const NOT_FIXED_BY_RECONNECTING: ReadonlySet<string> = new Set([
  "accessNotConfigured",
  "requiredAccessLevel",
  "admin_policy_enforced",
  // The OAuth client itself refused (its secret rotated, the client deleted): the connect flow's code exchange uses the
  // same client and would be refused too.
  "invalid_client",
  "deleted_client",
]);

/**
 * Whether a new consent (reconnecting the therapist's account) can fix these rejected credentials: not for the refusals
 * above, nor for a token endpoint's refusal that is no grant error (an egress proxy's page, a wrong google.token_url).
 * The therapist is then not sent a reconnect link that cannot help, and the administrators get the fix itself.
 */
export function reconnectHelps(err: RejectedCredentials): boolean {
  if (err.reason !== undefined && NOT_FIXED_BY_RECONNECTING.has(err.reason)) return false;
  return !(err.tokenEndpoint && err.status !== undefined && !isGrantError(err.reason));
}

/** What a person must do about these rejected credentials. */
export function credentialsHint(err: RejectedCredentials, ctx: HintContext): string {
  const oauth = ctx.authKind === "oauth";
  switch (err.reason) {
    case "insufficientPermissions":
      return oauth
        ? `The Google account gave calbridge no calendar access (the box "${CALENDAR_SCOPE_LABEL}" was not ticked). ${reconnect(ctx)}, and have them tick that box.`
        : `The service account's domain-wide delegation does not include the scope ${CALENDAR_SCOPE}: add it in the Google Workspace admin console (Security > API controls > Domain-wide delegation).`;
    case "accessNotConfigured": {
      const project = projectOf(err.message);
      const where = project
        ? `Google Cloud project ${project} (https://console.developers.google.com/apis/api/calendar-json.googleapis.com/overview?project=${project})`
        : "the Google Cloud project of the OAuth client or service account";
      return `Enable the Google Calendar API in ${where} (APIs & Services > Library > Google Calendar API > Enable), then wait a few minutes.`;
    }
    case "requiredAccessLevel":
      return `The account ${ctx.account ?? "that calbridge signs in as"} may not change events in calendar ${ctx.calendarId}: share the calendar with it with "Make changes to events" (or fix therapists[].calendar_id).`;
    case "unauthorized_client":
      return "Grant domain-wide delegation for the calendar scope to the service account, or fix `impersonate`.";
    case "invalid_grant":
      if (oauth) {
        return (
          `The refresh token was revoked or has expired. ${reconnect(ctx)}. If this recurs every 7 days, the OAuth ` +
          `consent screen is in "Testing": publish it (Google Cloud console > OAuth consent screen > Publish app).`
        );
      }
      return "Check the service-account key (it may have been deleted or rotated) and its domain-wide delegation.";
    case "invalid_client":
    case "deleted_client":
      if (oauth) {
        return (
          "Google refuses calbridge's OAuth client itself (its secret was changed or the client deleted in the Google " +
          "Cloud console): set google.oauth.client_id and client_secret to a working client and restart calbridge (a " +
          "reload does not apply google settings); reconnecting does not help until then. The credentials are tried " +
          "again regularly."
        );
      }
      return "Check the service-account key (it may have been deleted or rotated) and its domain-wide delegation.";
    case "admin_policy_enforced":
      return (
        `A Google Workspace admin's policy blocks calbridge's access for ${ctx.account ?? "this account"}: the ` +
        "Workspace admin must allow the app (Admin console > Security > Access and data control > API controls > App " +
        "access control); reconnecting does not help until then. The credentials are tried again regularly."
      );
  }
  // Refused without a verdict on the grant: a 403 or 404 page from an egress proxy, an allow-list or a wrong URL.
  if (err.tokenEndpoint && err.status !== undefined && !isGrantError(err.reason)) {
    const answer = err.reason ? `HTTP ${err.status}, ${err.reason}` : `HTTP ${err.status}, no OAuth error`;
    return (
      `The token endpoint refused the token request (${answer}), which says nothing of the grant itself: check ` +
      "google.token_url and any egress proxy or allow-list between calbridge and Google's token endpoint " +
      "(oauth2.googleapis.com). The credentials are tried again regularly."
    );
  }
  return oauth
    ? `${reconnect(ctx)}.`
    : "Check the service-account key and its domain-wide delegation for the calendar scope.";
}
