// Owns the recipients of notifications and how a message reaches each: a chat's incoming webhook (one JSON POST with
// undici) or e-mail over SMTP (nodemailer). One channel per target, plus one per therapist an e-mail target writes to
// about their own credentials. A failed delivery throws a DeliveryError that names the target, never its address.
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
  send(message: Message, signal?: AbortSignal): Promise<void>;
  close(): void;
}

export class DeliveryError extends Error {
  override readonly name = "DeliveryError";
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
        return;
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

function emailChannels(
  name: string,
  target: Extract<NotifyTargetConfig, { type: "email" }>,
  config: Config,
  timeoutMs: number,
): Channel[] {
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
  const mailer = (to: string[]) => async (message: Message, signal?: AbortSignal) => {
    try {
      await (await transportOnce()).sendMail({
        from: target.from,
        to,
        subject: message.subject,
        text: plainText(message),
        ...(signal ? { signal } : {}),
      });
    } catch (err) {
      throw new DeliveryError(`target ${name}: ${secrets.scrub((err as Error).message ?? String(err))}`);
    }
  };
  const channels: Channel[] = [
    {
      id: name,
      target: name,
      audience: "admins",
      send: mailer(target.to),
      close: () => void transport?.then((t) => t.close()),
    },
  ];
  if (!target.therapists) return channels;
  for (const t of config.therapists) {
    // Only OAuth therapists can act on it themselves (reconnect); delegation is the admins' business.
    if (!t.email || (t.auth?.type ?? config.google.auth.type) !== "oauth") continue;
    channels.push({
      id: `${name}:therapist:${t.therapist_id}`,
      target: name,
      audience: "therapist",
      therapistId: t.therapist_id,
      send: mailer([t.email]),
      close() {},
    });
  }
  return channels;
}

/** Every channel of the configured targets. */
export function channelsFor(config: Config, timeoutMs = SEND_TIMEOUT_MS): Channel[] {
  return config.notify.targets.flatMap((target, i) => {
    const name = targetNameOf(target, i);
    return target.type === "webhook"
      ? [webhookChannel(name, target, timeoutMs)]
      : emailChannels(name, target, config, timeoutMs);
  });
}
