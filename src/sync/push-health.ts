// Owns whether each calendar's push channel can be trusted to announce its changes: opened, not expired, confirmed by
// Google's first message (or any notification) on it, and not caught missing a change. While it can, the calendar's
// poll is only a slow safety net; when it cannot, the poller goes back to the configured interval.
//
// Google's push guide (developers.google.com/calendar/api/guides/push): a new channel gets a "sync" message first;
// notifications carry no data, so an incremental sync follows each; delivery is not guaranteed, so polling stays on.

export interface ChannelState {
  channelId: string;
  expiration: number;
  /** Google's sync message, or a notification, arrived on this channel: the address reaches us. */
  confirmed: boolean;
  /** Why it is not trusted although confirmed (a change it did not announce), if so. */
  suspect?: string;
}

export type PushHealthListener = (therapistId: string, why: "opened" | "confirmed" | "suspect" | "closed") => void;

/**
 * What a calendar's channel is at a moment: open and confirmed by Google's first message (or a notification); open,
 * not confirmed yet (the address may not reach us: the calendar is polled at the short interval); open but caught
 * missing a change (being replaced); none (never opened, not opened since a failure, or expired).
 */
export type ChannelHealth = "confirmed" | "unconfirmed" | "suspect" | "none";

/**
 * How a renewal's events.watch ended: a channel opened; Google refused the address itself (push.*: a domain not
 * verified, not HTTPS); or it failed otherwise (Google's 4xx/5xx, usageLimits, no answer, the store).
 */
export type RenewalResult = "opened" | "refused_address" | "failed";

/** The last renewal that failed for a calendar, kept until one succeeds: when (our clock), and a line on why. */
export interface RenewalFailure {
  at: number;
  result: Exclude<RenewalResult, "opened">;
  /** The API's code and HTTP status (never its text), or calbridge's own message. */
  message: string;
}

export class PushHealth {
  readonly #channels = new Map<string, ChannelState>();
  readonly #notifiedAt = new Map<string, number>();
  readonly #listeners: PushHealthListener[] = [];
  readonly #renewalFailures = new Map<string, RenewalFailure>();
  readonly #renewalListeners: ((therapistId: string, result: RenewalResult) => void)[] = [];

  /** Called when a calendar's trust changes (its poll interval may change with it). */
  onChange(listener: PushHealthListener): void {
    this.#listeners.push(listener);
  }

  /** A channel is open for the calendar (newly, or loaded from the store with what was known of it). */
  opened(therapistId: string, channel: { channelId: string; expiration: number; confirmed?: boolean }): void {
    this.#channels.set(therapistId, {
      channelId: channel.channelId,
      expiration: channel.expiration,
      confirmed: channel.confirmed === true,
    });
    this.#emit(therapistId, "opened");
  }

  /** A message arrived on the calendar's channel (`sync` first, then `exists`). */
  confirmed(therapistId: string, channelId?: string): void {
    const ch = this.#channels.get(therapistId);
    if (!ch || (channelId !== undefined && ch.channelId !== channelId)) return;
    if (ch.confirmed && ch.suspect === undefined) return;
    ch.confirmed = true;
    delete ch.suspect;
    this.#emit(therapistId, "confirmed");
  }

  /** A change notification arrived for the calendar at `at` (our clock). */
  notified(therapistId: string, at: number, channelId?: string): void {
    this.#notifiedAt.set(therapistId, at);
    this.confirmed(therapistId, channelId);
  }

  lastNotifiedAt(therapistId: string): number | undefined {
    return this.#notifiedAt.get(therapistId);
  }

  /** The channel missed a change (or cannot be relied on for another reason) until a new one is confirmed. */
  suspect(therapistId: string, why: string): void {
    const ch = this.#channels.get(therapistId);
    if (!ch || ch.suspect !== undefined) return;
    ch.suspect = why;
    this.#emit(therapistId, "suspect");
  }

  /** Called at each renewal's end (the renewal counter). */
  onRenewal(listener: (therapistId: string, result: RenewalResult) => void): void {
    this.#renewalListeners.push(listener);
  }

  /**
   * A renewal of the calendar's channel ended: a failure is kept (for /status) until a later renewal opens a channel.
   * Not a change of trust: the channel it was to replace, if any, goes on until it expires.
   */
  renewal(therapistId: string, outcome: { result: "opened" } | RenewalFailure): void {
    if (outcome.result === "opened") this.#renewalFailures.delete(therapistId);
    else this.#renewalFailures.set(therapistId, { at: outcome.at, result: outcome.result, message: outcome.message });
    for (const l of this.#renewalListeners) l(therapistId, outcome.result);
  }

  /** The last renewal failure since a channel was last opened for the calendar, if any. */
  lastRenewalFailure(therapistId: string): Readonly<RenewalFailure> | undefined {
    return this.#renewalFailures.get(therapistId);
  }

  /** The calendar is no longer watched (a reload removed its therapist or re-pointed them): its past goes with it. */
  closed(therapistId: string): void {
    this.#renewalFailures.delete(therapistId);
    this.#notifiedAt.delete(therapistId);
    if (this.#channels.delete(therapistId)) this.#emit(therapistId, "closed");
  }

  channel(therapistId: string): Readonly<ChannelState> | undefined {
    return this.#channels.get(therapistId);
  }

  /** The calendar's channel at `now` (see ChannelHealth). */
  state(therapistId: string, now: number): ChannelHealth {
    const ch = this.#channels.get(therapistId);
    if (!ch || ch.expiration <= now) return "none";
    if (ch.suspect !== undefined) return "suspect";
    return ch.confirmed ? "confirmed" : "unconfirmed";
  }

  /** Whether the calendar's changes are announced by push at `now`; until when, if so (the channel's expiry). */
  healthyUntil(therapistId: string, now: number): number | undefined {
    const ch = this.#channels.get(therapistId);
    if (!ch?.confirmed || ch.suspect !== undefined || ch.expiration <= now) return undefined;
    return ch.expiration;
  }

  #emit(therapistId: string, why: Parameters<PushHealthListener>[1]): void {
    for (const l of this.#listeners) l(therapistId, why);
  }
}
