// Owns the admin listener's view of appointment histories: GET /history/APPOINTMENT_ID (JSON, or a small HTML page for
// people) and the list of recent ones on /status. Every value that reaches a page is escaped.
import type { ServerResponse } from "node:http";
import { causeOf, sentenceOf, timeOf } from "../cli/history-output.ts";
import type { RecentHistory, StoredHistory } from "../sync/history-log.ts";
import { sendJson } from "./http.ts";
import { escapeHtml, type StatusSnapshot } from "./status-page.ts";

export const HISTORY_PREFIX = "/history/";

/** Reads one appointment's history (the store, and what is still queued for it). */
export type HistorySource = (appointmentId: string) => Promise<StoredHistory>;

/** An appointment with recent entries, as /status lists it. */
export interface RecentHistoryStatus extends RecentHistory {
  href: string;
}

export function historyHref(appointmentId: string): string {
  return `${HISTORY_PREFIX}${encodeURIComponent(appointmentId)}`;
}

export function recentWithLinks(recent: RecentHistory[]): RecentHistoryStatus[] {
  return recent.map((r) => ({ ...r, href: historyHref(r.appointmentId) }));
}

const STYLE = `<style>body{font:14px system-ui,sans-serif;margin:2em}table{border-collapse:collapse;margin-bottom:1.5em}
td,th{border:1px solid #ccc;padding:.3em .6em;text-align:left;vertical-align:top}</style>`;

/** The table of recent histories on the status page. */
export function renderRecentHistory(recent: NonNullable<StatusSnapshot["history"]>["recent"]): string {
  if (recent.length === 0) return "<p>No appointment history recorded yet.</p>";
  const rows = recent.map(
    (r) =>
      `<tr><td><a href="${escapeHtml(r.href)}">${escapeHtml(r.appointmentId)}</a></td><td>${escapeHtml(timeOf(r.at))}</td><td>${escapeHtml(r.origin)}</td><td>${escapeHtml(r.kind)}</td></tr>`,
  );
  return `<h2>Recent appointment histories</h2>
<table>
<tr><th>Appointment</th><th>Last entry</th><th>Caused by</th><th>What</th></tr>
${rows.join("\n")}
</table>`;
}

export function renderHistoryHtml(appointmentId: string, h: StoredHistory, retentionDays: number): string {
  const rows = h.entries.map(
    (e) =>
      `<tr><td>${escapeHtml(timeOf(e.at))}</td><td>${escapeHtml(causeOf(e))}</td><td>${escapeHtml(sentenceOf(e))}</td></tr>`,
  );
  const body =
    h.entries.length === 0
      ? `<p>No history recorded for this appointment in the last ${escapeHtml(retentionDays)} days.</p>`
      : `<table>
<tr><th>When (UTC)</th><th>Caused by</th><th>What calbridge did</th></tr>
${rows.join("\n")}
</table>`;
  return `<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>calbridge: history of an appointment</title>
${STYLE}
</head><body>
<h1>History of appointment <code>${escapeHtml(appointmentId)}</code></h1>
<p><a href="/status.html">Back to the status page</a> · entries are kept ${escapeHtml(retentionDays)} days${h.dropped ? ` · ${escapeHtml(h.dropped)} earlier entries were dropped` : ""}</p>
${body}
</body></html>
`;
}

/** GET /history/APPOINTMENT_ID: JSON, or HTML when asked for (Accept: text/html). 404 when nothing is recorded. */
export async function serveHistory(
  path: string,
  accept: string | undefined,
  res: ServerResponse,
  o: { read: HistorySource; retentionDays: number; htmlHeaders: Record<string, string> },
): Promise<void> {
  let id: string;
  try {
    id = decodeURIComponent(path.slice(HISTORY_PREFIX.length));
  } catch {
    sendJson(res, 400, {
      error: "bad_request",
      message: "the appointment id in the path is not valid percent-encoding",
    });
    return;
  }
  const h = await o.read(id);
  const status = h.entries.length > 0 ? 200 : 404;
  if (/\btext\/html\b/.test(accept ?? "")) {
    const html = renderHistoryHtml(id, h, o.retentionDays);
    res.writeHead(status, {
      "Content-Type": "text/html; charset=utf-8",
      "Content-Length": Buffer.byteLength(html),
      ...o.htmlHeaders,
    });
    res.end(html);
    return;
  }
  sendJson(res, status, { appointmentId: id, retentionDays: o.retentionDays, ...h }, { Vary: "Accept" });
}
