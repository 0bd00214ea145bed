// Owns Google push channels: one events.watch channel per calendar when google.push is configured, renewed before
// it expires (the new one first, then the old one stopped), and the POST /webhooks/google route that checks the
// channel token and triggers an immediate incremental sync. Polling stays on: push delivery is not guaranteed.
// Each channel gets its own random token (or google.push.token when configured); the store keeps only its SHA-256,
// since a notification's X-Goog-Channel-Token only ever needs comparing.
// With replicas, any one may receive a notification: each checks the channel against the shared store, but only the
// leader polls; a standby acknowledges and hands the calendar to the leader as a notice (a hint, never the only copy).
import { randomBytes, randomUUID, timingSafeEqual } from "node:crypto";
import type { IncomingMessage, ServerResponse } from "node:http";
import type { CalendarGateway } from "../calendar/gateway.ts";
import type { Config } from "../config/schema.ts";
import { type Logger, secrets } from "../log.ts";
import { matchesDigest, tokenDigest } from "../store/secrets.ts";
import type { Notices, Store, Table } from "../store/store.ts";
import type { CalendarPoller } from "../sync/calendar-poller.ts";
import type { SyncEngine } from "../sync/engine.ts";
import { describeError } from "../sync/errors.ts";

export const PUSH_PATH = "/webhooks/google";
const RENEW_BEFORE_MS = 24 * 3_600_000;
const CHECK_EVERY_MS = 3_600_000;
/** Where an earlier build kept the generated channel token in clear (removed at start). */
const LEGACY_TOKEN_KEY = "push_token";
/** Therapist ids whose calendar a standby got a push notification for, published so the leader polls it at once. */
export const PUSH_CHANGED_CHANNEL = "calbridge:push:changed";

export interface Channel {
  therapistId: string;
  channelId: string;
  resourceId: string;
  /** SHA-256 (hex) of the channel's token; the token itself is given to Google and not kept. */
  tokenHash?: string;
  /** The token in clear, as an earlier build stored it (rewritten as `tokenHash` at start). */
  token?: string;
  expiration: number;
}

/** Whether a notification's token is the channel's. */
function tokenMatches(channel: Channel, token: string): boolean {
  if (channel.tokenHash) return matchesDigest(token, channel.tokenHash);
  return channel.token !== undefined && sameSecret(token, channel.token);
}

export class PushChannels {
  readonly #config: Config;
  readonly #engine: SyncEngine;
  readonly #poller: CalendarPoller;
  readonly #channels: Table<Channel>;
  readonly #meta: Table<string>;
  readonly #logger: Logger;
  readonly #isLeader: () => boolean;
  readonly #notices: Notices | undefined;
  /**
   * channelId → channel, for the route: a cache of the shared "channels" table (a standby fills it on demand). A
   * channel's token never changes, so an entry stays right; stopped channels get no notifications.
   */
  readonly #known = new Map<string, Channel>();
  #timer: NodeJS.Timeout | undefined;

  constructor(options: {
    config: Config;
    engine: SyncEngine;
    poller: CalendarPoller;
    store: Store;
    logger: Logger;
    /** Whether this replica leads now: only the leader polls (engine writes, booking write-backs). */
    isLeader: () => boolean;
  }) {
    this.#config = options.config;
    this.#engine = options.engine;
    this.#poller = options.poller;
    this.#channels = options.store.table<Channel>("channels");
    this.#meta = options.store.table<string>("meta");
    this.#notices = options.store.notices;
    this.#logger = options.logger;
    this.#isLeader = options.isLeader;
  }

  get enabled(): boolean {
    return this.#config.google.push !== undefined;
  }

  /** Loads the channels and opens the missing ones; never throws (polling covers what push cannot). */
  async start(): Promise<void> {
    if (!this.enabled) return;
    this.#timer = setInterval(() => void this.renew(), CHECK_EVERY_MS);
    this.#timer.unref();
    try {
      for await (const [therapistId, ch] of this.#channels.entries()) {
        const { token, ...kept } = ch;
        const channel = token === undefined ? ch : { ...kept, tokenHash: ch.tokenHash ?? tokenDigest(token) };
        // An earlier build kept channel tokens in clear, and the generated one in meta: only the digest stays.
        if (channel !== ch) await this.#channels.set(therapistId, channel);
        this.#known.set(channel.channelId, channel);
      }
      await this.#meta.delete(LEGACY_TOKEN_KEY);
    } catch (err) {
      this.#logger.warn(
        { err: describeError(err) },
        "push channels not loaded: the store did not answer; polling covers the calendars, the hourly check retries",
      );
      return;
    }
    await this.renew();
  }

  /** Stops renewing; the route keeps checking channels, and polls only while this replica leads. */
  stop(): void {
    if (this.#timer) clearInterval(this.#timer);
    this.#timer = undefined;
  }

  /**
   * A calendar changed (a standby's notice, or a notification here): the leader polls it now; a standby does nothing,
   * as the leader's own periodic poll covers it. Never throws.
   */
  changed(therapistId: string): void {
    if (!this.#isLeader() || !this.#engine.calendars.has(therapistId)) return;
    void this.#poller.poll(therapistId).catch(() => {});
  }

  /** The channel by id: from memory, else from the shared store (another replica opened it). */
  async #channel(channelId: string): Promise<Channel | undefined> {
    const known = this.#known.get(channelId);
    if (known) return known;
    for await (const [, ch] of this.#channels.entries()) {
      if (ch.channelId !== channelId) continue;
      this.#known.set(ch.channelId, ch);
      return ch;
    }
    return undefined;
  }

  /** A new channel's token: the configured one, or a random one of its own. */
  #newToken(): string {
    const token = this.#config.google.push?.token ?? randomBytes(32).toString("base64url");
    secrets.addEphemeral(token);
    return token;
  }

  /** Opens a channel for every calendar without one that outlives the next day; stops the ones it replaces. */
  async renew(now = Date.now()): Promise<void> {
    const push = this.#config.google.push;
    if (!push) return;
    for (const [therapistId, cal] of this.#engine.calendars) {
      try {
        const current = await this.#channels.get(therapistId);
        // Renew a day ahead, or a quarter of the lifetime ahead for short-lived channels.
        const renewBefore = Math.min(RENEW_BEFORE_MS, (push.ttl_seconds * 1000) / 4);
        if (current && current.expiration - now > renewBefore) continue;
        const channelId = randomUUID();
        const token = this.#newToken();
        const gw = cal as unknown as CalendarGateway;
        const { resourceId, expiration } = await gw.watch({
          channelId,
          address: push.public_url,
          token,
          ttlSeconds: push.ttl_seconds,
        });
        const channel: Channel = { therapistId, channelId, resourceId, tokenHash: tokenDigest(token), expiration };
        await this.#channels.set(therapistId, channel);
        this.#known.set(channelId, channel);
        this.#logger.info(
          { therapist_id: therapistId, channel_id: channelId, expiration: new Date(expiration).toISOString() },
          "push channel opened",
        );
        if (current) {
          await gw.stopChannel(current.channelId, current.resourceId).catch(() => {});
          this.#known.delete(current.channelId);
        }
      } catch (err) {
        this.#logger.warn(
          { therapist_id: therapistId, err: describeError(err) },
          "push channel not opened; polling covers this calendar",
        );
      }
    }
  }

  /** POST /webhooks/google. Resolves false for other paths. */
  readonly handler = async (req: IncomingMessage, res: ServerResponse): Promise<boolean> => {
    const path = (req.url ?? "").split("?")[0];
    if (path !== PUSH_PATH) return false;
    req.resume();
    if (req.method !== "POST") {
      res.writeHead(405, { allow: "POST" }).end();
      return true;
    }
    const channelId = header(req, "x-goog-channel-id");
    const token = header(req, "x-goog-channel-token") ?? "";
    let channel: Channel | undefined;
    try {
      channel = channelId ? await this.#channel(channelId) : undefined;
    } catch (err) {
      // Not a verdict on the channel: a 404 would drop the notification for good (Google does not retry it).
      this.#logger.warn(
        { channel_id: channelId, err: describeError(err) },
        "push notification not checked: the store did not answer",
      );
      res.writeHead(503).end();
      return true;
    }
    if (!channel || !tokenMatches(channel, token)) {
      this.#logger.warn(
        { channel_id: channelId },
        "push notification for an unknown channel or with a wrong token; ignored",
      );
      res.writeHead(404).end();
      return true;
    }
    res.writeHead(200).end();
    const state = header(req, "x-goog-resource-state");
    if (state === "sync") return true;
    if (this.#isLeader()) {
      this.changed(channel.therapistId);
      return true;
    }
    // A standby never polls: the leader does, told by a notice; its periodic poll covers a lost one.
    const therapistId = channel.therapistId;
    this.#notices?.publish(PUSH_CHANGED_CHANNEL, therapistId).catch((err: unknown) => {
      this.#logger.debug(
        { err: describeError(err), therapist_id: therapistId },
        "push notice not published; the leader's periodic poll finds the change",
      );
    });
    return true;
  };
}

function header(req: IncomingMessage, name: string): string | undefined {
  const v = req.headers[name];
  return Array.isArray(v) ? v[0] : v;
}

function sameSecret(a: string, b: string): boolean {
  const x = Buffer.from(a);
  const y = Buffer.from(b);
  return x.length === y.length && timingSafeEqual(x, y);
}
