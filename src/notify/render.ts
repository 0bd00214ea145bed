// Owns what a message looks like: one notice in full, or several as one summary (the rate limit's storm becomes one
// message), as plain text (e-mail) and as each chat's incoming-webhook payload. Escaping follows each receiver's rules.
import type { Text } from "./conditions.ts";

export interface Message {
  /** E-mail subject and first line of a chat message: "[label] ...". */
  subject: string;
  /** The notices, each with its own title; one means a full message, more a summary. */
  items: Text[];
  /** Notices dropped earlier because the queue was full. */
  dropped: number;
  /** Who sends it, for the footer ("calbridge (label)"). */
  label: string;
}

/** At most this many notices are written out in a summary; the rest are counted. */
export const SUMMARY_ITEMS = 25;

/** `opened` of the items opened a condition, `updated` told one that stays open changed; the others cleared one. */
export function compose(label: string, items: Text[], opened: number, dropped = 0, updated = 0): Message {
  const first = items[0];
  if (items.length === 1 && first) return { subject: `[${label}] ${first.title}`, items, dropped, label };
  const cleared = items.length - opened - updated;
  const parts = [
    opened > 0 ? `${opened} new` : "",
    updated > 0 ? `${updated} changed` : "",
    cleared > 0 ? `${cleared} recovered` : "",
  ].filter(Boolean);
  return { subject: `[${label}] ${items.length} changes: ${parts.join(", ")}`, items, dropped, label };
}

const FOOTER =
  "calbridge sends one message when a problem starts, one if what fixes it changes, and one when it ends; /status and " +
  "the log have the details.";

function shown(m: Message): { items: Text[]; more: number } {
  return { items: m.items.slice(0, SUMMARY_ITEMS), more: Math.max(0, m.items.length - SUMMARY_ITEMS) + m.dropped };
}

/** Plain text: the e-mail body, and the fallback text of rich payloads. */
export function plainText(m: Message): string {
  const { items, more } = shown(m);
  const single = m.items.length === 1;
  const blocks = items.map((t) => {
    const head = single ? "" : `* ${t.title}\n  `;
    const link = t.link ? `\n${single ? "" : "  "}${t.link.label}: ${t.link.url}` : "";
    return `${head}${t.text}${link}`;
  });
  if (more > 0) blocks.push(`... and ${more} more (see /status and the log).`);
  return `${m.subject}\n\n${blocks.join("\n\n")}\n\n-- \n${FOOTER}\n`;
}

// Slack treats &, < and > as control characters in `text` and asks senders to escape them as HTML entities
// (https://api.slack.com/reference/surfaces/formatting, "Escaping text"); links are written <url|label>.
const slackEscape = (s: string) => s.replaceAll("&", "&amp;").replaceAll("<", "&lt;").replaceAll(">", "&gt;");
const slackUrl = (u: string) =>
  u.replaceAll("&", "&amp;").replaceAll("<", "%3C").replaceAll(">", "%3E").replaceAll("|", "%7C");

/** Slack incoming webhooks (and Mattermost's, which take the same `text`). */
export function slackPayload(m: Message): { text: string } {
  const { items, more } = shown(m);
  const lines = [`*${slackEscape(m.subject)}*`];
  for (const t of items) {
    if (m.items.length > 1) lines.push(`• *${slackEscape(t.title)}*`);
    lines.push(slackEscape(t.text));
    if (t.link) lines.push(`<${slackUrl(t.link.url)}|${slackEscape(t.link.label)}>`);
  }
  if (more > 0) lines.push(`… and ${more} more (see /status and the log).`);
  return { text: lines.join("\n") };
}

const htmlEscape = (s: string) =>
  s.replaceAll("&", "&amp;").replaceAll("<", "&lt;").replaceAll(">", "&gt;").replaceAll('"', "&quot;");

/**
 * Matrix through hookshot's generic webhooks: `text` is the plain body and `html` the formatted one; with `html` given,
 * `text` is not read as Markdown (matrix-org/matrix-hookshot, docs/setup/webhooks.md, "Webhook Handling").
 */
export function matrixPayload(m: Message): { text: string; html: string } {
  const { items, more } = shown(m);
  const html = [`<p><strong>${htmlEscape(m.subject)}</strong></p>`];
  for (const t of items) {
    const link = t.link ? `<br><a href="${htmlEscape(t.link.url)}">${htmlEscape(t.link.label)}</a>` : "";
    const title = m.items.length > 1 ? `<strong>${htmlEscape(t.title)}</strong><br>` : "";
    html.push(`<p>${title}${htmlEscape(t.text)}${link}</p>`);
  }
  if (more > 0) html.push(`<p>… and ${more} more (see /status and the log).</p>`);
  return { text: plainText(m).trimEnd(), html: html.join("") };
}

/**
 * Microsoft Teams Workflows ("Post to a channel when a webhook request is received") take Adaptive Cards only, in a
 * message envelope: {type: "message", attachments: [{contentType: "application/vnd.microsoft.card.adaptive", content}]}
 * (learn.microsoft.com, Teams platform, "Create and send messages", Known issues; prometheus/alertmanager#3920 and
 * louislam/uptime-kuma#4934 report the same shape, and that a plain {text} fails there).
 */
export function teamsPayload(m: Message): Record<string, unknown> {
  const { items, more } = shown(m);
  const body: Record<string, unknown>[] = [
    { type: "TextBlock", text: m.subject, weight: "Bolder", size: "Medium", wrap: true },
  ];
  for (const t of items) {
    if (m.items.length > 1)
      body.push({ type: "TextBlock", text: t.title, weight: "Bolder", wrap: true, spacing: "Medium" });
    body.push({ type: "TextBlock", text: t.text, wrap: true });
    if (t.link) body.push({ type: "TextBlock", text: `[${t.link.label}](${t.link.url})`, wrap: true });
  }
  if (more > 0) body.push({ type: "TextBlock", text: `… and ${more} more (see /status and the log).`, wrap: true });
  return {
    type: "message",
    attachments: [
      {
        contentType: "application/vnd.microsoft.card.adaptive",
        contentUrl: null,
        content: {
          $schema: "http://adaptivecards.io/schemas/adaptive-card.json",
          type: "AdaptiveCard",
          version: "1.4",
          body,
        },
      },
    ],
  };
}
