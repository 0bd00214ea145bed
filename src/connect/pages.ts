// Owns the HTML of the connect pages: plain, server-rendered, every value escaped, one inline style allowed by its
// hash under a Content-Security-Policy that permits nothing else; no customer data ever reaches them.
import { createHash } from "node:crypto";
import type { ServerResponse } from "node:http";
import { CALENDAR_SCOPE_LABEL } from "../calendar/scopes.ts";
import { escapeHtml as e } from "../daemon/status-page.ts";

const STYLE =
  "body{font:16px/1.5 system-ui,sans-serif;max-width:36em;margin:3em auto;padding:0 1em;color:#222}" +
  "a.button{display:inline-block;background:#1a73e8;color:#fff;padding:.6em 1.2em;border-radius:4px;text-decoration:none}" +
  "small{color:#555}.box{background:#f1f3f4;padding:.6em .8em;border-radius:4px}";

const STYLE_HASH = createHash("sha256").update(STYLE).digest("base64");

export const PAGE_HEADERS: Readonly<Record<string, string>> = {
  "Content-Type": "text/html; charset=utf-8",
  "Content-Security-Policy": `default-src 'none'; style-src 'sha256-${STYLE_HASH}'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'`,
  "X-Content-Type-Options": "nosniff",
  "X-Frame-Options": "DENY",
  // The link carries its token in the address: never hand it to Google (or anyone) in a Referer.
  "Referrer-Policy": "no-referrer",
  "Cache-Control": "no-store",
};

export function sendPage(res: ServerResponse, status: number, html: string): void {
  res.writeHead(status, { ...PAGE_HEADERS, "Content-Length": Buffer.byteLength(html) });
  res.end(html);
}

function layout(title: string, body: string): string {
  return `<!doctype html>
<html lang="en"><head><meta charset="utf-8"><meta name="viewport" content="width=device-width, initial-scale=1">
<title>${e(title)}</title><style>${STYLE}</style></head>
<body>
<h1>${e(title)}</h1>
${body}
</body></html>
`;
}

/** Who and what a page is about. */
export interface Subject {
  clinic: string;
  /** The therapist's display name, or id. */
  therapist: string;
  /** therapists[].calendar_id */
  calendarId: string;
}

const calendarWords = (calendarId: string) =>
  calendarId === "primary"
    ? "the main calendar of the Google account you choose"
    : `the Google calendar <strong>${e(calendarId)}</strong>`;

const dateOf = (ms: number) => new Date(ms).toUTCString();

export function landingPage(s: Subject, googleUrl: string, expiresAt: number): string {
  return layout(
    "Connect your Google Calendar",
    `<p>${e(s.clinic)} invites you to connect a Google Calendar for <strong>${e(s.therapist)}</strong>. Your appointments from
${e(s.clinic)}'s booking system will appear in ${calendarWords(s.calendarId)} as private events; when you move or delete
one there, the booking follows.</p>
<p class="box">On Google's page, choose your account and <strong>tick "${e(CALENDAR_SCOPE_LABEL)}"</strong>: without it no
appointment can be written to your calendar.</p>
<p><a class="button" id="continue" href="${e(googleUrl)}">Continue to Google</a></p>
<p><small>This link works once, until ${e(dateOf(expiresAt))}.</small></p>`,
  );
}

/** A page that explains what went wrong; `retryUrl` offers the link again. */
export function problemPage(title: string, message: string, retryUrl?: string): string {
  const retry = retryUrl ? `\n<p><a class="button" id="retry" href="${e(retryUrl)}">Try again</a></p>` : "";
  return layout(title, `<p>${e(message)}</p>${retry}`);
}

/** The consent came back without the calendar scope: what to tick, and the link again. */
export function missingScopePage(s: Subject, retryUrl: string): string {
  return layout(
    "Calendar access was not granted",
    `<p>Google connected your account but did not give access to your calendars, so nothing was saved and no appointment
can appear for ${e(s.therapist)}.</p>
<p class="box">Open the link again and, on Google's page, <strong>tick "${e(CALENDAR_SCOPE_LABEL)}"</strong> before you
press Allow (Continue).</p>
<p><a class="button" id="retry" href="${e(retryUrl)}">Try again</a></p>`,
  );
}

/** The account chosen on Google's page cannot open the mapped calendar: which account to choose, and the link again. */
export function noAccessPage(s: Subject, retryUrl: string): string {
  return layout(
    "This Google account cannot open your calendar",
    `<p>The Google account you chose cannot open ${calendarWords(s.calendarId)}, where ${e(s.clinic)} puts the
appointments of ${e(s.therapist)}. Nothing was saved, and your link still works.</p>
<p class="box">Open the link again and, on Google's page, <strong>choose the account that owns this calendar</strong>, or
ask its owner to share it with your account ("Make changes to events").</p>
<p><a class="button" id="retry" href="${e(retryUrl)}">Try again</a></p>`,
  );
}

/**
 * The account chosen is the one whose calendar is already another mapped therapist's (a browser signed in as a
 * colleague): keeping it would put two therapists on one calendar. Which calendar, whose account to use, the link.
 */
export function sameCalendarPage(calendarId: string, retryUrl: string): string {
  return layout(
    "This Google account is another therapist's",
    `<p>The Google account you chose has the calendar ${e(calendarId)}, which is already another therapist's calendar.
Two therapists cannot share one calendar, so nothing was saved, and your link still works.</p>
<p class="box">Sign out of Google (or open the link in a private window), open the link again and, on Google's page,
<strong>sign in with your own Google account</strong>.</p>
<p><a class="button" id="retry" href="${e(retryUrl)}">Try again</a></p>`,
  );
}

/**
 * The account chosen can only see the mapped calendar (shared "See all event details" or "See only free/busy"): no
 * appointment could be written to it. What the share needs, in the words of Google's sharing settings, and the link.
 */
export function viewOnlyPage(s: Subject, retryUrl: string): string {
  return layout(
    "This Google account can only see your calendar",
    `<p>The Google account you chose can see ${calendarWords(s.calendarId)}, where ${e(s.clinic)} puts the appointments of
${e(s.therapist)}, but it may not change events there, so no appointment could be written to it. Nothing was saved, and
your link still works.</p>
<p class="box">Ask the calendar's owner to share it with your account with the permission <strong>"Make changes to
events"</strong> (in the calendar's "Settings and sharing"), then open the link again; or, on Google's page, choose the
account that owns this calendar.</p>
<p><a class="button" id="retry" href="${e(retryUrl)}">Try again</a></p>`,
  );
}

/** Google did not answer the access check: nothing was saved, the consent is to be given again. */
export function uncheckedPage(s: Subject, retryUrl: string): string {
  return layout(
    "Your calendar could not be checked",
    `<p>Google did not answer when calbridge checked that your account can open ${calendarWords(s.calendarId)}.
Nothing was saved, and your link still works: please try again in a few minutes.</p>
<p><a class="button" id="retry" href="${e(retryUrl)}">Try again</a></p>`,
  );
}

export function connectedPage(
  s: Subject,
  count: { n: number; pastDays: number; futureDays: number } | undefined,
): string {
  const what =
    count === undefined
      ? `Your appointments from ${e(s.clinic)} will appear in ${calendarWords(s.calendarId)} within a few minutes.`
      : `<strong id="count">${count.n}</strong> ${count.n === 1 ? "appointment" : "appointments"} from ${e(s.clinic)} will appear in ${calendarWords(s.calendarId)} within a few minutes.`;
  const source =
    count === undefined
      ? "(They could not be counted just now; they appear all the same.)"
      : `Counted in ${e(s.clinic)}'s booking system just now: ${e(s.therapist)}'s appointments from ${count.pastDays} days ago to ${count.futureDays} days ahead.`;
  return layout(
    "Your calendar is connected",
    `<p>${what}</p>
<p><small>${source}</small></p>
<p>You can close this page. If your calendar ever stops showing new appointments, ask ${e(s.clinic)} for a new link.</p>`,
  );
}
