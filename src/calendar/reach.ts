// Owns the one check the connect flow (and `calbridge authorize`) makes with a fresh access token before it keeps the
// refresh token: can the account the person chose open the mapped calendar at all (calendars.get), and may it change
// events there as far as Google tells (calendarList.get's accessRole)? Through googleapis, as the gateway calls it.
import { OAuth2Client } from "google-auth-library";
import { calendar_v3 } from "googleapis/build/src/apis/calendar/v3.js";
import { deadline } from "../deadline.ts";
import { attemptFailure } from "./call-runner.ts";
import { type CalendarError, classifyError } from "./errors.ts";

export interface ReachOptions {
  /** google.api_root (the emulator's address in tests). */
  apiRoot: string;
  calendarId: string;
  accessToken: string;
  /** Per attempt (default 10 s). */
  timeoutMs?: number;
  /** Tries in all for a transient failure (5xx, 429, network), the first included (default 2). */
  attempts?: number;
  /** Sent as quotaUser, as the gateway does. */
  quotaUser?: string;
}

/** The roles that only see a calendar (Google's "See all event details" and "See only free/busy"). */
export type ViewRole = "reader" | "freeBusyReader";

/**
 * "reached": the account opens the calendar and, as far as Google said, may change its events: `accessRole` is owner
 * or writer, or `writeUnverified` says why that could not be told (the calendar is not in the account's calendar list,
 * an answer not understood); in doubt the account is accepted, as before this check existed.
 * "view_only": Google said the account may only see the calendar (`role`); every write would get 403.
 * "no_access": Google answered that it does not open it: 404 notFound is how Google answers a calendar the account was
 * never given or no longer has ("Handle API errors", 404: "when accessing a calendar that the user can not access",
 * developers.google.com/workspace/calendar/api/guides/errors), 403 forbidden one it may not use. "failed": anything
 * else (Google unreachable or failing, rate limits, the token refused): nothing is known about the account.
 */
export type Reach =
  | { outcome: "reached"; accessRole?: string; writeUnverified?: string; calendarId?: string }
  | { outcome: "view_only"; role: ViewRole }
  | { outcome: "no_access" | "failed"; error: CalendarError };

const NO_ACCESS = new Set(["calendar_not_found", "forbidden"]);
const VIEW_ROLES: ReadonlySet<string> = new Set<ViewRole>(["reader", "freeBusyReader"]);
const WRITE_ROLES: ReadonlySet<string> = new Set(["owner", "writer"]);

export async function reachCalendar(options: ReachOptions): Promise<Reach> {
  const auth = new OAuth2Client();
  auth.setCredentials({ access_token: options.accessToken });
  // gaxios must not retry or time out on its own (see the gateway): the loop and the deadline below do.
  const api = new calendar_v3.Calendar({ auth, rootUrl: options.apiRoot, retry: false });
  const common = { calendarId: options.calendarId, ...(options.quotaUser ? { quotaUser: options.quotaUser } : {}) };
  const opened = await attempts(options, `calendars.get ${options.calendarId}`, (signal) =>
    api.calendars.get({ ...common, fields: "id" }, { signal }),
  );
  if (!opened.ok) {
    if (NO_ACCESS.has(opened.error.kind)) return { outcome: "no_access", error: opened.error };
    return { outcome: "failed", error: opened.error };
  }
  // Google's Calendar API reference, CalendarList resource: accessRole is "the effective access role that the
  // authenticated user has on the calendar": freeBusyReader, reader, writer or owner. It answers only for calendars on
  // the account's calendar list ("CalendarList Resource: ... an individual calendar that appears on the user's calendar
  // list in the UI", developers.google.com/workspace/calendar/api/resource_types), which a calendar shared with it may
  // not be on (calendars.get reached it all the same): a 404 then tells nothing, nor does any other failure.
  // The calendar's real id (for `primary`, the account's own calendar): the caller refuses another therapist's.
  const calendarId = opened.data.id ?? undefined;
  const found = calendarId ? { calendarId } : {};
  const listed = await attempts(options, `calendarList.get ${options.calendarId}`, (signal) =>
    api.calendarList.get({ ...common, fields: "accessRole" }, { signal }),
  );
  if (!listed.ok) {
    return {
      outcome: "reached",
      ...found,
      writeUnverified:
        listed.error.kind === "calendar_not_found"
          ? "the calendar is not in the account's calendar list"
          : listed.error.message,
    };
  }
  const role = listed.data.accessRole ?? undefined;
  if (role && VIEW_ROLES.has(role)) return { outcome: "view_only", role: role as ViewRole };
  if (role && WRITE_ROLES.has(role)) return { outcome: "reached", ...found, accessRole: role };
  return { outcome: "reached", ...found, writeUnverified: `calendarList.get answered accessRole ${role ?? "(none)"}` };
}

/** One call, tried again on a transient failure as `options` say. */
async function attempts<T>(
  options: ReachOptions,
  operation: string,
  call: (signal: AbortSignal) => Promise<{ data: T }>,
): Promise<{ ok: true; data: T } | { ok: false; error: CalendarError }> {
  const tries = Math.max(1, options.attempts ?? 2);
  let error: CalendarError | undefined;
  for (let i = 0; i < tries; i++) {
    if (i > 0) await new Promise((r) => setTimeout(r, 500));
    const limit = deadline(options.timeoutMs ?? 10_000);
    try {
      const { data } = await call(limit.signal);
      return { ok: true, data };
    } catch (err) {
      error = classifyError(attemptFailure(limit, err), "calendar", operation);
      if (!error.retryable) break;
    } finally {
      limit.end();
    }
  }
  return { ok: false, error: error! };
}
