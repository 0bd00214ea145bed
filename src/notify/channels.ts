// Owns the recipients of notifications and how a message reaches each: a chat's incoming webhook (one JSON POST with
// undici) or e-mail over SMTP (nodemailer). One channel per target, made at start (targets change with a restart only),
// plus one per therapist written to about their own credentials, through the first e-mail target with
// `therapists: true`. The therapists' channels and addresses are read from the live mapping each time (a reload
// changes them in place). A failed delivery throws a DeliveryError that names the target, never its address. An e-mail
// the server took for some of its recipients and refused at RCPT TO for others is delivered: the refused addresses
// come back to the notifier (Refusal), which sends to them alone what they missed through the channel's `to`.
import { domainToASCII } from "node:url";
import type { Transporter } from "nodemailer";
import { request } from "undici";
import { type Config, type NotifyTargetConfig, targetNameOf } from "../config/schema.ts";
import { secrets } from "../log.ts";
import { type Message, matrixPayload, plainText, slackPayload, teamsPayload } from "./render.ts";

export interface Channel {
  /** Key of its queue in the store: the target's name, and the therapist for a therapist's own channel. */
  readonly id: string;
  /** The target's name, for logs and metrics. */
  readonly target: string;
  readonly audience: "admins" | "therapist";
  /** The therapist a therapist's channel writes to. */
  readonly therapistId?: string;
  /** The one address of an e-mail target that a channel from `to()` writes to. */
  readonly address?: string;
  /**
   * Delivers the message; throws a DeliveryError when nobody got it. The addresses an e-mail's server refused at
   * RCPT TO while it took the message for the others come back (none for a webhook).
   */
  send(message: Message, signal?: AbortSignal): Promise<Refusal[]>;
  /**
   * An e-mail target's channel to one of its addresses alone (what that address was refused for a moment); undefined
   * for a webhook, and for an address that is no longer one of the target's (the targets change with a restart).
   */
  to?(address: string): Channel | undefined;
  close(): void;
}

/** An address the mail server refused at RCPT TO while it took the message for the others. */
export interface Refusal {
  /** As the target's `to` spells it. */
  readonly address: string;
  /** A 5xx: refused for good (no such mailbox); otherwise for a moment (a 4xx: greylisting, a full mailbox). */
  readonly permanent: boolean;
  /** The server's answer, for the log. */
  readonly detail: string;
}

export class DeliveryError extends Error {
  override readonly name = "DeliveryError";
  /**
   * The mail server refused the address itself for good (RCPT TO answered 5xx for every address it was sent to:
   * "mailbox unavailable", "no such user"): sending again cannot help. Any other refusal is not: a 5xx to calbridge's
   * own login (535), to its sender (MAIL FROM) or to the message (DATA) says nothing about the address, and the next
   * try may pass (a password fixed, an auth backend back).
   */
  readonly permanent: boolean;
  constructor(message: string, options: { permanent?: boolean } = {}) {
    super(message);
    this.permanent = options.permanent === true;
  }
}

/** A delivery that takes longer than this fails (and is retried later): a slow receiver never holds anything up. */
export const SEND_TIMEOUT_MS = 10_000;

function webhookChannel(
  name: string,
  target: Extract<NotifyTargetConfig, { type: "webhook" }>,
  timeoutMs: number,
): Channel {
  const payload = { slack: slackPayload, matrix: matrixPayload, teams: teamsPayload }[target.format];
  return {
    id: name,
    target: name,
    audience: "admins",
    async send(message, signal) {
      let res: Awaited<ReturnType<typeof request>>;
      try {
        res = await request(target.url, {
          method: "POST",
          headers: { "content-type": "application/json; charset=utf-8", "user-agent": "calbridge-notify" },
          body: JSON.stringify(payload(message)),
          headersTimeout: timeoutMs,
          bodyTimeout: timeoutMs,
          ...(signal ? { signal } : {}),
        });
      } catch (err) {
        // undici's messages may carry the address (the chat's token): registered secrets are removed.
        throw new DeliveryError(`target ${name}: ${secrets.scrub((err as Error).message ?? String(err))}`);
      }
      if (res.statusCode >= 200 && res.statusCode < 300) {
        await res.body.dump().catch(() => {});
        return [];
      }
      // The start of the answer says why (Slack: invalid_payload, no_text, ...); the rest is not read.
      let text = "";
      try {
        for await (const chunk of res.body) {
          text += String(chunk);
          if (text.length >= 200) break;
        }
      } catch {
        // what was read is enough
      }
      const said = text.trim().slice(0, 200);
      throw new DeliveryError(`target ${name}: HTTP ${res.statusCode}${said ? ` ${secrets.scrub(said)}` : ""}`);
    },
    close() {},
  };
}

/** Two spellings of one address: the case aside, and the domain as nodemailer writes it in the envelope (punycode). */
function sameAddress(a: string, b: string): boolean {
  const norm = (x: string) => {
    const at = x.lastIndexOf("@");
    const domain = x.slice(at + 1);
    return `${x.slice(0, at + 1)}${domainToASCII(domain) || domain}`.toLowerCase();
  };
  return a.toLowerCase() === b.toLowerCase() || norm(a) === norm(b);
}

/** The SMTP error of a reply in the 5xx range (a permanent refusal). */
const permanentReply = (code: unknown) => typeof code === "number" && code >= 500 && code < 600;

/**
 * Whether nodemailer's error is the mail server refusing every one of `to` for good at RCPT TO: its envelope error
 * ("all recipients were rejected", code EENVELOPE) names each address in `rejected`, and each refusal is a 5xx.
 * A refusal of the login (EAUTH), of the sender (EENVELOPE on MAIL FROM), of the message (DATA) or a lost connection
 * is not: it is about calbridge's side of the exchange, never the address.
 */
function addressesRefused(err: unknown, to: readonly string[]): boolean {
  const e = err as { code?: unknown; command?: unknown; rejected?: unknown; rejectedErrors?: unknown };
  if (e.code !== "EENVELOPE" || e.command !== "RCPT TO" || !Array.isArray(e.rejectedErrors)) return false;
  const refusals = e.rejectedErrors as { recipient?: unknown; responseCode?: unknown }[];
  return to.every((address) => {
    const mine = refusals.filter((r) => typeof r.recipient === "string" && sameAddress(r.recipient, address));
    return mine.length > 0 && mine.every((r) => permanentReply(r.responseCode));
  });
}

type EmailTarget = Extract<NotifyTargetConfig, { type: "email" }>;

/**
 * The addresses among `to` that the server refused while it took the message for others: nodemailer's `rejected`, each
 * with its RCPT TO answer in `rejectedErrors` (a refusal whose answer is not there counts as one for a moment).
 */
function refusalsOf(name: string, info: unknown, to: readonly string[]): Refusal[] {
  const { rejected, rejectedErrors } = (info ?? {}) as { rejected?: unknown; rejectedErrors?: unknown };
  if (!Array.isArray(rejected)) return [];
  const errors = (Array.isArray(rejectedErrors) ? rejectedErrors : []) as {
    recipient?: unknown;
    responseCode?: unknown;
    message?: unknown;
  }[];
  return rejected
    .filter((a): a is string => typeof a === "string")
    .map((address): Refusal => {
      const err = errors.find((e) => typeof e.recipient === "string" && sameAddress(e.recipient, address));
      return {
        address: to.find((a) => sameAddress(a, address)) ?? address,
        permanent: permanentReply(err?.responseCode),
        detail: `target ${name}: ${secrets.scrub(typeof err?.message === "string" ? err.message : "recipient refused")}`,
      };
    });
}

type Mailer = (to: string[], message: Message, signal?: AbortSignal) => Promise<Refusal[]>;

/** An e-mail target's channel to its admins, and a mailer to any address (the therapists') through its SMTP server. */
function emailChannel(name: string, target: EmailTarget, timeoutMs: number): { channel: Channel; mail: Mailer } {
  // nodemailer (and what it loads) comes with the first message: most daemons never send one.
  let transport: Promise<Transporter> | undefined;
  const transportOnce = () =>
    (transport ??= import("nodemailer").then(({ default: nodemailer }) =>
      nodemailer.createTransport({
        host: target.smtp.host,
        port: target.smtp.port,
        secure: target.smtp.secure,
        ...(target.smtp.auth ? { auth: { user: target.smtp.auth.user, pass: target.smtp.auth.pass } } : {}),
        connectionTimeout: timeoutMs,
        greetingTimeout: timeoutMs,
        socketTimeout: timeoutMs,
      }),
    ));
  const mail: Mailer = async (to, message, signal) => {
    let info: unknown;
    try {
      info = await (await transportOnce()).sendMail({
        from: target.from,
        to,
        subject: message.subject,
        text: plainText(message),
        ...(signal ? { signal } : {}),
      });
    } catch (err) {
      throw new DeliveryError(`target ${name}: ${secrets.scrub((err as Error).message ?? String(err))}`, {
        permanent: addressesRefused(err, to),
      });
    }
    return refusalsOf(name, info, to);
  };
  const channel: Channel = {
    id: name,
    target: name,
    audience: "admins",
    send: (message, signal) => mail(target.to, message, signal),
    to(address) {
      const one = target.to.find((a) => sameAddress(a, address));
      if (one === undefined) return undefined;
      return {
        id: name,
        target: name,
        audience: "admins",
        address: one,
        send: (message, signal) => mail([one], message, signal),
        close() {},
      };
    },
    close: () => void transport?.then((t) => t.close()),
  };
  return { channel, mail };
}

/** The therapist's own address in the mapping as it is now: OAuth therapists only (they can reconnect themselves). */
function therapistAddress(config: Config, therapistId: string): string | undefined {
  const t = config.therapists.find((x) => x.therapist_id === therapistId);
  if (!t?.email || (t.auth?.type ?? config.google.auth.type) !== "oauth") return undefined;
  return t.email;
}

export interface NotifyChannels {
  /** Each target's channel to its admins: made once (the targets change with a restart only). */
  readonly targets: readonly Channel[];
  /**
   * One channel per OAuth therapist with an `email` in the live mapping, through the first e-mail target with
   * `therapists: true` (none without one). Keyed `<target>:therapist:<id>`, so a therapist's queue and rate limit
   * outlive a reload; the address is the mapping's at the time of sending.
   */
  therapists(): Channel[];
  close(): void;
}

/** The channels of the configured targets; `config` is the live one (a reload changes its mapping in place). */
export function notifyChannels(config: Config, timeoutMs = SEND_TIMEOUT_MS): NotifyChannels {
  const targets: Channel[] = [];
  let therapistMail: { name: string; mail: ReturnType<typeof emailChannel>["mail"] } | undefined;
  config.notify.targets.forEach((target, i) => {
    const name = targetNameOf(target, i);
    if (target.type === "webhook") {
      targets.push(webhookChannel(name, target, timeoutMs));
      return;
    }
    const { channel, mail } = emailChannel(name, target, timeoutMs);
    targets.push(channel);
    // One therapist is written to once, however many targets ask for it: each message has a single-use link of its own.
    if (target.therapists && !therapistMail) therapistMail = { name, mail };
  });
  const therapists = (): Channel[] => {
    if (!therapistMail) return [];
    const { name, mail } = therapistMail;
    return config.therapists
      .filter((t) => therapistAddress(config, t.therapist_id) !== undefined)
      .map(
        (t): Channel => ({
          id: `${name}:therapist:${t.therapist_id}`,
          // Their own label: a therapist's address refused is not the admins' target failing (alerts, doctor).
          target: `${name}/therapists`,
          audience: "therapist",
          therapistId: t.therapist_id,
          async send(message, signal) {
            // Read again now: a reload since the check may have changed or removed the address (the link is theirs).
            const to = therapistAddress(config, t.therapist_id);
            if (!to) throw new DeliveryError(`target ${name}: therapist ${t.therapist_id} has no e-mail address now`);
            return mail([to], message, signal);
          },
          close() {},
        }),
      );
  };
  return {
    targets,
    therapists,
    close() {
      for (const c of targets) c.close();
    },
  };
}
