// Owns the one check the connect flow makes with a fresh access token before it keeps the refresh token: can the
// account the person chose open the mapped calendar at all? (calendars.get, through googleapis as the gateway calls it.)
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

/**
 * "reached": the account opens the calendar. "no_access": Google answered that it does not: 404 notFound is how Google
 * answers a calendar the account was never given or no longer has ("Handle API errors", 404: "when accessing a
 * calendar that the user can not access", developers.google.com/workspace/calendar/api/guides/errors), 403 forbidden
 * one it may not use. "failed": anything else (Google unreachable or failing, rate limits, the token refused): nothing
 * is known about the account.
 */
export type Reach = { outcome: "reached" } | { outcome: "no_access" | "failed"; error: CalendarError };

const NO_ACCESS = new Set(["calendar_not_found", "forbidden"]);

export async function reachCalendar(options: ReachOptions): Promise<Reach> {
  const auth = new OAuth2Client();
  auth.setCredentials({ access_token: options.accessToken });
  // gaxios must not retry or time out on its own (see the gateway): the loop and the deadline below do.
  const api = new calendar_v3.Calendar({ auth, rootUrl: options.apiRoot, retry: false });
  const tries = Math.max(1, options.attempts ?? 2);
  let error: CalendarError | undefined;
  for (let i = 0; i < tries; i++) {
    if (i > 0) await new Promise((r) => setTimeout(r, 500));
    const limit = deadline(options.timeoutMs ?? 10_000);
    try {
      await api.calendars.get(
        {
          calendarId: options.calendarId,
          fields: "id",
          ...(options.quotaUser ? { quotaUser: options.quotaUser } : {}),
        },
        { signal: limit.signal },
      );
      return { outcome: "reached" };
    } catch (err) {
      error = classifyError(attemptFailure(limit, err), "calendar", `calendars.get ${options.calendarId}`);
      if (NO_ACCESS.has(error.kind)) return { outcome: "no_access", error };
      if (!error.retryable) break;
    } finally {
      limit.end();
    }
  }
  return { outcome: "failed", error: error! };
}
