// Owns Google push channels: one events.watch channel per calendar when google.push is configured, renewed before
// it expires (the new one first, then the old one stopped) or at once when it missed a change, and the
// POST /webhooks/google route that checks the channel token and triggers an immediate incremental sync. What each
// channel is known to do goes to PushHealth (the poller slows down while a channel is confirmed and not suspect).
// Polling stays on: push delivery is not guaranteed.
// With replicas, any one may receive a notification: each checks the channel against the shared store, but only the
// leader polls; a standby acknowledges and hands the calendar to the leader as a notice (a hint, never the only copy).
// The route is public and unauthenticated until the token is checked: a request with a body is refused unread, and a
// channel is looked up by its id (one read), never by listing the store.
// Each channel gets its own random token (or google.push.token when configured); the store keeps only its SHA-256,
// since a notification's X-Goog-Channel-Token only ever needs comparing.
// A channel left behind (its therapist no longer mapped, or mapped to another calendar, by a reload or while the daemon
// was stopped) is stopped with the credentials that opened it; one that cannot be stopped now is kept under
// `left:<channel id>` and tried again at the next check, until it expires.
// A channel whose events.watch call may have been carried out at Google without its answer reaching this daemon (a
// lost answer, a timeout, a 5xx; or the daemon stopped while waiting) is kept as "lost" under its by-id entry: its
// token is known, its resourceId (which channels.stop needs) is not. Its notifications are acknowledged and poll
// nothing, and the first one, which carries X-Goog-Resource-ID, gets it stopped; if none comes it is forgotten when its
// lifetime ends (see #keepLost).
import { randomBytes, randomUUID, timingSafeEqual } from "node:crypto";
import type { IncomingMessage, ServerResponse } from "node:http";
import { Counter, type Registry } from "prom-client";
import { CalendarError } from "../calendar/errors.ts";
import type { CalendarGateway } from "../calendar/gateway.ts";
import { type Clock, systemClock } from "../clock.ts";
import type { Config } from "../config/schema.ts";
import { type Logger, secrets } from "../log.ts";
import { PUSH_PATH } from "../public-paths.ts";
import { matchesDigest, tokenDigest } from "../store/secrets.ts";
import type { Notices, Store, Table } from "../store/store.ts";
import type { CalendarPoller } from "../sync/calendar-poller.ts";
import { describeError, errorWithoutApiText } from "../sync/errors.ts";
import { KeyedSerial } from "../sync/keyed.ts";
import type { PushHealth } from "../sync/push-health.ts";
import { RejectionLog } from "../webhooks/rejection-log.ts";
import { usesOAuth } from "./calendars.ts";
import { hasBody } from "./http.ts";

/**
 * Google's limits on what it echoes in a notification's headers: a channel id of at most 64 characters, a token of at
 * most 256 ("Get push notifications", developers.google.com/calendar/api/guides/push). Longer ones are not ours.
 */
const MAX_CHANNEL_ID = 64;
const MAX_TOKEN = 256;
/** A channel is also kept under this key, so a notification finds it in one read (the table is keyed by therapist). */
const byId = (channelId: string) => `channel-id:${channelId}`;
/** A channel left behind that is still to be stopped (see the head of this file); it expires with the by-id entry. */
const leftKey = (channelId: string) => `left:${channelId}`;
/** The by-id entry outlives its channel by a day, then expires by itself if nobody removed it. */
const BY_ID_GRACE_MS = 24 * 3_600_000;
const RENEW_BEFORE_MS = 24 * 3_600_000;
const CHECK_EVERY_MS = 3_600_000;
/**
 * The soonest a renewal check follows the last one: channels are checked hourly, and earlier when one is due for
 * renewal sooner (a short google.push.ttl_seconds), but never more often than this.
 */
const MIN_CHECK_MS = 10_000;
/** Therapist ids whose calendar a standby got a push notification for, published so the leader polls it at once. */
export const PUSH_CHANGED_CHANNEL = "calbridge:push:changed";

/** Where an earlier build kept the generated channel token in clear (removed at start). */
const LEGACY_TOKEN_KEY = "push_token";

export interface Channel {
  therapistId: string;
  /** The calendar it watches (channels of earlier builds lack it: taken to be the therapist's calendar). */
  calendarId?: string;
  /**
   * Where Google delivers its notifications (google.push.public_url when it was opened). A channel whose address is
   * not the configured one, or unknown (an earlier build's), is replaced at start and not trusted meanwhile.
   */
  address?: string;
  channelId: string;
  resourceId: string;
  /** SHA-256 (hex) of the channel's token; the token itself is given to Google and not kept. */
  tokenHash?: string;
  /**
   * The credentials that opened it, so that it can be stopped with them once its therapist is no longer mapped: the
   * delegated account (google service account), or the therapist's stored OAuth token. Unknown for earlier builds'.
   */
  subject?: string;
  oauth?: boolean;
  /** The token in clear, as an earlier build stored it (rewritten as `tokenHash` at start). */
  token?: string;
  expiration: number;
  /** Google's first message (or a notification) arrived on it: the address reaches this daemon. */
  confirmed?: boolean;
  /**
   * Stored (by id) before Google answered the watch call that opens it, so that any replica recognises Google's first
   * message, which may come first; replaced by the channel once Google answered, and taken for a lost one (below) by
   * a start that finds it (its daemon stopped while waiting for the answer). Its `resourceId` is not known yet.
   */
  opening?: true;
  /**
   * Its watch call went unanswered (or its daemon stopped while waiting): it may be open at Google, recorded under no
   * therapist. `resourceId` is empty until a notification brings it (X-Goog-Resource-ID); it is then stopped. Its
   * notifications are acknowledged and poll nothing (#keepLost).
   */
  lost?: true;
}

/**
 * A channel whose watch call has not been answered yet, or whose answer is not stored yet: what its notifications
 * brought in the meantime, acted on once it is stored.
 */
interface Opening {
  therapistId: string;
  tokenHash: string;
  synced: boolean;
  changed: boolean;
  /** X-Goog-Resource-ID of a notification it got meanwhile: what stops it should Google's answer be lost. */
  resourceId?: string;
}

/** One leadership term's checks (start() to stop()). */
interface Term {
  renewals: AbortController;
  /** The channels table was read (#load): until then each check loads it first. */
  loaded: boolean;
  /** The load under way, if any. */
  loading: Promise<boolean> | undefined;
  /** Loads failed so far: the next is tried 10 s after the first failure, twice as long after each next one. */
  failures: number;
}

/**
 * The longest X-Goog-Resource-ID taken from a notification (Google documents no length for this opaque id; the ones
 * seen are about 27 characters): a longer one is not Google's, and is not stored.
 */
const MAX_RESOURCE_ID = 256;

/**
 * Whether a failed watch may have opened its channel all the same: no definite answer from Google (a lost answer, a
 * timeout, a 5xx, even when a retry was then refused, see CalendarGateway.watch). A 4xx refusal, or a failure to get an
 * access token, means no channel was opened.
 */
function maybeOpened(err: unknown): boolean {
  if (!(err instanceof CalendarError)) return true;
  if (err.tokenEndpoint) return false;
  return err.ambiguous || err.status === undefined || err.status >= 500;
}

/** Whether a notification's token is the channel's. */
function tokenMatches(channel: Channel, token: string): boolean {
  if (channel.tokenHash) return matchesDigest(token, channel.tokenHash);
  return channel.token !== undefined && sameSecret(token, channel.token);
}

export class PushChannels {
  readonly #config: Config;
  readonly #calendars: ReadonlyMap<string, CalendarGateway>;
  readonly #poller: CalendarPoller;
  readonly #channels: Table<Channel>;
  readonly #meta: Table<string>;
  /** Renewals of one calendar's channel, one at a time (#renewOne). */
  readonly #renewing = new KeyedSerial();
  /** The channel each therapist's renewal last opened in this process, and through which gateway (see retire). */
  readonly #openedWith = new Map<string, { channelId: string; gw: CalendarGateway; recorded: Promise<boolean> }>();
  readonly #logger: Logger;
  readonly #isLeader: () => boolean;
  readonly #notices: Notices | undefined;
  readonly #health: PushHealth | undefined;
  readonly #clock: Clock;
  /**
   * channelId → channel, for the route: a cache of the shared "channels" table (a standby fills it on demand). A
   * channel's token never changes, so an entry stays right; stopped channels get no notifications.
   */
  readonly #known = new Map<string, Channel>();
  /**
   * When #remember next forgets the known channels past their expiration (our clock): at most once per check interval.
   * A standby caches every channel it gets a notification for and is never told of renewals (the leader's), so
   * without this it kept one entry per calendar per renewal for as long as it ran.
   */
  #nextForget = Number.NEGATIVE_INFINITY;
  /**
   * channelId → the highest X-Goog-Message-Number acted on. Google numbers a channel's messages upwards and repeats a
   * number only when retrying a delivery not answered 2xx; one at or below it is a replay (a request a proxy sends
   * twice, or one captured with its token and sent again), answered 200 without the listing each one cost, and counted
   * (result="replayed"). One out of order is covered by the later one's poll. The number is not signed: whoever holds
   * the token can still invent one, as they can invent any notification (each costs at most one queued listing).
   */
  readonly #lastMessage = new Map<string, number>();
  /**
   * channelId → a channel this replica is opening. Google may send the channel's first message before it answers the
   * watch call (its guide says nothing of their order), and a notification that found no channel would be answered 404 and
   * never repeated: the channel would stay unconfirmed, its calendar polled at the short interval.
   */
  readonly #opening = new Map<string, Opening>();
  /** The checks since the last start() (until stop()), and whether that start's load of the channels succeeded. */
  #term: Term | undefined;
  /** When the next channel is due for renewal (our clock), as the last check found; the next check is no later. */
  #nextRenewal: number | undefined;
  /** Addresses Google refused a watch for (e.g. a domain not verified): logged once each, as a warning. */
  readonly #refusedAddresses = new Set<string>();
  readonly #rejections: RejectionLog;
  readonly #notifications: Counter<"result">;
  readonly #credentialsOf: ((channel: Channel) => Promise<CalendarGateway | undefined>) | undefined;
  /** channelId → a channel left behind still to be stopped, and the key it is stored under. */
  readonly #left = new Map<string, { channel: Channel; key: string }>();
  /** Channels left behind whose stop failed once: logged at warn once, then at debug. */
  readonly #leftFailed = new Set<string>();
  /** channelId → the store write of a lost channel's entry (#keepLost), which its stop waits for before deleting it. */
  readonly #lostStored = new Map<string, Promise<void>>();
  /** Lost channels being stopped (a sync message and a change may arrive together). */
  readonly #stoppingLost = new Set<string>();

  constructor(options: {
    config: Config;
    /** The usable calendars by therapist id (the daemon's live map). */
    calendars: ReadonlyMap<string, CalendarGateway>;
    poller: CalendarPoller;
    store: Store;
    logger: Logger;
    /** Whether this replica leads now: only the leader polls (engine writes, booking write-backs). */
    isLeader: () => boolean;
    registry?: Registry;
    /** Where what each channel is known to do goes (the poller's schedule reads it). */
    health?: PushHealth;
    clock?: Clock;
    /**
     * A gateway with the credentials that opened a channel left behind, to stop it (closed after use); undefined when
     * they are gone (the therapist's OAuth token removed). Without it, such a channel is stopped with the therapist's
     * live gateway when there is one.
     */
    credentialsOf?: (channel: Channel) => Promise<CalendarGateway | undefined>;
  }) {
    this.#config = options.config;
    this.#calendars = options.calendars;
    this.#poller = options.poller;
    this.#channels = options.store.table<Channel>("channels");
    this.#meta = options.store.table<string>("meta");
    this.#notices = options.store.notices;
    this.#logger = options.logger;
    this.#isLeader = options.isLeader;
    this.#health = options.health;
    this.#clock = options.clock ?? systemClock;
    this.#credentialsOf = options.credentialsOf;
    // A channel that missed a change is replaced at once (the leader's; a standby's health is not acted on).
    this.#health?.onChange((therapistId, why) => {
      if (why === "suspect" && this.#isLeader()) void this.#renewOne(therapistId, this.#clock.now(), true);
    });
    this.#rejections = new RejectionLog({ logger: options.logger, what: "push notifications" });
    this.#notifications = new Counter({
      name: "calbridge_push_notifications_total",
      help: "Requests to POST /webhooks/google, by outcome",
      labelNames: ["result"] as const,
      registers: options.registry ? [options.registry] : [],
    });
  }

  get enabled(): boolean {
    return this.#config.google.push !== undefined;
  }

  /**
   * Loads the channels and opens the missing ones, then checks them until stop(); never throws (polling covers what
   * push cannot). When the load fails, the checks begin all the same and load first (see renew()).
   */
  async start(): Promise<void> {
    if (!this.enabled) return;
    // Set before any await: a stop() while the channels are read ends this start's checks before they begin.
    this.#term?.renewals.abort();
    const term: Term = { renewals: new AbortController(), loaded: false, loading: undefined, failures: 0 };
    this.#term = term;
    // A stop() while the load was out (the lease lost, a shutdown) ends this term: its renew() would run on a replica
    // that no longer leads, and stop the channels the load found left behind (the new leader's, maybe: review19).
    if ((await this.#loadIn(term)) && this.#term === term && !term.renewals.signal.aborted) await this.renew();
    if (term.renewals.signal.aborted) return;
    void (async () => {
      while (!term.renewals.signal.aborted) {
        const due = (this.#nextRenewal ?? Number.POSITIVE_INFINITY) - this.#clock.now();
        // Until the channels are loaded, the load is tried again 10 s after the first failure, then twice as long
        // after each next one, up to the hourly check: a store outage (a Redis failover, a SQLite file locked by a
        // backup) usually lasts seconds, and push comes back with the store (the calendars' slow poll, the recorded
        // channels' renewals, the stop of the ones left behind), not up to an hour later; a table that still cannot
        // be read is not read every 10 s for as long as that lasts.
        const wait = term.loaded
          ? Math.max(MIN_CHECK_MS, Math.min(CHECK_EVERY_MS, due))
          : Math.min(CHECK_EVERY_MS, MIN_CHECK_MS * 2 ** Math.max(0, term.failures - 1));
        await this.#clock.sleep(wait, term.renewals.signal).catch(() => {});
        if (!term.renewals.signal.aborted) await this.renew();
      }
    })();
  }

  /**
   * Reads the channels table (start, and until that succeeded, each check: #loadIn): the channels recorded, the ones
   * left behind, lost or still opening, and an earlier build's. Throws when the store does not answer.
   */
  async #load(): Promise<void> {
    const missing: { key: string; value: Channel; ttlMs: number }[] = [];
    for await (const [key, ch] of this.#channels.entries()) {
      const { token, ...kept } = ch;
      const channel = token === undefined ? ch : { ...kept, tokenHash: ch.tokenHash ?? tokenDigest(token) };
      // An earlier build kept channel tokens in clear, and the generated one in meta: only the digest stays.
      if (channel !== ch)
        await this.#channels.set(key, channel, key.startsWith(byId("")) ? byIdTtl(channel) : undefined);
      if (channel.opening || (channel.lost && !channel.resourceId)) {
        // A watch call whose answer was lost, or one in flight when its daemon stopped (or a replica's that lost the
        // lease: its answer, should it come, stops the channel): kept as lost until a notification names it.
        if (key.startsWith(byId("")) && !this.#opening.has(channel.channelId)) await this.#foundLost(channel);
        continue;
      }
      this.#remember(channel);
      if (key.startsWith(leftKey(""))) {
        this.#left.set(channel.channelId, { channel, key });
        continue;
      }
      if (!key.startsWith(byId(""))) {
        // A therapist taken out of the mapping, or given another calendar, while the daemon was stopped: their channel
        // is stopped below (a running daemon's reload does it at once); it watches nothing the daemon syncs.
        const left = this.#isLeft(channel);
        if (left) this.#left.set(channel.channelId, { channel, key });
        // One at another address (the configured one changed) is replaced by renew() below, never trusted.
        else if (this.#calendars.has(channel.therapistId) && this.#here(channel))
          this.#health?.opened(channel.therapistId, channel);
        // Channels opened by an earlier build are kept under their therapist only: give them their by-id entry.
        missing.push({ key: byId(channel.channelId), value: channel, ttlMs: byIdTtl(channel) });
      }
    }
    const present = await this.#channels.getMany(missing.map((m) => m.key));
    await this.#channels.setMany(missing.filter((_, i) => present[i] === undefined));
    await this.#meta.delete(LEGACY_TOKEN_KEY);
  }

  /**
   * The term's load of the channels table (one at a time: a reload's renew() may meet a check's); resolves whether it
   * succeeded. A failure is a warning the first time, then a debug line until one succeeds.
   */
  #loadIn(term: Term): Promise<boolean> {
    term.loading ??= this.#load()
      .then(
        () => {
          term.loaded = true;
          if (term.failures > 0)
            this.#logger.info({ attempts: term.failures + 1 }, "push channels loaded after the store answered again");
          return true;
        },
        (err: unknown) => {
          term.failures += 1;
          const retryS = Math.min(CHECK_EVERY_MS, MIN_CHECK_MS * 2 ** (term.failures - 1)) / 1000;
          this.#logger[term.failures === 1 ? "warn" : "debug"](
            { err: describeError(err), attempts: term.failures, retry_in_s: retryS },
            "push channels not loaded: the store did not answer; polling covers the calendars, the load is tried again",
          );
          return false;
        },
      )
      .finally(() => {
        term.loading = undefined;
      });
    return term.loading;
  }

  /** Stops renewing; the route keeps checking channels, and polls only while this replica leads. */
  stop(): void {
    this.#term?.renewals.abort();
    this.#term = undefined;
    // What this replica's renewals opened is the other leader's business from here on (its record is in the store).
    this.#openedWith.clear();
  }

  /**
   * A calendar changed (a standby's notice, or a notification here): the leader polls it now; a standby does nothing,
   * as the leader's own periodic poll covers it. Never throws.
   */
  changed(therapistId: string, channelId?: string): void {
    if (!this.#isLeader() || !this.#calendars.has(therapistId)) return;
    this.#health?.notified(therapistId, this.#clock.now(), channelId);
    void this.#poller.poll(therapistId, "push").catch(() => {});
  }

  /**
   * A standby's notice: `{"t": therapist, "s": state, "c": channel}` (an earlier build sends the bare therapist id of a
   * change). The leader polls after a change; Google's first message only confirms the channel.
   */
  noticed(message: string): void {
    let notice: { t?: unknown; s?: unknown; c?: unknown; r?: unknown } | undefined;
    try {
      const parsed: unknown = message.startsWith("{") ? JSON.parse(message) : undefined;
      if (parsed && typeof parsed === "object") notice = parsed;
    } catch {
      notice = undefined;
    }
    if (!notice) {
      this.changed(message);
      return;
    }
    if (typeof notice.t !== "string") return;
    const channelId = typeof notice.c === "string" ? notice.c : undefined;
    const resourceId = resourceIdOf(notice.r);
    if (notice.s === "sync") {
      if (!this.#isLeader()) return;
      const opening = channelId === undefined ? undefined : this.#opening.get(channelId);
      const known = channelId === undefined ? undefined : this.#known.get(channelId);
      // A standby answered the first message of a channel this leader is still opening: confirmed once it is stored
      // (and stopped with the resourceId it carried, should Google's answer to the watch be lost).
      if (opening) {
        opening.synced = true;
        if (resourceId) opening.resourceId ??= resourceId;
      } else if (known?.lost) {
        // The answer was lost meanwhile: the channel is stopped with it.
        if (resourceId && !known.resourceId) void this.#stopLost(known, resourceId);
      }
      // The standby could not store the confirmation when it only knew the channel as opening: stored here.
      else if (known) void this.#confirm(known);
      else this.#health?.confirmed(notice.t, channelId);
      return;
    }
    // A standby's notice of a channel this leader knows left on a calendar the therapist no longer has: nobody's here.
    const known = channelId === undefined ? undefined : this.#known.get(channelId);
    if (known && this.#isLeader() && this.#elsewhere(known)) return;
    this.changed(notice.t, channelId);
  }

  /** Google's first message arrived on `channel`: it is trusted from now on, here and (through the store) elsewhere. */
  async #confirm(channel: Channel): Promise<void> {
    if (channel.lost) return; // not the calendar's channel: says nothing of its own
    this.#health?.confirmed(channel.therapistId, channel.channelId);
    // An opening channel's entry lacks Google's answer (its resourceId): the replica opening it stores the confirmation.
    if (channel.confirmed || channel.opening) return;
    const confirmed = { ...channel, confirmed: true };
    this.#remember(confirmed);
    try {
      const current = await this.#channels.get(channel.therapistId);
      await this.#channels.setMany([
        ...(current?.channelId === channel.channelId ? [{ key: channel.therapistId, value: confirmed }] : []),
        { key: byId(channel.channelId), value: confirmed, ttlMs: byIdTtl(confirmed, this.#clock.now()) },
      ]);
    } catch (err) {
      this.#logger.debug(
        { err: describeError(err), therapist_id: channel.therapistId },
        "push channel's confirmation not stored; a restart polls the calendar at the short interval until a notification",
      );
    }
  }

  /** The channel by id: from memory, else from the shared store (another replica opened it): one read. */
  async #channel(channelId: string): Promise<Channel | undefined> {
    const known = this.#known.get(channelId);
    if (known) return known;
    const ch = await this.#channels.get(byId(channelId));
    if (!ch || ch.channelId !== channelId) return undefined;
    if (!ch.opening) this.#remember(ch);
    return ch;
  }

  /**
   * Keeps a channel in memory for the route; first forgets, at most once per check interval, the ones past their
   * expiration (Google sends nothing on them any more; a late notification reads its by-id entry from the store again).
   */
  #remember(channel: Channel): void {
    const now = this.#clock.now();
    if (now >= this.#nextForget) {
      this.#nextForget = now + CHECK_EVERY_MS;
      for (const [id, known] of this.#known) if (known.expiration <= now) this.#known.delete(id);
      for (const id of this.#lastMessage.keys()) if (!this.#known.has(id)) this.#lastMessage.delete(id);
    }
    this.#known.set(channel.channelId, channel);
  }

  /** How many channels are known in memory (the route's cache), for /status and tests. */
  get knownChannels(): number {
    return this.#known.size;
  }

  /** A new channel's token: the configured one, or a random one of its own. */
  #newToken(): string {
    const token = this.#config.google.push?.token ?? randomBytes(32).toString("base64url");
    secrets.addEphemeral(token);
    return token;
  }

  /** Whether Google delivers the channel's notifications to the configured address (not known for an earlier build's). */
  /**
   * Whether a change on `channel` is no therapist's here: a channel left on a calendar its therapist's mapping no longer
   * names (a reload re-pointed them and the stop failed: kept aside until stopped, or until it expires). Taken as
   * theirs, each one listed their new calendar (Google quota) and counted as a notification for it (push2 audit).
   * Counted, and judged by the leader only: a standby whose reload is still to come (each replica reloads its own
   * file) took the leader's new channel for an old one and dropped its changes (review5).
   */
  #elsewhere(channel: Channel): boolean {
    const now = this.#calendars.get(channel.therapistId);
    if (channel.calendarId === undefined || !now || channel.calendarId === now.calendarId) return false;
    this.#notifications.inc({ result: "elsewhere" });
    return true;
  }

  #here(channel: Channel): boolean {
    return channel.address !== undefined && channel.address === this.#config.google.push?.public_url;
  }

  /**
   * Opens a channel for every calendar without one that outlives the renewal margin (a day, or a quarter of a short
   * lifetime), or whose channel delivers elsewhere; stops the ones it replaces. Notes when the next one is due.
   */
  async renew(now = this.#clock.now()): Promise<void> {
    // Channels are the leader's: a standby opens, renews and stops none (the left-behind ones may be the leader's).
    if (!this.#config.google.push || !this.#isLeader()) return;
    // Not before start() has loaded the channels (its load failed: the store did not answer): loaded first, by the
    // leader, whoever calls (the checks, a reload, a therapist connecting). Without them, the ones left behind (a
    // therapist removed or re-pointed while the daemon was stopped), the lost ones and an earlier build's are not
    // known: never stopped, and notifying for up to a week; nor is what is known of each calendar's channel (health).
    const term = this.#term;
    if (term && !term.loaded) {
      if (!this.#isLeader() || !(await this.#loadIn(term)) || term.renewals.signal.aborted) return;
    }
    // A lost channel no notification named (#keepLost) is forgotten once its lifetime ended: Google sends nothing more.
    for (const [id, known] of this.#known) if (known.lost && known.expiration <= now) this.#known.delete(id);
    await this.#stopLeft(now);
    let next: number | undefined;
    for (const therapistId of this.#calendars.keys()) {
      const due = await this.#renewOne(therapistId, now, false);
      // A channel without a sensible expiry (none in Google's answer) is left to the hourly check.
      if (due !== undefined && due > now && (next === undefined || due < next)) next = due;
    }
    this.#nextRenewal = next;
  }

  /**
   * Opens a new channel for the calendar when its own expires within the renewal margin, delivers to another address
   * or watches another calendar, or when `force`d. Resolves when the calendar's channel is due for renewal (undefined
   * when it has none: the hourly check tries again).
   */
  #renewOne(therapistId: string, now: number, force: boolean): Promise<number | undefined> {
    // One at a time per calendar: the hourly renewal, a suspect channel's replacement and a reload's renew may meet,
    // and two that both read the old channel each opened a new one; only one was stopped, the other left open (and
    // notifying) until it expired, a week later.
    return this.#renewing.run(therapistId, () => this.#renewNow(therapistId, now, force));
  }

  async #renewNow(therapistId: string, now: number, force: boolean): Promise<number | undefined> {
    const push = this.#config.google.push;
    const gw = this.#calendars.get(therapistId);
    if (!push || !gw) return undefined;
    // Renew a day ahead, or a quarter of the lifetime ahead for short-lived channels.
    const renewBefore = Math.min(RENEW_BEFORE_MS, (push.ttl_seconds * 1000) / 4);
    let lostAnswer = false;
    try {
      const current = await this.#channels.get(therapistId);
      // A channel on a calendar the therapist's mapping no longer names (changed while stopped) is replaced too.
      const elsewhere = current?.calendarId !== undefined && current.calendarId !== gw.calendarId;
      // So is one delivering to an address that is no longer the configured one (or to one not recorded).
      const moved = current !== undefined && !this.#here(current);
      if (!force && current && current.expiration - now > renewBefore && !elsewhere && !moved)
        return current.expiration - renewBefore;
      // Channels are the leader's: a replica that lost the lease leaves the renewal to the next leader.
      if (!this.#isLeader()) return undefined;
      const channelId = randomUUID();
      const token = this.#newToken();
      const tokenHash = tokenDigest(token);
      const opening: Opening = { therapistId, tokenHash, synced: false, changed: false };
      this.#opening.set(channelId, opening);
      let answer: { resourceId: string; expiration: number };
      const mapped = this.#config.therapists.find((t) => t.therapist_id === therapistId);
      const credentials = {
        ...(mapped?.impersonate ? { subject: mapped.impersonate } : {}),
        ...(mapped ? { oauth: usesOAuth(this.#config, mapped) } : {}),
      };
      try {
        // With replicas, Google's first message may reach another one, which knows channels from the store only; and
        // a start that finds this entry (the daemon stopped before Google answered) knows what may be open at Google.
        const provisional: Channel = {
          therapistId,
          calendarId: gw.calendarId,
          address: push.public_url,
          channelId,
          resourceId: "",
          tokenHash,
          ...credentials,
          expiration: now + push.ttl_seconds * 1000,
          opening: true,
        };
        await this.#channels.set(byId(channelId), provisional, byIdTtl(provisional, now));
        try {
          answer = await gw.watch({ channelId, address: push.public_url, token, ttlSeconds: push.ttl_seconds });
        } catch (err) {
          if (maybeOpened(err)) {
            lostAnswer = true;
            // Carried out at Google perhaps, its answer lost: forgotten, the channel notified (each answered 404) for a
            // week beside the next check's, and every lost answer added one (push2 audit). Kept as lost instead.
            const { opening: _, ...rest } = provisional;
            this.#opening.delete(channelId); // its notifications from here on find it as lost (no await in between)
            await this.#keepLost({ ...rest, resourceId: opening.resourceId ?? "", lost: true }, now);
          } else await this.#channels.delete(byId(channelId)).catch(() => false); // else it expires
          throw err;
        }
        const channel: Channel = {
          therapistId,
          calendarId: gw.calendarId,
          address: push.public_url,
          channelId,
          resourceId: answer.resourceId,
          tokenHash,
          expiration: answer.expiration,
          ...credentials,
        };
        if (!this.#isLeader()) {
          await this.#withdraw(channel, gw, now, "lease");
          return undefined;
        }
        // A reload took the calendar from this therapist (removed, re-pointed) while Google answered: retire() stopped
        // the channel it found, not this one. Recorded, it notified for a week under a therapist no check walks (push2).
        if (this.#calendars.get(therapistId) !== gw) {
          await this.#withdraw(channel, gw, now, "retired");
          return undefined;
        }
        // Known before its record is written: a retire of the old calendar's channel meanwhile leaves this one's record.
        let settle!: (ok: boolean) => void;
        const recorded = new Promise<boolean>((r) => (settle = r));
        this.#openedWith.set(therapistId, { channelId, gw, recorded });
        try {
          await this.#channels.setMany([
            { key: therapistId, value: channel },
            { key: byId(channelId), value: channel, ttlMs: byIdTtl(channel, now) },
          ]);
          settle(true);
        } catch (err) {
          settle(false);
          if (this.#openedWith.get(therapistId)?.channelId === channelId) this.#openedWith.delete(therapistId);
          // Open at Google and recorded nowhere, it notified (each answered 404) until it expired, a week later, beside
          // the one still recorded; and every later check that met the same store opened another. Stopped at once.
          await this.#withdraw(channel, gw, now, "unrecorded");
          await this.#unrecord(therapistId, channelId, current);
          throw err;
        }
        this.#health?.opened(therapistId, channel);
        this.#health?.renewal(therapistId, { result: "opened" });
        // Known from here on (the `finally` below forgets it as opening, with no await in between); what its
        // notifications brought while it was opening is acted on now, so a confirmation is stored after the channel,
        // not overwritten by it.
        this.#remember(channel);
        if (opening.synced) void this.#confirm(channel);
        if (opening.changed) this.changed(therapistId, channelId);
        this.#logger.info(
          { therapist_id: therapistId, channel_id: channelId, expiration: new Date(answer.expiration).toISOString() },
          force
            ? "push channel replaced: the old one missed a change"
            : moved
              ? "push channel replaced: the old one delivers to another address"
              : "push channel opened",
        );
        this.#refusedAddresses.delete(push.public_url);
      } finally {
        this.#opening.delete(channelId);
      }
      if (current) {
        try {
          await gw.stopChannel(current.channelId, current.resourceId);
          this.#known.delete(current.channelId);
          await this.#channels.delete(byId(current.channelId)).catch(() => false); // else it expires by itself
        } catch (err) {
          // Not stopped, the replaced channel goes on notifying (up to a day, each answered and logged as unknown once
          // forgotten): kept aside, known, and stopped again at the next check with the credentials that opened it.
          this.#left.set(current.channelId, { channel: current, key: therapistId });
          await this.#keepLeft(current, therapistId, err, "replaced at its renewal");
        }
      }
      return answer.expiration - renewBefore;
    } catch (err) {
      if (err instanceof CalendarError && err.reason?.startsWith("push.")) {
        // Google refuses the address itself (a domain not verified for the project, not HTTPS): every calendar's watch
        // meets the same answer, every hour; said once. The credentials are not in question.
        const first = !this.#refusedAddresses.has(push.public_url);
        this.#refusedAddresses.add(push.public_url);
        this.#logger[first ? "warn" : "debug"](
          { therapist_id: therapistId, address: push.public_url, reason: err.reason, err: describeError(err) },
          "push refused for this address; polling covers it",
        );
        this.#renewalFailed(therapistId, "refused_address", err);
        return undefined;
      }
      this.#renewalFailed(therapistId, "failed", err);
      this.#logger.warn(
        { therapist_id: therapistId, err: describeError(err) },
        lostAnswer
          ? "push channel not opened: Google's answer to the watch was lost (it may be open all the same: stopped at its first notification, else it expires); polling covers this calendar"
          : "push channel not opened; polling covers this calendar",
      );
      return undefined;
    }
  }

  /** For /status and calbridge_push_renewals_total: kept until a later renewal opens a channel. */
  #renewalFailed(therapistId: string, result: "failed" | "refused_address", err: unknown): void {
    this.#health?.renewal(therapistId, { result, at: this.#clock.now(), message: errorWithoutApiText(err) });
  }

  /**
   * A record of a channel that failed may have been written all the same (a store's answer lost): it would name the
   * channel just stopped for a week. The one it replaced (or none) is put back. Best effort.
   */
  async #unrecord(therapistId: string, channelId: string, current: Channel | undefined): Promise<void> {
    try {
      if ((await this.#channels.get(therapistId))?.channelId !== channelId) return;
      if (current) await this.#channels.set(therapistId, current);
      else await this.#channels.delete(therapistId);
    } catch {
      // the store still does not answer: what it holds is what it had
    }
  }

  /**
   * A channel Google opened after this replica lost the lease (the watch's answer came late): kept, it would notify
   * beside the next leader's, and the next leader, which renews the channels it finds stored, would never stop it. So
   * it is stopped at once and stored nowhere; a stop that fails keeps it aside (`left:`), where a leader's start, or
   * this replica's next check should it lead again, stops it. Likewise a channel whose record the store did not take
   * ("unrecorded"): nothing would ever stop it, and the next check opens another.
   */
  async #withdraw(channel: Channel, gw: CalendarGateway, now: number, why: keyof typeof WITHDRAWN): Promise<void> {
    const fields = { therapist_id: channel.therapistId, channel_id: channel.channelId };
    try {
      await gw.stopChannel(channel.channelId, channel.resourceId);
      await this.#channels.delete(byId(channel.channelId)).catch(() => false); // else it expires
      this.#logger[why === "unrecorded" ? "warn" : "info"](fields, WITHDRAWN[why].stopped);
    } catch (err) {
      // Known (its notifications are acknowledged) and kept under `left:`, where the next leader's start finds it.
      this.#remember(channel);
      this.#left.set(channel.channelId, { channel, key: leftKey(channel.channelId) });
      await this.#channels
        .setMany([
          { key: leftKey(channel.channelId), value: channel, ttlMs: byIdTtl(channel, now) },
          { key: byId(channel.channelId), value: channel, ttlMs: byIdTtl(channel, now) },
        ])
        .catch(() => {}); // the store did not answer: the channel expires by itself
      this.#logger.warn({ ...fields, err: describeError(err) }, WITHDRAWN[why].kept);
    }
  }

  /**
   * A channel whose watch call may have been carried out at Google without its answer reaching this daemon (#renewNow),
   * or whose daemon stopped while waiting for it (#foundLost). channels.stop needs its resourceId, "an opaque ID that
   * identifies the resource being watched on this channel" (Calendar API reference, "Channels: stop"). Google does not
   * document it as the same for every channel of a calendar (it was in googleapis/google-api-nodejs-client#1402, an
   * observation), and a stop naming a wrong one is answered "channel not found" (google-api-nodejs-client#3025), which
   * stopChannel takes for "already stopped": so it is not borrowed from the calendar's other channel, but read from
   * the channel's own notification, whose X-Goog-Resource-ID carries it ("Push notifications" guide). Google sends the
   * first one, `sync`, when it opens the channel: when it came while the watch was out, the channel is stopped now.
   * Otherwise it is kept by id for its requested lifetime (and the by-id entries' day of grace), so that a restart or
   * another replica recognises it too, and forgotten when that ends. Its notifications are acknowledged (any other
   * answer is a delivery failure at Google) and poll nothing: Google sends the same change to the calendar's own
   * channel, and a calendar without one is polled every calendar_poll_seconds.
   */
  async #keepLost(channel: Channel, now: number): Promise<void> {
    this.#remember(channel);
    if (channel.resourceId) return this.#stopLost(channel, channel.resourceId);
    const stored = this.#channels.set(byId(channel.channelId), channel, byIdTtl(channel, now)).catch((err: unknown) => {
      this.#logger.warn(
        { therapist_id: channel.therapistId, channel_id: channel.channelId, err: describeError(err) },
        "push channel whose watch answer was lost not stored: only this daemon, until it restarts, recognises its notifications",
      );
    });
    this.#lostStored.set(channel.channelId, stored);
    await stored;
    this.#lostStored.delete(channel.channelId);
  }

  /**
   * Whether a channel taken for lost is recorded after all: its therapist's record names it, or its by-id entry is no
   * longer the provisional or lost one read (its watch was answered and stored meanwhile). Then it is remembered as
   * stored, never as lost.
   */
  async #recorded(channel: Channel): Promise<boolean> {
    const [own, byIdNow] = await this.#channels.getMany([channel.therapistId, byId(channel.channelId)]);
    const stored =
      own?.channelId === channel.channelId ? own : byIdNow && !byIdNow.opening && !byIdNow.lost ? byIdNow : undefined;
    if (!stored) return false;
    this.#remember(stored);
    return true;
  }

  /** A start found a channel stored as lost, or as opening (its daemon stopped, or lost the lease, while waiting). */
  async #foundLost(channel: Channel): Promise<void> {
    const now = this.#clock.now();
    if (channel.expiration <= now) return;
    // Read a page before: a renewal running beside this start (the lease lost and won again, the start's own renewal)
    // may have had its answer and stored the channel since. Taken for lost, the calendar's own channel was stopped at
    // its first notification, which polled nothing, while /status still said confirmed (review6).
    if (await this.#recorded(channel)) return;
    if (channel.lost) {
      this.#remember(channel);
      return;
    }
    const { opening: _, ...rest } = channel;
    this.#logger.info(
      { therapist_id: channel.therapistId, channel_id: channel.channelId },
      "push channel whose watch call was not answered before its daemon stopped: stopped at its first notification, else it expires",
    );
    await this.#keepLost({ ...rest, lost: true }, now);
  }

  /**
   * A lost channel's notification named its resource: the channel is stopped with the credentials that opened it, and
   * forgotten. A stop that fails keeps it aside under `left:` like any channel left behind (#stopLeft tries again at
   * the leader's next check; another replica's at the next leader's start). Never throws.
   */
  async #stopLost(channel: Channel, resourceId: string): Promise<void> {
    const channelId = channel.channelId;
    if (this.#stoppingLost.has(channelId)) return;
    this.#stoppingLost.add(channelId);
    if (await this.#recorded(channel).catch(() => false)) {
      this.#stoppingLost.delete(channelId);
      this.changed(channel.therapistId, channelId); // the notification taken for a lost channel's: polled after all
      return;
    }
    const found: Channel = { ...channel, resourceId };
    const fields = { therapist_id: channel.therapistId, channel_id: channelId, calendar_id: channel.calendarId };
    let opener: Opener = { gw: undefined, own: false };
    try {
      opener = await this.#openerOf(found);
      const gw = opener.gw;
      if (!gw) {
        this.#logger.info(
          { ...fields, expiration: new Date(channel.expiration).toISOString() },
          "push channel whose watch answer was lost not stopped: the credentials that opened it are gone; Google stops it at its expiration",
        );
        return;
      }
      await gw.stopChannel(channelId, resourceId);
      this.#known.delete(channelId);
      this.#lastMessage.delete(channelId);
      await this.#lostStored.get(channelId);
      await this.#channels.delete(byId(channelId)).catch(() => false); // else it expires
      this.#logger.info(fields, "push channel whose watch answer was lost: stopped");
    } catch (err) {
      this.#remember(found);
      this.#left.set(channelId, { channel: found, key: leftKey(channelId) });
      const ttlMs = byIdTtl(found, this.#clock.now());
      await this.#channels
        .setMany([
          { key: leftKey(channelId), value: found, ttlMs },
          { key: byId(channelId), value: found, ttlMs },
        ])
        .catch(() => {}); // the store did not answer: this daemon tries again, or the channel expires by itself
      this.#logger.warn(
        { ...fields, err: describeError(err) },
        "push channel whose watch answer was lost not stopped; tried again at the next check, else it expires",
      );
    } finally {
      if (opener.own) opener.gw?.close();
      this.#stoppingLost.delete(channelId);
    }
  }

  /**
   * A therapist's calendar changed, or the therapist is no longer mapped (a reload): the channel is stopped with the
   * gateway that opened it and forgotten, so renew() opens one on the calendar the mapping names now. Never throws.
   */
  async retire(therapistId: string, gw: CalendarGateway): Promise<void> {
    // Channels are the leader's: a replica that lost the lease during the reload's retires leaves them to the next
    // leader (its start finds a left-behind channel and stops it). Going on, it stopped the new leader's channel with
    // the old account's credentials and removed its record (its own memory of what it opened cleared on stopping).
    if (!this.#config.google.push) return;
    if (!this.#isLeader()) {
      // What it knew of the old calendar's channel goes all the same: leading again, its start leaves a channel left
      // behind out of the health, and until a renewal opens one on the new calendar, /status said the old channel
      // was confirmed and the poller polled the new calendar at the slow interval, with no channel on it.
      this.#forgetHealth(therapistId, gw);
      return;
    }
    try {
      const opened = this.#openedWith.get(therapistId);
      // A renewal whose record is being written (through a newer gateway, or through this one: a reload back to the
      // earlier calendar before it was written read no record, and the write then kept the other account's channel).
      if (opened) await opened.recorded;
      const current = await this.#channels.get(therapistId).catch((err: unknown) => {
        this.#forgetHealth(therapistId, gw); // its past goes with it, also when the store does not answer
        throw err;
      });
      // A renewal since the reload (the hourly check, a suspect channel's replacement, while the reload stopped another
      // therapist's channel) opened the channel of the calendar the therapist has now, and stopped the old one itself:
      // taken for the old one, it had its health wiped and was stopped with the old calendar's gateway.
      if (this.#newerOpened(therapistId, gw, current)) return;
      // Only the entry read above: one a renewal through the new gateway set meanwhile (its record write under way) stays
      // for the check before the record's removal below.
      if (this.#openedWith.get(therapistId) === opened) this.#openedWith.delete(therapistId);
      // Its past goes with it, also when no channel is stored (its renewals failed).
      this.#forgetHealth(therapistId, gw);
      if (!current || !this.#isLeader()) return;
      try {
        await gw.stopChannel(current.channelId, current.resourceId);
      } catch (err) {
        // Kept, and tried again at the next check with the credentials that opened it.
        this.#left.set(current.channelId, { channel: current, key: therapistId });
        await this.#keepLeft(current, therapistId, err);
        return;
      }
      this.#known.delete(current.channelId);
      // The therapist's record goes only while it still names the stopped channel: one such renewal while the stop was
      // out recorded its channel there (removed, it stayed open at Google, recorded nowhere, notifying for a week). Read
      // again, and not when a newer gateway's renewal has begun writing its record (its entry is set before the write,
      // with no await between this check and the delete), which a read taken before it would not show.
      const stored = (await this.#channels.get(therapistId))?.channelId === current.channelId;
      const newer = this.#openedWith.get(therapistId);
      const writing = newer !== undefined && newer.gw !== gw && newer.channelId !== current.channelId;
      const keys = stored && !writing && this.#isLeader() ? [therapistId] : [];
      await this.#channels.deleteMany([...keys, byId(current.channelId)]);
      this.#logger.info({ therapist_id: therapistId, channel_id: current.channelId }, "push channel stopped");
    } catch (err) {
      this.#logger.warn(
        { therapist_id: therapistId, err: describeError(err) },
        "push channel of a calendar no longer mapped not stopped; it expires by itself",
      );
    }
  }

  /** A renewal through a gateway other than `retired` (a newer one: an older one's channel is withdrawn) opened one. */
  /**
   * Forgets the health of the channel a retire stops, unless the health names the one a renewal through a newer gateway
   * opened meanwhile: the retire's read may be older than that renewal's record, and the channel it took for the old
   * one was then the old one indeed, but the health was the new channel's (open, recorded, confirmed): /status said none
   * and the calendar was polled at the short interval until its renewal, days later (review14).
   */
  #forgetHealth(therapistId: string, retired: CalendarGateway): void {
    const newer = this.#openedWith.get(therapistId);
    if (newer && newer.gw !== retired && this.#health?.channel(therapistId)?.channelId === newer.channelId) return;
    this.#health?.closed(therapistId);
  }

  #newerOpened(therapistId: string, retired: CalendarGateway, current: Channel | undefined): boolean {
    const opened = this.#openedWith.get(therapistId);
    return opened !== undefined && opened.gw !== retired && opened.channelId === current?.channelId;
  }

  /**
   * Whether a channel stored under its therapist is left behind: the therapist is no longer mapped, or watches another
   * calendar now (for `primary`, another delegated account's). A mapped therapist without usable credentials keeps
   * theirs: it is still their calendar.
   */
  #isLeft(channel: Channel): boolean {
    const t = this.#config.therapists.find((x) => x.therapist_id === channel.therapistId);
    if (!t) return true;
    if (channel.calendarId === undefined) return false;
    if (channel.calendarId !== t.calendar_id) return true;
    return t.calendar_id === "primary" && channel.subject !== undefined && channel.subject !== t.impersonate;
  }

  /**
   * A gateway with the credentials that opened `channel` (`own`: made for it, closed after use), or the therapist's
   * current one where no such lookup is configured; none when those credentials are gone.
   */
  async #openerOf(channel: Channel): Promise<Opener> {
    if (!this.#credentialsOf) return { gw: this.#calendars.get(channel.therapistId), own: false };
    const gw = await this.#credentialsOf(channel);
    return { gw, own: gw !== undefined };
  }

  /**
   * Stops the channels left behind, each with the credentials that opened it (leader only: start and every check).
   * Forgotten once stopped, expired, or when those credentials are gone (Google stops it at its expiration meanwhile;
   * its notifications are acknowledged and ignored). A failure is logged and tried again at the next check. Never
   * throws.
   */
  async #stopLeft(now: number): Promise<void> {
    for (const [channelId, { channel, key }] of [...this.#left]) {
      if (!this.#isLeader()) return; // the lease lost meanwhile: the next leader stops them
      const fields = { therapist_id: channel.therapistId, channel_id: channelId, calendar_id: channel.calendarId };
      let opener: Opener = { gw: undefined, own: false };
      try {
        if (channel.expiration > now) {
          opener = await this.#openerOf(channel);
          const gw = opener.gw;
          if (!gw) {
            this.#logger.info(
              { ...fields, expiration: new Date(channel.expiration).toISOString() },
              "push channel of a calendar no longer mapped not stopped: the credentials that opened it are gone; Google stops it at its expiration",
            );
          } else await gw.stopChannel(channelId, channel.resourceId);
        }
        // Its by-id entry stays while Google may still notify on it (it expires with the channel): acknowledged, ignored.
        const stopped = opener.gw !== undefined;
        const current = key === channel.therapistId ? await this.#channels.get(key) : undefined;
        await this.#channels.deleteMany([
          ...(key !== channel.therapistId || current?.channelId === channelId ? [key] : []),
          ...(stopped ? [byId(channelId)] : []),
        ]);
        this.#left.delete(channelId);
        this.#leftFailed.delete(channelId);
        if (stopped) {
          this.#known.delete(channelId);
          this.#logger.info(fields, "push channel of a calendar no longer mapped stopped");
        }
      } catch (err) {
        await this.#keepLeft(channel, key, err);
      } finally {
        if (opener.own) opener.gw?.close();
      }
    }
  }

  /** A channel left behind whose stop failed: kept under `left:<id>` (its therapist's key may be reused), tried again. */
  async #keepLeft(channel: Channel, key: string, err: unknown, what = "of a calendar no longer mapped"): Promise<void> {
    const first = !this.#leftFailed.has(channel.channelId);
    this.#leftFailed.add(channel.channelId);
    this.#logger[first ? "warn" : "debug"](
      { therapist_id: channel.therapistId, channel_id: channel.channelId, err: describeError(err) },
      `push channel ${what} not stopped; tried again at the next check`,
    );
    if (key.startsWith(leftKey(""))) return;
    try {
      const moved = leftKey(channel.channelId);
      await this.#channels.set(moved, channel, byIdTtl(channel, this.#clock.now()));
      const current = await this.#channels.get(key);
      if (current?.channelId === channel.channelId) await this.#channels.delete(key);
      this.#left.set(channel.channelId, { channel, key: moved });
    } catch {
      // Still under its therapist's key: found again at the next start, or tried again at the next check.
    }
  }

  /** POST /webhooks/google. Resolves false for other paths. */
  readonly handler = async (req: IncomingMessage, res: ServerResponse): Promise<boolean> => {
    const path = (req.url ?? "").split("?")[0];
    if (path !== PUSH_PATH) return false;
    const refuse = (status: number, result: string, fields: Record<string, unknown>, message: string) => {
      this.#notifications.inc({ result });
      this.#rejections.record(result, { remote: req.socket.remoteAddress, ...fields }, message);
      // The body (if any) is never read: the connection closes once the answer is out.
      res.writeHead(status, { connection: "close" }).end();
      return true;
    };
    if (req.method !== "POST") {
      this.#notifications.inc({ result: "method_not_allowed" });
      res.writeHead(405, { allow: "POST", ...(hasBody(req) ? { connection: "close" } : {}) }).end();
      return true;
    }
    // Google's notifications have no body (the headers carry everything); a body is not Google's.
    if (hasBody(req)) return refuse(413, "body", {}, "push notification with a body refused unread");
    const channelId = header(req, "x-goog-channel-id");
    const token = header(req, "x-goog-channel-token") ?? "";
    if (!channelId || channelId.length > MAX_CHANNEL_ID || token.length > MAX_TOKEN) {
      return refuse(
        400,
        "bad_headers",
        { channel_id_length: channelId?.length ?? 0, token_length: token.length },
        "push notification without a channel id, or with a channel id or token longer than Google's",
      );
    }
    const opening = this.#opening.get(channelId);
    if (opening) {
      if (!matchesDigest(token, opening.tokenHash)) {
        return refuse(404, "wrong_token", { channel_id: channelId }, "push notification with a wrong token; ignored");
      }
      req.resume();
      res.writeHead(200).end();
      const sync = header(req, "x-goog-resource-state") === "sync";
      this.#notifications.inc({ result: sync ? "sync" : "accepted" });
      if (sync) opening.synced = true;
      else opening.changed = true;
      const resourceId = resourceIdOf(header(req, "x-goog-resource-id"));
      if (resourceId) opening.resourceId ??= resourceId;
      return true;
    }
    let channel: Channel | undefined;
    try {
      channel = await this.#channel(channelId);
    } catch (err) {
      // Not a verdict on the channel: a 404 would drop the notification for good (Google does not retry it).
      this.#notifications.inc({ result: "store_error" });
      this.#logger.warn(
        { channel_id: channelId, err: describeError(err) },
        "push notification not checked: the store did not answer",
      );
      res.writeHead(503).end();
      return true;
    }
    if (!channel || !tokenMatches(channel, token)) {
      return refuse(
        404,
        channel ? "wrong_token" : "unknown_channel",
        { channel_id: channelId },
        "push notification for an unknown channel or with a wrong token; ignored",
      );
    }
    req.resume();
    res.writeHead(200).end();
    const state = header(req, "x-goog-resource-state");
    const resourceId = resourceIdOf(header(req, "x-goog-resource-id"));
    // A channel whose watch answer was lost (#keepLost): not the calendar's channel, so nothing is polled for it; its
    // notification names its resource, and it is stopped (by whichever replica got it).
    if (channel.lost) {
      this.#notifications.inc({ result: "lost" });
      if (!channel.resourceId && resourceId) void this.#stopLost(channel, resourceId);
      return true;
    }
    const number = Number(header(req, "x-goog-message-number"));
    if (Number.isSafeInteger(number) && number > 0) {
      if (number <= (this.#lastMessage.get(channel.channelId) ?? 0)) {
        this.#notifications.inc({ result: "replayed" });
        return true;
      }
      this.#lastMessage.set(channel.channelId, number);
    }
    const leading = this.#isLeader();
    if (leading && state !== "sync" && this.#elsewhere(channel)) return true;
    this.#notifications.inc({ result: state === "sync" ? "sync" : "accepted" });
    if (state === "sync") void this.#confirm(channel);
    if (leading) {
      if (state !== "sync") this.changed(channel.therapistId, channel.channelId);
      return true;
    }
    // A standby never polls: the leader does, told by a notice; its periodic poll covers a lost one.
    const therapistId = channel.therapistId;
    const notice = JSON.stringify({
      t: therapistId,
      s: state === "sync" ? "sync" : "exists",
      c: channel.channelId,
      // What stops a channel the leader is opening, should Google's answer to its watch be lost.
      ...(channel.opening && resourceId ? { r: resourceId } : {}),
    });
    this.#notices?.publish(PUSH_CHANGED_CHANNEL, notice).catch((err: unknown) => {
      this.#logger.debug(
        { err: describeError(err), therapist_id: therapistId },
        "push notice not published; the leader's periodic poll finds the change",
      );
    });
    return true;
  };
}

/** What #withdraw logs, by why the channel is stopped at once. */
/** The gateway a channel is stopped with (#openerOf). */
type Opener = { gw: CalendarGateway | undefined; own: boolean };

const WITHDRAWN = {
  lease: {
    stopped: "push channel opened while the lease was lost: stopped; the leader opens its own",
    kept: "push channel opened while the lease was lost: not stopped; kept for a leader's start to stop, else it expires",
  },
  retired: {
    stopped: "push channel opened for a calendar a reload took from its therapist meanwhile: stopped",
    kept: "push channel opened for a calendar a reload took from its therapist meanwhile: not stopped; tried again at the next check, else it expires",
  },
  unrecorded: {
    stopped: "push channel opened but not recorded (the store did not take it): stopped; the next check opens another",
    kept: "push channel opened but not recorded (the store did not take it): not stopped; tried again at the next check, else it expires",
  },
} as const;

/** How long a channel's by-id entry lives: until its expiration, and a day more. */
function byIdTtl(channel: Channel, now = Date.now()): number {
  return Math.max(channel.expiration - now, 0) + BY_ID_GRACE_MS;
}

/** A resource id from a notification's X-Goog-Resource-ID (or a standby's notice), if it looks like one. */
function resourceIdOf(value: unknown): string | undefined {
  if (typeof value !== "string" || value.length === 0 || value.length > MAX_RESOURCE_ID) return undefined;
  return /^[\x21-\x7e]+$/.test(value) ? value : undefined;
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
