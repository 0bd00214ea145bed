// Owns the emulator's push channels: events.watch registration, channels.stop, and Google-style notification delivery.
import { randomBytes } from "node:crypto";
import type { Clock } from "../../clock.ts";
import { ApiError } from "./http.ts";
import type { CalendarRecord } from "./store.ts";

export interface Channel {
  id: string;
  resourceId: string;
  calendarId: string;
  address: string;
  token: string | undefined;
  expiration: number;
  messageNumber: number;
}

export interface Delivery {
  channelId: string;
  state: "sync" | "exists" | "not_exists";
  /** X-Goog-Message-Number: a retry repeats its message's. */
  messageNumber: number;
  /** 1 for the first attempt, 2 for the first retry, ... */
  attempt: number;
  status?: number;
  error?: string;
}

const DEFAULT_TTL_S = 7 * 24 * 3600;
/**
 * Google's push guide, "Respond to notifications" (developers.google.com/workspace/calendar/api/guides/push): "To
 * indicate success, you can return any of the following status codes: 200, 201, 202, 204, or 102. If your service ...
 * returns 500, 502, 503, or 504, the Google Calendar API retries with exponential backoff. Every other return status
 * code is considered to be a message failure." (not retried). The guide names neither the number of
 * retries nor their delays: the emulator sends a notification at most RETRIES more times, RETRY_FIRST_MS after the
 * failed attempt and twice as long after each next one, on its clock (a ManualClock sends them once advanced). A refused
 * connection or a timeout is not an answer the guide speaks of: not retried. A retry goes only to a channel still open.
 */
const RETRIED_STATUSES = new Set([500, 502, 503, 504]);
export const NOTIFICATION_RETRIES = 5;
export const RETRY_FIRST_MS = 1000;
const MAX_TTL_S = 30 * 24 * 3600;

export class PushChannels {
  readonly channels = new Map<string, Channel>();
  /** Every delivery attempt, in order. */
  readonly deliveries: Delivery[] = [];
  /** Google demands HTTPS addresses; the emulator allows http unless this is set. */
  requireHttps = false;
  /**
   * Hosts whose domain the Cloud project has not verified: a watch for an address there is refused with 401
   * push.webhookUrlUnauthorized, "Unauthorized WebHook callback channel" (listed under 401 Unauthorized in "HTTP
   * status and error codes", cloud.google.com/storage/docs/json_api/v1/status-codes).
   */
  readonly unverifiedHosts = new Set<string>();
  /**
   * Whether events.watch answers only once its channel's "sync" message was delivered (and answered). Google's push
   * guide says the sync message is sent when the channel is created and says nothing of its order against the
   * watch call's answer (developers.google.com/calendar/api/guides/push, "Sync message"), so a receiver can meet the
   * message for a channel whose creation it has not heard back about yet. The emulator takes that harsher order by
   * default; false delivers the two concurrently.
   */
  syncBeforeAnswer = true;
  /**
   * Whether each channel gets a resourceId of its own. Google's reference calls it "an opaque ID that identifies the
   * resource being watched on this channel" ("Channels: stop", "Events: watch") and says no more; channels of one
   * calendar were seen sharing it (googleapis/google-api-nodejs-client#1402), which the emulator does by default.
   * True shows that a client does not borrow one channel's resourceId to stop another: channels.stop needs the
   * channel's own, given in the watch answer and in every notification's X-Goog-Resource-ID.
   */
  resourceIdPerChannel = false;
  readonly #clock: Clock;
  #inflight = new Set<Promise<unknown>>();
  /** Ends the retries waiting for their time (close()). */
  readonly #closing = new AbortController();

  constructor(clock: Clock) {
    this.#clock = clock;
  }

  /** Opens a channel: its resource, and the delivery of its "sync" message (the answer waits for it, see above). */
  watch(
    cal: CalendarRecord,
    body: Record<string, unknown>,
  ): { resource: Record<string, unknown>; sync: Promise<Delivery> } {
    const id = typeof body.id === "string" ? body.id : "";
    if (!id || id.length > 64) throw new ApiError(400, "invalid", "Invalid channel id.");
    if (this.channels.has(id)) throw new ApiError(400, "channelIdNotUnique");
    if (body.type !== "web_hook" && body.type !== "webhook")
      throw new ApiError(400, "invalid", "Invalid channel type.");
    let address: URL;
    try {
      address = new URL(String(body.address));
    } catch {
      throw new ApiError(400, "invalid", "Invalid channel address.");
    }
    if (this.requireHttps && address.protocol !== "https:") {
      throw new ApiError(400, "push.webhookUrlNotHttps", "WebHook callback must be HTTPS: " + address.toString());
    }
    if (this.unverifiedHosts.has(address.hostname)) {
      throw new ApiError(401, "push.webhookUrlUnauthorized", `Unauthorized WebHook callback channel: ${address}`);
    }
    const token = typeof body.token === "string" ? body.token : undefined;
    if (token && token.length > 256) throw new ApiError(400, "invalid", "Invalid channel token.");
    const params = (body.params ?? {}) as { ttl?: string };
    const ttl = Math.min(Number(params.ttl ?? DEFAULT_TTL_S) || DEFAULT_TTL_S, MAX_TTL_S);
    let expiration = this.#clock.now() + ttl * 1000;
    if (body.expiration !== undefined) expiration = Math.min(expiration, Number(body.expiration));
    const channel: Channel = {
      id,
      resourceId: this.resourceIdPerChannel ? randomBytes(12).toString("base64url") : cal.resourceId,
      calendarId: cal.id,
      address: address.toString(),
      token,
      expiration,
      messageNumber: 0,
    };
    this.channels.set(id, channel);
    const sync = this.#deliver(channel, "sync");
    const resource = {
      kind: "api#channel",
      id,
      resourceId: channel.resourceId,
      resourceUri: `https://www.googleapis.com/calendar/v3/calendars/${encodeURIComponent(cal.id)}/events?alt=json`,
      ...(token ? { token } : {}),
      expiration: String(expiration),
    };
    return { resource, sync };
  }

  /**
   * channels.stop: the channel's id and its resourceId. One unknown, or named with another resourceId, is answered 404
   * "Channel not found" (reported as "Channel '...' not found for project", googleapis/google-api-nodejs-client#627 and
   * #3025, the latter for a stop naming a wrong resourceId).
   */
  stop(body: Record<string, unknown>): void {
    const channel = this.channels.get(String(body.id ?? ""));
    if (!channel || channel.resourceId !== body.resourceId) throw new ApiError(404, "notFound", "Channel not found.");
    this.channels.delete(channel.id);
  }

  /** Posts an "exists" notification to every live channel of the calendar; resolves when all were answered. */
  async notify(calendarId: string, state: Delivery["state"] = "exists"): Promise<Delivery[]> {
    const now = this.#clock.now();
    const targets = [...this.channels.values()].filter((c) => c.calendarId === calendarId);
    const live = targets.filter((c) => c.expiration > now);
    for (const c of targets) if (c.expiration <= now) this.channels.delete(c.id);
    return Promise.all(live.map((c) => this.#deliver(c, state)));
  }

  /** Waits for notifications in flight (the initial "sync" ones included); not for retries still waiting their time. */
  async settle(): Promise<void> {
    while (this.#inflight.size > 0) await Promise.allSettled([...this.#inflight]);
  }

  /** Drops the retries still waiting (the emulator closes). */
  close(): void {
    this.#closing.abort();
  }

  /** Sends one notification; resolves with its first attempt's answer (retries, if any, follow on their own). */
  #deliver(channel: Channel, state: Delivery["state"]): Promise<Delivery> {
    channel.messageNumber += 1;
    return this.#attempt(channel, state, channel.messageNumber, 1);
  }

  /** A 5xx answer Google retries (see RETRIED_STATUSES): the same message again after the backoff, if still open. */
  async #retryLater(channel: Channel, state: Delivery["state"], messageNumber: number, attempt: number): Promise<void> {
    if (attempt > NOTIFICATION_RETRIES + 1) return;
    try {
      await this.#clock.sleep(RETRY_FIRST_MS * 2 ** (attempt - 2), this.#closing.signal);
    } catch {
      return; // closed
    }
    if (this.channels.get(channel.id) !== channel || channel.expiration <= this.#clock.now()) return;
    await this.#attempt(channel, state, messageNumber, attempt);
  }

  #attempt(channel: Channel, state: Delivery["state"], messageNumber: number, attempt: number): Promise<Delivery> {
    const headers: Record<string, string> = {
      "X-Goog-Channel-ID": channel.id,
      "X-Goog-Channel-Expiration": new Date(channel.expiration).toUTCString(),
      "X-Goog-Resource-ID": channel.resourceId,
      "X-Goog-Resource-URI": `https://www.googleapis.com/calendar/v3/calendars/${encodeURIComponent(channel.calendarId)}/events?alt=json`,
      "X-Goog-Resource-State": state,
      "X-Goog-Message-Number": String(messageNumber),
    };
    if (channel.token) headers["X-Goog-Channel-Token"] = channel.token;
    const delivery: Delivery = { channelId: channel.id, state, messageNumber, attempt };
    const p = fetch(channel.address, { method: "POST", headers, body: "", signal: AbortSignal.timeout(5000) })
      .then(async (res) => {
        delivery.status = res.status;
        await res.arrayBuffer();
        return delivery;
      })
      .catch((err: Error) => {
        delivery.error = err.message;
        return delivery;
      })
      .finally(() => {
        this.deliveries.push(delivery);
        this.#inflight.delete(p);
        if (delivery.status !== undefined && RETRIED_STATUSES.has(delivery.status))
          void this.#retryLater(channel, state, messageNumber, attempt + 1);
      });
    this.#inflight.add(p);
    return p;
  }
}
