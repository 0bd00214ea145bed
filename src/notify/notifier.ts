// Owns telling people: on the leader, every interval, it observes each condition, records what opened or cleared
// (level-triggered: one message when a condition opens, none while it stays open unless what kind of open it is
// changes (ConditionKind.variant), one when it clears; the state lives in the store), queues the notices per
// recipient, and delivers each queue as one message at most every min_interval_seconds, retrying a failed target with
// backoff. It runs on a timer of its own and never blocks sync.
import { hostname } from "node:os";
import type { Registry } from "prom-client";
import { type Clock, systemClock } from "../clock.ts";
import type { Config } from "../config/schema.ts";
import { secrets as defaultSecrets, type Logger, type SecretRegistry, silentLogger } from "../log.ts";
import type { Store } from "../store/store.ts";
import { describeError } from "../sync/errors.ts";
import { type Channel, DeliveryError, type NotifyChannels, notifyChannels, type Refusal } from "./channels.ts";
import { CONDITIONS, conditionById, type Notice, type Text, VARIANT_HOLD_MS } from "./conditions.ts";
import { EndpointCheck } from "./endpoint-check.ts";
import { type ConditionState, MAX_QUEUED, NotifyLedger, type Outbox } from "./ledger.ts";
import { type NotifyMetrics, notifyMetrics } from "./metrics.ts";
import { afterReconcile, type ReconcileOutcome } from "./outcomes.ts";
import { compose, type Message } from "./render.ts";
import type { LiveView, NotifyView } from "./view.ts";

export interface NotifierOptions {
  config: Config;
  store: Store;
  registry: Registry;
  clock?: Clock;
  logger?: Logger;
  /** Only the leader observes and sends. */
  isLeader(): boolean;
  live(): LiveView;
  listWebhooks(signal?: AbortSignal): Promise<Record<string, unknown>[]>;
  /** The therapist's reconnect link (the connect flow's link maker); undefined when there is none. */
  reconnectLink?: (therapistId: string) => Promise<string | undefined>;
  /** Run once before the first check of a leadership term (re-read what another leader may have changed). */
  prepare?: () => Promise<unknown>;
  /** How often conditions are observed and queues delivered (default 15 s). */
  intervalMs?: number;
  /** Fixed recipients (default: config.notify.targets, and the therapists of the live mapping). */
  channels?: Channel[];
  secrets?: SecretRegistry;
  random?: () => number;
}

export interface TestResult {
  target: string;
  ok: boolean;
  detail: string;
}

/** First retry of a failed target; doubles per failure up to BACKOFF_MAX_MS. */
export const BACKOFF_BASE_MS = 30_000;
/** How long a check waits for the webhook endpoint's answer before going on without it (#endpointChecked). */
const ENDPOINT_WAIT_MS = 2000;
export const BACKOFF_MAX_MS = 30 * 60_000;

/** `retries` as an Outbox field: absent when there are none. */
function retriesOf(retries: Record<string, Outbox> | undefined): Pick<Outbox, "retries"> {
  return retries && Object.keys(retries).length > 0 ? { retries } : {};
}

function withoutRetries({ retries: _, ...box }: Outbox): Outbox {
  return box;
}

function withoutRefusals({ refusals: _, ...box }: Outbox & { refusals?: Refusal[] }): Outbox {
  return box;
}

export class Notifier {
  readonly #o: NotifierOptions;
  readonly #channels: NotifyChannels;
  readonly #config: Config;
  readonly #clock: Clock;
  readonly #log: Logger;
  readonly #ledger: NotifyLedger;
  readonly #metrics: NotifyMetrics;
  readonly #endpoint: EndpointCheck;
  readonly #secrets: SecretRegistry;
  /** When each condition was first seen open (for conditions that must stay open a while before they count). */
  readonly #openSince = new Map<string, number>();
  /**
   * Per open condition, the other kind of open (ConditionKind.variant) than the one last told, and since when it has
   * been observed without a break: told once that lasts VARIANT_HOLD_MS. In memory, like #openSince: a restart, or a
   * spell as follower, starts the hold again (an update comes later, never earlier nor twice).
   */
  readonly #variantSince = new Map<string, { variant: string; since: number }>();
  /** The mapped therapists as last recorded (see #forgetUnmapped). */
  #mappedKey: string | undefined;
  #chain: Promise<void> = Promise.resolve();
  /** The endpoint check under way, if any (see #endpointChecked). */
  #endpointRun: Promise<void> | undefined;
  #stop: AbortController | undefined;
  #loop: Promise<void> | undefined;

  constructor(options: NotifierOptions) {
    this.#o = options;
    this.#config = options.config;
    this.#clock = options.clock ?? systemClock;
    this.#log = options.logger ?? silentLogger;
    this.#secrets = options.secrets ?? defaultSecrets;
    this.#ledger = new NotifyLedger(options.store);
    this.#metrics = notifyMetrics(options.registry);
    const fixed = options.channels;
    this.#channels = fixed
      ? {
          targets: fixed,
          therapists: () => [],
          close: () => {
            for (const c of fixed) c.close();
          },
        }
      : notifyChannels(options.config);
    this.#endpoint = new EndpointCheck({
      url: options.config.webhooks.public_url,
      everyMs: options.config.notify.webhook_check_hours * 3_600_000,
      listWebhooks: options.listWebhooks,
      ledger: this.#ledger,
      clock: this.#clock,
      logger: this.#log,
      metrics: this.#metrics,
    });
  }

  /** Checks now and then every interval, until stop() (leader work). */
  start(): void {
    if (this.#loop) return;
    const stop = new AbortController();
    this.#stop = stop;
    const every = this.#o.intervalMs ?? 15_000;
    this.#loop = (async () => {
      await this.#o.prepare?.().catch((err: unknown) => this.#log.warn({ err: describeError(err) }, "prepare failed"));
      while (!stop.signal.aborted) {
        await this.check().catch((err: unknown) =>
          this.#log.warn({ err: describeError(err) }, "notifications not checked; trying again next interval"),
        );
        await this.#clock.sleep(every, stop.signal).catch(() => {});
      }
    })();
  }

  /**
   * Stops the timer; a delivery in flight is abandoned and stays queued (sent twice, perhaps; lost, never). The gauges
   * only the leader keeps (the failure streak, the endpoint's state) go back to 0: a replica that stopped leading no
   * longer exports its last values as if they were current (the next leader sets them from the store).
   */
  async stop(): Promise<void> {
    this.#stop?.abort();
    this.#resetLeaderGauges();
    await this.#loop;
    await this.#chain;
    await this.#endpointRun; // given up at once: its request heard the stop
    this.#resetLeaderGauges();
    this.#loop = undefined;
    this.#stop = undefined;
  }

  #resetLeaderGauges(): void {
    this.#metrics.reconcileFailures.reset();
    this.#metrics.endpointDisabled.reset();
  }

  /**
   * The recipients now: each target, and each therapist written to in the mapping as it is now (a reload changes it
   * in place; a therapist's channel keeps its id, so its queue and rate limit carry over).
   */
  get channels(): readonly Channel[] {
    return [...this.#channels.targets, ...this.#channels.therapists()];
  }

  close(): void {
    this.#channels.close();
  }

  /** Observes, records and delivers once (one at a time); a no-op unless this replica leads. */
  check(): Promise<void> {
    const run = this.#chain.then(async () => {
      if (!this.#o.isLeader()) {
        this.#variantSince.clear(); // not observed meanwhile: a hold starts again once this replica leads
        return;
      }
      await this.#endpointChecked();
      // Read once per check: what is queued is delivered to the same recipients (a removed therapist is not written to).
      const channels = this.channels;
      await this.#evaluate(channels);
      await Promise.all(channels.map((c) => this.#deliver(c)));
    });
    this.#chain = run.catch(() => {});
    return run;
  }

  /**
   * Runs the endpoint check when due and waits for it a little: its answer is usually there in time for this check to
   * tell it. A booking API that does not answer (timeouts and retries: over a minute) or a rate gate that makes it
   * wait holds back no other message: the check goes on alone, and the next check after its answer tells it.
   */
  async #endpointChecked(): Promise<void> {
    const signal = this.#stop?.signal;
    this.#endpointRun ??= this.#endpoint
      .runIfDue(signal)
      .catch((err: unknown) => this.#log.warn({ err: describeError(err) }, "webhook endpoint not checked; tried again"))
      .finally(() => {
        this.#endpointRun = undefined;
      });
    const run = this.#endpointRun;
    let timer: NodeJS.Timeout | undefined;
    const waited = new Promise<void>((resolve) => {
      timer = setTimeout(resolve, ENDPOINT_WAIT_MS); // real time: it bounds a wait for a real answer
    });
    await Promise.race([run, waited]).finally(() => clearTimeout(timer));
  }

  /** A non-dry-run reconciliation ended: the failure streak and the guard's state, kept in the store. */
  async reconcileFinished(outcome: ReconcileOutcome): Promise<void> {
    const facts = afterReconcile(await this.#ledger.reconcileFacts(), outcome, this.#clock.now());
    await this.#ledger.setReconcileFacts(facts);
    // A run that ended after this replica stopped leading leaves the gauge to the leader.
    if (this.#o.isLeader()) this.#metrics.reconcileFailures.set(facts.failures);
  }

  /** `calbridge doctor --notify-test`: one test message to every target, now, past queues and rate limits. */
  async sendTest(): Promise<TestResult[]> {
    const message = compose(
      this.#config.notify.label,
      [
        {
          title: "Test notification",
          text:
            `This is a test message from \`calbridge doctor --notify-test\` on ${hostname()}. ` +
            "If you can read it, calbridge's notifications reach this target.",
        },
      ],
      0,
    );
    return Promise.all(
      this.#channels.targets
        .filter((c) => c.audience === "admins")
        .map(async (c): Promise<TestResult> => {
          try {
            const refusals = await c.send(message);
            if (refusals.length === 0) return { target: c.target, ok: true, detail: "test message accepted" };
            // Some of an e-mail target's addresses refused: a 5xx fails the check, a 4xx (greylisting) passes by itself.
            const said = refusals.map((r) => `${r.address}: ${r.detail}`).join("; ");
            return {
              target: c.target,
              ok: refusals.every((r) => !r.permanent),
              detail: `test message accepted for the other addresses; refused for ${said}`,
            };
          } catch (err) {
            return { target: c.target, ok: false, detail: describeError(err) };
          }
        }),
    );
  }

  /**
   * A therapist who left the mapping (a reload) has their conditions forgotten: an alert open when they left never
   * cleared (nobody observes them), and mapped again, still broken, their return was silent. Recorded in the store, so
   * a restart or a new leader in between forgets them too.
   */
  async #forgetUnmapped(ids: string[]): Promise<void> {
    const key = ids.join("\n");
    if (key === this.#mappedKey) return;
    const mapped = new Set(ids);
    const gone = ((await this.#ledger.mapped()) ?? []).filter((id) => !mapped.has(id));
    const kinds = CONDITIONS.map((c) => c.id);
    await this.#ledger.remap(ids, gone, kinds);
    for (const id of gone)
      for (const kind of kinds) {
        this.#openSince.delete(`${kind}:${id}`);
        this.#variantSince.delete(`${kind}:${id}`);
      }
    if (gone.length > 0)
      this.#log.info({ therapists: gone }, "notifications: conditions of therapists no longer mapped forgotten");
    this.#mappedKey = key;
  }

  async #evaluate(channels: readonly Channel[]): Promise<void> {
    const now = this.#clock.now();
    const [reconcile, endpoint] = await Promise.all([this.#ledger.reconcileFacts(), this.#ledger.endpointFacts()]);
    const view: NotifyView = {
      ...this.#o.live(),
      now,
      ...(reconcile ? { reconcile } : {}),
      ...(endpoint ? { endpoint } : {}),
    };
    this.#metrics.reconcileFailures.set(reconcile?.failures ?? 0);
    await this.#forgetUnmapped(view.therapists.map((t) => t.id));
    const observed = CONDITIONS.flatMap((kind) =>
      kind.observe(view, this.#config).map((o) => ({ kind, o, key: `${kind.id}:${o.subject}` })),
    );
    const stored = await this.#ledger.conditions(observed.map((x) => x.key));
    const states = new Map<string, ConditionState>();
    const notices: { notice: Notice; tellsTherapist: boolean }[] = [];
    observed.forEach(({ kind, o, key }, i) => {
      const pending = this.#variantSince.get(key);
      this.#variantSince.delete(key); // kept below only while another kind of open is observed without a break
      const was = stored[i];
      const wasOpen = was?.open ?? false;
      let open = o.open;
      if (open === true) {
        const since = this.#openSince.get(key) ?? now;
        this.#openSince.set(key, since);
        if (!wasOpen && now - since < (kind.holdMs?.(this.#config) ?? 0)) open = undefined;
      } else if (open === false) this.#openSince.delete(key);
      if (open === undefined) return;
      const variant = open ? kind.variant?.(o) : undefined;
      // Still open, but another kind of open (reconnecting helps now, or no longer does): told again as an update once
      // it has lasted VARIANT_HOLD_MS without a break (a flip back to the kind told sends nothing). A state stored
      // without a variant (an older build) is taken as unchanged: the variant is recorded, nobody told.
      let update = false;
      if (open && wasOpen) {
        if (variant === undefined || was?.variant === variant) return;
        if (was?.variant === undefined) {
          states.set(key, { open, since: was?.since ?? now, variant });
          return;
        }
        const since = pending?.variant === variant ? pending.since : now;
        if (now - since < VARIANT_HOLD_MS) {
          this.#variantSince.set(key, { variant, since });
          if (since === now)
            this.#log.debug(
              { condition: kind.id, ...(o.subject ? { subject: o.subject } : {}), from: was?.variant, to: variant },
              "condition changed while open: people are told if it stays so",
            );
          return;
        }
        update = true;
      } else if (open === wasOpen) return;
      states.set(key, {
        open,
        since: update ? (was?.since ?? now) : now,
        ...(variant !== undefined ? { variant } : {}),
      });
      const notice: Notice = {
        id: `${key}@${now}`,
        condition: kind.id,
        subject: o.subject,
        opened: open,
        ...(update ? { update: true } : {}),
        at: now,
        ...(o.therapistId ? { therapistId: o.therapistId } : {}),
        facts: o.facts,
      };
      notices.push({ notice, tellsTherapist: kind.tellsTherapist === true });
      this.#log.info(
        {
          condition: kind.id,
          ...(o.subject ? { subject: o.subject } : {}),
          ...(update ? { from: was?.variant, to: variant } : {}),
          facts: o.facts,
        },
        update
          ? "condition changed while open: people are told again"
          : open
            ? "condition opened: people are told"
            : "condition cleared: people are told",
      );
    });
    const queued = new Map<string, Notice[]>();
    for (const c of channels) {
      const mine = notices
        .filter((n) => c.audience === "admins" || (n.tellsTherapist && n.notice.therapistId === c.therapistId))
        .map((n) => n.notice);
      if (mine.length > 0) queued.set(c.id, mine);
    }
    await this.#ledger.commit(states, queued);
  }

  /**
   * Delivers the channel's queue when it is due, then what each of an e-mail target's addresses was refused for a
   * moment, to that address alone, when its own backoff is over.
   */
  async #deliver(channel: Channel): Promise<void> {
    let box = await this.#ledger.outbox(channel.id);
    if (!this.#o.isLeader()) return;
    if (box.notices.length > 0 && this.#clock.now() >= box.nextAt) {
      const after = await this.#attempt(channel, box);
      if (!after) return; // stopping: it stays queued for the next leader or start
      box = { ...after, ...retriesOf(this.#refused(channel, box, after.refusals, box.retries)) };
      await this.#ledger.saveOutbox(channel.id, withoutRefusals(box));
    }
    for (const [address, retry] of Object.entries(box.retries ?? {})) {
      if (this.#clock.now() < retry.nextAt || !this.#o.isLeader()) continue;
      const { [address]: _, ...others } = box.retries ?? {};
      const alone = channel.to?.(address);
      let left: Outbox | undefined;
      if (!alone) {
        this.#log.info(
          { target: channel.target, address, notices: retry.notices.length },
          "notification not sent again to an address no longer among the target's: dropped",
        );
      } else {
        const after = await this.#attempt(alone, retry);
        if (!after) return;
        left = after.notices.length > 0 ? withoutRefusals(after) : undefined;
      }
      box = { ...withoutRetries(box), ...retriesOf(left ? { ...others, [address]: left } : others) };
      await this.#ledger.saveOutbox(channel.id, box);
    }
  }

  /**
   * One attempt at a queue, through `channel` (to one address alone for one from an e-mail target's `to()`). The
   * queue as it is after it, with the addresses that were refused while the others got it; undefined when stopping
   * (nothing changed: it stays queued).
   */
  async #attempt(channel: Channel, box: Outbox): Promise<(Outbox & { refusals: Refusal[] }) | undefined> {
    const message = await this.#message(channel, box);
    if (!message) return { notices: [], attempts: 0, nextAt: box.nextAt, refusals: [] };
    const signal = this.#stop?.signal;
    const who = {
      target: channel.target,
      ...(channel.therapistId ? { therapist_id: channel.therapistId } : {}),
      ...(channel.address ? { address: channel.address } : {}),
    };
    let refusals: Refusal[];
    try {
      refusals = await channel.send(message, signal);
    } catch (err) {
      if (signal?.aborted) return undefined;
      const oneAddress = channel.audience === "therapist" || channel.address !== undefined;
      if (oneAddress && err instanceof DeliveryError && err.permanent) {
        // Their address itself refused (RCPT TO, a 5xx), a typo in therapists[].email: retried, it failed every 30 minutes
        // for ever (a new reconnect link each time). Any other refusal (the login, the sender, the message) is retried.
        this.#metrics.deliveries.inc({ target: channel.target, result: "refused" });
        this.#log.error(
          { ...who, notices: box.notices.length, err: describeError(err) },
          channel.audience === "therapist"
            ? "notification to the therapist refused for good by the mail server: dropped; check therapists[].email"
            : "notification to one of the target's addresses refused for good by the mail server: dropped for it; check notify.targets[].to",
        );
        return { notices: [], attempts: 0, nextAt: box.nextAt, refusals: [] };
      }
      const attempts = box.attempts + 1;
      const delay = this.#backoff(attempts);
      this.#metrics.deliveries.inc({ target: channel.target, result: "failed" });
      this.#log.warn(
        { ...who, attempts, retry_in_s: Math.round(delay / 1000), err: describeError(err) },
        "notification not delivered; retried with backoff",
      );
      return { ...withoutRetries(box), attempts, nextAt: this.#clock.now() + delay, refusals: [] };
    }
    this.#metrics.deliveries.inc({ target: channel.target, result: "sent" });
    this.#log.info({ ...who, notices: box.notices.length }, "notification sent");
    const next = this.#clock.now() + this.#config.notify.min_interval_seconds * 1000;
    return { notices: [], attempts: 0, nextAt: next, refusals };
  }

  /**
   * The addresses of an e-mail target refused while the others got the message: one refused for good is told (an
   * error naming it) and not sent it again; one refused for a moment gets the notices it missed queued for it alone,
   * retried with backoff. The others are not sent them again. `retries` as they are after it.
   */
  #refused(
    channel: Channel,
    box: Outbox,
    refusals: readonly Refusal[],
    retries: Record<string, Outbox> | undefined,
  ): Record<string, Outbox> {
    const next = { ...retries };
    for (const r of refusals) {
      const who = { target: channel.target, address: r.address, notices: box.notices.length };
      if (r.permanent) {
        this.#metrics.deliveries.inc({ target: channel.target, result: "refused" });
        this.#log.error(
          { ...who, err: r.detail },
          "notification to one of the target's addresses refused for good by the mail server: dropped for it; check notify.targets[].to",
        );
        continue;
      }
      const had = next[r.address];
      const all = [...(had?.notices ?? []), ...box.notices];
      const over = Math.max(0, all.length - MAX_QUEUED);
      const dropped = (had?.dropped ?? 0) + (box.dropped ?? 0) + over;
      const attempts = (had?.attempts ?? 0) + 1;
      const delay = this.#backoff(attempts);
      next[r.address] = {
        notices: all.slice(over),
        attempts,
        nextAt: this.#clock.now() + delay,
        ...(dropped > 0 ? { dropped } : {}),
      };
      this.#metrics.deliveries.inc({ target: channel.target, result: "failed" });
      this.#log.warn(
        { ...who, attempts, retry_in_s: Math.round(delay / 1000), err: r.detail },
        "notification not delivered to one of the target's addresses, refused for a moment; retried to it alone with backoff",
      );
    }
    return next;
  }

  /** The wait before the next try after `attempts` failures in a row. */
  #backoff(attempts: number): number {
    const full = Math.min(BACKOFF_MAX_MS, BACKOFF_BASE_MS * 2 ** (attempts - 1));
    return Math.round(full * (0.5 + (this.#o.random ?? Math.random)() / 2));
  }

  /** The queue as one message (a summary when it holds several notices); undefined when nothing in it is known. */
  async #message(channel: Channel, box: Outbox): Promise<Message | undefined> {
    const links = new Map<string, Promise<string | undefined>>();
    const texts: Text[] = [];
    let opened = 0;
    let updated = 0;
    for (const n of box.notices) {
      const kind = conditionById(n.condition);
      if (!kind) continue; // written by another version of calbridge
      const wantsLink =
        kind.reconnect && n.opened && n.facts.auth === "oauth" && !n.facts.fix && n.therapistId !== undefined;
      let link: string | undefined;
      if (wantsLink && n.therapistId) {
        const id = n.therapistId;
        if (!links.has(id)) links.set(id, this.#reconnectLink(id));
        link = await links.get(id);
      }
      const t = kind.describe(n, {
        config: this.#config,
        audience: channel.audience,
        ...(link ? { reconnectLink: link } : {}),
      });
      texts.push({ ...t, title: this.#secrets.scrub(t.title), text: this.#secrets.scrub(t.text) });
      if (n.update) updated++;
      else if (n.opened) opened++;
    }
    return texts.length > 0 ? compose(this.#config.notify.label, texts, opened, box.dropped ?? 0, updated) : undefined;
  }

  async #reconnectLink(therapistId: string): Promise<string | undefined> {
    if (!this.#o.reconnectLink) return undefined;
    try {
      return await this.#o.reconnectLink(therapistId);
    } catch (err) {
      this.#log.warn({ therapist_id: therapistId, err: describeError(err) }, "no reconnect link for the message");
      return undefined;
    }
  }
}
