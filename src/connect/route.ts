// Owns the connect pages' routes on the daemon's public listener: GET /connect?invite=... (check the link, start the
// consent with state and PKCE) and GET /connect/callback (check the state, exchange the code, check the granted
// scopes, check the chosen account opens the mapped calendar and may change its events, mark the link used, store the
// refresh token, confirm). Small and bounded: nothing is stored for a link that does not verify, and no page or log
// line carries a token or customer data.

import { createHash, randomBytes } from "node:crypto";
import type { IncomingMessage, ServerResponse } from "node:http";
import { quotaUserOf } from "../calendar/gateway.ts";
import { requestToken } from "../calendar/oauth-client.ts";
import { reachCalendar } from "../calendar/reach.ts";
import { CALENDAR_SCOPE, grantedScopes, grantsCalendar } from "../calendar/scopes.ts";
import type { Clock } from "../clock.ts";
import type { Config, TherapistConfig } from "../config/schema.ts";
import type { RouteHandler } from "../daemon/http.ts";
import { calendarTakenBy } from "../daemon/same-calendar.ts";
import { type Logger, secrets } from "../log.ts";
import { CALLBACK_PATH, CONNECT_PATH } from "../public-paths.ts";
import type { CredentialStore } from "../store/secrets.ts";
import type { Store } from "../store/store.ts";
import { describeError } from "../sync/errors.ts";
import { callbackUrl, type Invite, inviteUrl, MAX_TOKEN_LENGTH, notConnectable, verifyInvite } from "./invite.ts";
import { ConnectLedger } from "./ledger.ts";
import {
  connectedPage,
  landingPage,
  missingScopePage,
  noAccessPage,
  problemPage,
  type Subject,
  sameCalendarPage,
  sendPage,
  uncheckedPage,
  viewOnlyPage,
} from "./pages.ts";

export interface ConnectOptions {
  config: Config;
  store: Store;
  /** Where the refresh token is kept, encrypted (the same store `calbridge authorize` uses). */
  credentials: CredentialStore;
  clock: Clock;
  logger: Logger;
  /** The therapist's new refresh token is stored: make the daemon use it now (every replica) and backfill. */
  connected(therapistId: string): Promise<void>;
  /** The therapist's appointments in the sync window, as the booking service lists them now. */
  countAppointments(therapistId: string): Promise<number>;
  /** How long the count may take before the page is shown without it (default 10 s). */
  countTimeoutMs?: number;
  /** The real calendar ids of the therapists' mappings the daemon resolved (`primary` included), refused ones left out. */
  calendarsInUse?: () => ReadonlyMap<string, string>;
}

type Page = { status: number; html: string };

export function createConnectHandler(options: ConnectOptions): RouteHandler {
  const { config, clock } = options;
  const connect = config.connect;
  const oauth = config.google.oauth;
  if (!connect || !oauth) throw new Error("connect pages need connect and google.oauth in the configuration");
  const log = options.logger.child({ component: "connect" });
  const ledger = new ConnectLedger(options.store);
  const clinic = connect.clinic_name;
  const redirectUri = callbackUrl(connect.public_url);

  const therapist = (id: string): TherapistConfig | undefined => config.therapists.find((t) => t.therapist_id === id);
  const subject = (t: TherapistConfig): Subject => ({
    clinic,
    therapist: t.name ?? t.therapist_id,
    calendarId: t.calendar_id,
  });
  const askForNew = `Ask ${clinic} for a new link.`;

  /** The link's therapist, if the link may still be used; otherwise the page that says why not. */
  const usable = async (token: string): Promise<{ invite: Invite; t: TherapistConfig } | Page> => {
    const check = verifyInvite(token, connect.secret, clock.now());
    // A signed token is a credential of sorts: kept out of the log lines (the request line included). Only a signed
    // one: registering whatever a stranger sends would let them blank out words in the logs.
    if (check.ok || check.problem === "expired") secrets.addEphemeral(token);
    if (!check.ok && check.problem === "expired") {
      return {
        status: 410,
        html: problemPage(
          "This link has expired",
          `It was valid until ${new Date(check.invite.expiresAt).toUTCString()}. ${askForNew}`,
        ),
      };
    }
    if (!check.ok) {
      return {
        status: 400,
        html: problemPage("This link is not valid", `It may have been cut short when it was copied. ${askForNew}`),
      };
    }
    const t = therapist(check.invite.therapistId);
    if (!t || notConnectable(config, t.therapist_id)) {
      return {
        status: 404,
        html: problemPage(
          "This link is no longer in use",
          `${clinic} does not connect this calendar through a link any more. ${askForNew}`,
        ),
      };
    }
    if (await ledger.isUsed(check.invite)) {
      return {
        status: 410,
        html: problemPage(
          "This link was already used",
          `A calendar was connected with it. If yours stopped showing appointments, ask ${clinic} for a new link.`,
        ),
      };
    }
    return { invite: check.invite, t };
  };

  /** GET /connect?invite=...: the landing page, whose button starts the consent (state and PKCE kept in the store). */
  const landing = async (url: URL): Promise<Page> => {
    const token = url.searchParams.get("invite") ?? "";
    const found = await usable(token);
    if ("status" in found) return found;
    if (!options.credentials.canSave) {
      // Checked before the consent: a token that then could not be kept would be a consent for nothing.
      log.error(
        { therapist_id: found.t.therapist_id },
        "connect: store.encryption_key is not set; nothing can be stored",
      );
      return {
        status: 503,
        html: problemPage(
          "Connecting is not set up yet",
          `${clinic} has to finish setting calbridge up before calendars can be connected. Nothing was changed.`,
        ),
      };
    }
    const state = randomBytes(24).toString("base64url");
    const verifier = randomBytes(48).toString("base64url");
    await ledger.saveAttempt(state, { invite: found.invite, token, verifier });
    const google = new URL(config.google.auth_url);
    const query: Record<string, string> = {
      client_id: oauth.client_id,
      redirect_uri: redirectUri,
      response_type: "code",
      scope: CALENDAR_SCOPE,
      access_type: "offline",
      prompt: "consent",
      state,
      code_challenge: createHash("sha256").update(verifier).digest("base64url"),
      code_challenge_method: "S256",
    };
    if (found.t.impersonate) query.login_hint = found.t.impersonate;
    for (const [k, v] of Object.entries(query)) google.searchParams.set(k, v);
    log.info({ therapist_id: found.t.therapist_id }, "connect link opened");
    return { status: 200, html: landingPage(subject(found.t), google.toString(), found.invite.expiresAt) };
  };

  const count = async (therapistId: string) => {
    let timer: NodeJS.Timeout | undefined;
    try {
      const n = await Promise.race([
        options.countAppointments(therapistId),
        new Promise<never>((_, reject) => {
          timer = setTimeout(() => reject(new Error("counting took too long")), options.countTimeoutMs ?? 10_000);
        }),
      ]);
      return { n, pastDays: config.sync.window.past_days, futureDays: config.sync.window.future_days };
    } catch (err) {
      log.warn({ therapist_id: therapistId, err: describeError(err) }, "appointments not counted for the page");
      return undefined;
    } finally {
      clearTimeout(timer);
    }
  };

  /** GET /connect/callback: Google's answer. */
  const callback = async (url: URL): Promise<Page> => {
    const q = url.searchParams;
    const code = q.get("code") ?? "";
    const state = q.get("state") ?? "";
    const attempt = state && state.length <= 100 ? await ledger.takeAttempt(state) : undefined;
    if (attempt) secrets.addEphemeral(code);
    if (!attempt) {
      return {
        status: 400,
        html: problemPage(
          "This answer from Google was not expected",
          "It does not belong to a connection in progress, or more than 30 minutes passed. Open your link again.",
        ),
      };
    }
    const retry = inviteUrl(connect.public_url, attempt.token);
    const found = await usable(attempt.token);
    if ("status" in found) return found;
    const { invite, t } = found;
    const ids = { therapist_id: t.therapist_id };
    const error = q.get("error");
    if (error || !code) {
      log.info({ ...ids, error: (error ?? "no code").slice(0, 64) }, "connect: consent not given");
      return {
        status: 200,
        html: problemPage(
          "Nothing was connected",
          error === "access_denied"
            ? "You did not allow access on Google's page. Nothing was saved."
            : "Google did not complete the sign-in. Nothing was saved.",
          retry,
        ),
      };
    }
    let answer: Awaited<ReturnType<typeof requestToken>>;
    try {
      // One request: a code is single-use, so a resend could only hide the first answer's error.
      answer = await requestToken({
        url: config.google.token_url,
        form: {
          grant_type: "authorization_code",
          code,
          code_verifier: attempt.verifier,
          redirect_uri: redirectUri,
          client_id: oauth.client_id,
          client_secret: oauth.client_secret,
        },
        what: "connect: authorization code exchange",
        timeoutMs: 30_000,
      });
    } catch (err) {
      log.warn({ ...ids, err: describeError(err) }, "connect: Google refused the code exchange; nothing stored");
      return {
        status: 502,
        html: problemPage("Google did not complete the connection", "Nothing was saved. Please try again.", retry),
      };
    }
    const refreshToken = typeof answer.refresh_token === "string" ? answer.refresh_token : "";
    secrets.add(refreshToken);
    // Granular consent: the box may have been left unticked; such a token would only ever get 403s.
    const scopes = answer.scope === undefined ? [CALENDAR_SCOPE] : grantedScopes(answer.scope);
    if (!grantsCalendar(scopes)) {
      log.warn(
        { ...ids, granted: scopes.join(" ") || "none" },
        "connect: consent without the calendar scope; nothing stored, the page says what to tick",
      );
      return { status: 403, html: missingScopePage(subject(t), retry) };
    }
    if (!refreshToken) {
      log.warn(ids, "connect: Google sent no refresh token; nothing stored");
      return {
        status: 502,
        html: problemPage(
          "Google did not grant lasting access",
          "Remove the app's access at https://myaccount.google.com/permissions, then open the link again.",
          retry,
        ),
      };
    }
    // The account chosen on Google's page must open the mapped calendar (a shared one may belong to another account),
    // and not only see it (a view-only share): checked with the fresh access token before the link is spent, so a
    // wrong choice leaves the link usable. Where Google does not tell the role, the account is taken (logged at info).
    const reach = await reachCalendar({
      apiRoot: config.google.api_root,
      calendarId: t.calendar_id,
      accessToken: answer.access_token,
      quotaUser: quotaUserOf(t.therapist_id),
    });
    if (reach.outcome === "view_only") {
      log.warn(
        { ...ids, calendar_id: t.calendar_id, access_role: reach.role },
        "connect: the Google account chosen may only see the mapped calendar, not change its events; nothing stored, the link still works",
      );
      return { status: 403, html: viewOnlyPage(subject(t), retry) };
    }
    if (reach.outcome !== "reached") {
      const noAccess = reach.outcome === "no_access";
      log.warn(
        { ...ids, calendar_id: t.calendar_id, err: describeError(reach.error) },
        noAccess
          ? "connect: the Google account chosen cannot open the mapped calendar; nothing stored, the link still works"
          : "connect: access to the mapped calendar could not be checked; nothing stored, the link still works",
      );
      return noAccess
        ? { status: 403, html: noAccessPage(subject(t), retry) }
        : { status: 503, html: uncheckedPage(subject(t), retry) };
    }
    const taken = reach.calendarId
      ? calendarTakenBy(
          config.therapists,
          t.therapist_id,
          reach.calendarId,
          config.google.auth,
          options.calendarsInUse?.(),
        )
      : undefined;
    if (taken) {
      log.warn(
        { ...ids, calendar_id: reach.calendarId, other_therapist_id: taken.therapist_id },
        "connect: the Google account chosen is another mapped therapist's calendar; nothing stored, the link still works",
      );
      return { status: 409, html: sameCalendarPage(reach.calendarId!, retry) };
    }
    if (reach.writeUnverified) {
      log.info(
        { ...ids, calendar_id: t.calendar_id, reason: reach.writeUnverified },
        "connect: the chosen account opens the mapped calendar; whether it may change events there could not be told",
      );
    }
    if (!(await ledger.claim(invite, clock.now()))) {
      return {
        status: 410,
        html: problemPage("This link was already used", "A calendar was connected with it a moment ago."),
      };
    }
    try {
      await options.credentials.saveRefreshToken(
        t.therapist_id,
        refreshToken,
        { source: "connect", scope: scopes.join(" ") },
        clock.now(),
      );
    } catch (err) {
      await ledger.release(invite).catch(() => {});
      log.error({ ...ids, err: describeError(err) }, "connect: the refresh token could not be stored");
      return {
        status: 503,
        html: problemPage(
          "The connection could not be saved",
          "Nothing was changed. Please try again in a few minutes.",
          retry,
        ),
      };
    }
    log.info({ ...ids, scopes: scopes.join(" ") }, "therapist connected their Google calendar");
    await options.connected(t.therapist_id).catch((err: unknown) => {
      log.error(
        { ...ids, err: describeError(err) },
        "connect: the daemon could not take up the new credentials; a restart will",
      );
    });
    return { status: 200, html: connectedPage(subject(t), await count(t.therapist_id)) };
  };

  return async (req: IncomingMessage, res: ServerResponse): Promise<boolean> => {
    const target = req.url ?? "/";
    const path = target.split("?")[0];
    if (path !== CONNECT_PATH && path !== CALLBACK_PATH) return false;
    req.resume();
    if (req.method !== "GET") {
      res.writeHead(405, { Allow: "GET", "Content-Type": "text/plain" }).end("Method not allowed\n");
      return true;
    }
    if (target.length > MAX_TOKEN_LENGTH + 4096) {
      sendPage(res, 414, problemPage("This address is too long", askForNew));
      return true;
    }
    const url = new URL(target, "http://connect.invalid");
    const page = path === CONNECT_PATH ? await landing(url) : await callback(url);
    sendPage(res, page.status, page.html);
    return true;
  };
}
