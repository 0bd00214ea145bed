// Owns what GET /status reports (the StatusSnapshot shape) and its small HTML rendering for people; every value
// that reaches the page is escaped.
import type { MappingStatus } from "../sync/mapping-report.ts";
import type { ChannelHealth, RenewalResult } from "../sync/push-health.ts";

/** A therapist's Google push channel, on the leader when google.push is configured. */
export interface TherapistPushStatus {
  /**
   * confirmed: open, and Google's first message (or a notification) reached us; unconfirmed: open, not confirmed yet
   * (polled at the short interval meanwhile); suspect: it missed a change, being replaced; none: no open channel
   * (never opened, expired, or not reopened after a failed renewal): polling covers the calendar.
   */
  state: ChannelHealth;
  /** The channel's expiration (past when it expired without a renewal), or null when none was opened. */
  expiresAt: string | null;
  /** The last change notification for the calendar (not Google's first message), or null. */
  lastNotificationAt: string | null;
  /** The last renewal that failed, until a later one opens a channel; the API's code and status, never its text. */
  lastRenewalError: { at: string; message: string; result: Exclude<RenewalResult, "opened"> } | null;
}

/** Times are ISO 8601 strings (UTC), or null when unknown / never. */
export interface TherapistStatus {
  therapistId: string;
  name?: string;
  calendarId: string;
  lastSyncAt: string | null;
  lastError: { at: string; message: string } | null;
  counts: { eventsMirrored: number; writebacks: number };
  credentials: {
    ok: boolean;
    detail?: string;
    checkedAt?: string;
    /** While failing: Google's reason (invalid_grant, insufficientPermissions, accessNotConfigured, ...). */
    reason?: string;
    /** While failing: what a person must do. */
    hint?: string;
    /** While failing, for an OAuth therapist: the command that reconnects them (none for a token given in the file). */
    reconnect?: string;
  };
  /** Set while the calendar is paused (quotaExceeded, revoked credentials). */
  pausedUntil: string | null;
  /** Calendar changes held by the write-back guard (`calbridge writeback held`). */
  writebacksHeld: number;
  /** With google.push, on the leader (a standby opens no channels): the therapist's push channel. */
  push?: TherapistPushStatus;
}

export interface RateLimitStatus {
  limit: number | null;
  remaining: number | null;
  resetAt: string | null;
  /** Set while the whole booking queue waits after a 429 or a spent budget. */
  pausedUntil: string | null;
}

export interface StatusSnapshot {
  generatedAt: string;
  /** This replica's holder id, when running with a lease. */
  instance?: string;
  leader: boolean;
  /** Set while Redis refuses the leader lease (an ACL without scripting: no replica can lead), with the fix. */
  leaseProblem?: string;
  lastReconcileAt: string | null;
  queues: Record<string, number>;
  deadLetters: number;
  /** Calendar changes held by the write-back guard, over all therapists. */
  writebacksHeld: number;
  rateLimit: RateLimitStatus | null;
  therapists: TherapistStatus[];
  /** Appointments with the newest history entries, newest first, each with the admin route of its history. */
  history?: {
    retentionDays: number;
    recent: { appointmentId: string; at: string; kind: string; origin: string; href: string }[];
  };
  /** What the links say about the mapping (removed therapists, events moving or left behind); absent until read. */
  mapping?: MappingStatus;
}

const ENTITIES: Record<string, string> = { "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;" };

export function escapeHtml(value: unknown): string {
  return String(value ?? "").replace(/[&<>"']/g, (c) => ENTITIES[c]!);
}

const dash = (v: string | null | undefined) => (v ? escapeHtml(v) : "—");

function row(cells: string[], tag = "td"): string {
  return `<tr>${cells.map((c) => `<${tag}>${c}</${tag}>`).join("")}</tr>`;
}

/** The push cell: the channel's state and expiry, the last notification, and a renewal failing, if one is. */
function pushCell(p: TherapistPushStatus | undefined): string {
  if (!p) return "—";
  const state =
    p.state === "confirmed"
      ? `<span class="ok">confirmed</span>`
      : p.state === "unconfirmed"
        ? "unconfirmed"
        : `<span class="bad">${p.state === "none" ? "none: polled" : escapeHtml(p.state)}</span>`;
  return (
    state +
    (p.expiresAt ? `, ${p.state === "none" ? "expired" : "expires"} ${escapeHtml(p.expiresAt)}` : "") +
    (p.lastNotificationAt ? `<br>last notification ${escapeHtml(p.lastNotificationAt)}` : "") +
    (p.lastRenewalError
      ? `<br><span class="bad">renewal failed: ${escapeHtml(p.lastRenewalError.message)}</span> (${escapeHtml(p.lastRenewalError.at)})`
      : "")
  );
}

function therapistRow(t: TherapistStatus, withPush: boolean): string {
  const who = t.name
    ? `${escapeHtml(t.name)} <small>(${escapeHtml(t.therapistId)})</small>`
    : escapeHtml(t.therapistId);
  const c = t.credentials;
  const creds = c.ok
    ? `<span class="ok">ok</span>`
    : `<span class="bad">failing</span>${c.reason ? ` (${escapeHtml(c.reason)})` : ""}${c.detail ? `: ${escapeHtml(c.detail)}` : ""}` +
      (c.hint ? `<br><b>Fix:</b> ${escapeHtml(c.hint)}` : "") +
      (c.reconnect ? `<br><b>Needs a reconnect link:</b> <code>${escapeHtml(c.reconnect)}</code>` : "");
  const error = t.lastError
    ? `<span class="bad">${escapeHtml(t.lastError.message)}</span> (${dash(t.lastError.at)})`
    : "—";
  return row([
    who,
    escapeHtml(t.calendarId),
    dash(t.lastSyncAt),
    escapeHtml(t.counts.eventsMirrored),
    t.writebacksHeld > 0
      ? `${escapeHtml(t.counts.writebacks)}<br><span class="bad">${escapeHtml(t.writebacksHeld)} held</span>: <code>calbridge writeback held --therapist ${escapeHtml(t.therapistId)}</code>`
      : escapeHtml(t.counts.writebacks),
    creds,
    dash(t.pausedUntil),
    error,
    ...(withPush ? [pushCell(t.push)] : []),
  ]);
}

/** Therapists no longer mapped, events moving to a changed calendar, events left in an unreachable old one. */
function mappingHtml(m: MappingStatus | undefined): string {
  if (!m) return "";
  const rows = [
    ...m.unmapped.map((u) =>
      row([
        `<span class="bad">not mapped</span>`,
        escapeHtml(u.therapistId),
        `${escapeHtml(u.events)} calbridge events in ${escapeHtml(u.calendarIds.join(", ") || "their calendar")}`,
        `<code>${escapeHtml(u.purge)}</code>`,
      ]),
    ),
    ...m.moving.map((v) =>
      row(["moving", escapeHtml(v.therapistId), `${escapeHtml(v.events)} events to the calendar now mapped`, "—"]),
    ),
    ...m.leftBehind.map((l) =>
      row([
        `<span class="bad">left behind</span>`,
        escapeHtml(l.therapistId),
        `${escapeHtml(l.events)} events in ${escapeHtml(l.calendarId)}, not reachable (${escapeHtml(l.reason)}) since ${escapeHtml(l.since)}`,
        `<code>${escapeHtml(l.purge)}</code> once it is reachable again`,
      ]),
    ),
  ];
  if (rows.length === 0) return "";
  return `<h2>Mapping</h2>
<table>
${row(["", "Therapist", "Events", "Clean up"], "th")}
${rows.join("\n")}
</table>
`;
}

/** The page; `more` is HTML (already escaped) shown after the therapists' table. */
export function renderStatusHtml(s: StatusSnapshot, more = ""): string {
  const rl = s.rateLimit;
  const queues = Object.entries(s.queues)
    .map(([name, depth]) => `${escapeHtml(name)}: ${escapeHtml(depth)}`)
    .join(", ");
  const summary = [
    ["Role", `${s.leader ? "leader" : "standby"}${s.leaseProblem ? `: ${s.leaseProblem}` : ""}`],
    ["Instance", s.instance ?? "—"],
    ["Last reconciliation", s.lastReconcileAt ?? "never"],
    ["Dead letters", String(s.deadLetters)],
    ["Write-backs held", String(s.writebacksHeld)],
    ["Rate limit", rl ? `${rl.remaining ?? "?"} of ${rl.limit ?? "?"} left, resets ${rl.resetAt ?? "?"}` : "—"],
    ["Booking queue paused until", rl?.pausedUntil ?? "—"],
  ]
    .map(([k, v]) => row([escapeHtml(k), escapeHtml(v)]))
    .join("\n");
  const withPush = s.therapists.some((t) => t.push !== undefined);
  const head = row(
    [
      "Therapist",
      "Calendar",
      "Last sync",
      "Events",
      "Write-backs",
      "Credentials",
      "Paused until",
      "Last error",
      ...(withPush ? ["Push channel"] : []),
    ],
    "th",
  );
  return `<!doctype html>
<html lang="en"><head><meta charset="utf-8"><meta http-equiv="refresh" content="30">
<title>calbridge status</title>
<style>body{font:14px system-ui,sans-serif;margin:2em}table{border-collapse:collapse;margin-bottom:1.5em}
td,th{border:1px solid #ccc;padding:.3em .6em;text-align:left;vertical-align:top}.ok{color:#070}.bad{color:#b00}</style>
</head><body>
<h1>calbridge status</h1>
<p>Generated ${escapeHtml(s.generatedAt)}</p>
<table>
${summary}
${row([escapeHtml("Queues"), queues || "—"])}
</table>
<table>
${head}
${s.therapists.map((t) => therapistRow(t, withPush)).join("\n")}
</table>
${mappingHtml(s.mapping)}${more}
</body></html>
`;
}
