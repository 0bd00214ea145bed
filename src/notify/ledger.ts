// Owns the notifications' table in the store ("notify"): each condition's last known state, each recipient's queue of
// notices not delivered yet, and the facts the notifier records (the reconciliation streak, the endpoint check). The
// leader is its only writer; keeping it in the store is what lets a restart or a new leader carry on without sending
// anything twice.
import type { Store, Table } from "../store/store.ts";
import type { Notice } from "./conditions.ts";
import type { EndpointFacts, ReconcileFacts } from "./view.ts";

export interface ConditionState {
  open: boolean;
  since: number;
  /**
   * While open: what kind of open was last told (ConditionKind.variant). Absent from a state an older build stored:
   * taken as unchanged (recorded at the next look, without a message).
   */
  variant?: string;
}

/** One recipient's notices waiting for delivery, and when the next attempt may be made. */
export interface Outbox {
  notices: Notice[];
  /** Failed attempts since the last delivery (the backoff grows with it). */
  attempts: number;
  /** Epoch ms before which nothing is sent: the rate limit after a delivery, the backoff after a failure. */
  nextAt: number;
  /** Notices dropped because the queue was full (a target down for days), mentioned in the next message. */
  dropped?: number;
  /**
   * An e-mail target's addresses the mail server refused for a moment (a 4xx to RCPT TO: greylisting, a full mailbox)
   * while it took the message for the others: each one's own queue of what it missed, sent to it alone.
   */
  retries?: Record<string, Outbox>;
}

/** A recipient down for a long time keeps at most this many notices; older ones are counted, not kept. */
export const MAX_QUEUED = 200;

const EMPTY: Outbox = { notices: [], attempts: 0, nextAt: 0 };

/** The therapists mapped when conditions were last observed. */
interface MappedFacts {
  ids: string[];
}

type Row = ConditionState | Outbox | ReconcileFacts | EndpointFacts | MappedFacts;

export class NotifyLedger {
  readonly #table: Table<Row>;

  constructor(store: Store) {
    this.#table = store.table<Row>("notify");
  }

  async conditions(keys: string[]): Promise<(ConditionState | undefined)[]> {
    return (await this.#table.getMany(keys.map((k) => `cond:${k}`))) as (ConditionState | undefined)[];
  }

  async outbox(channelId: string): Promise<Outbox> {
    return ((await this.#table.get(`out:${channelId}`)) as Outbox | undefined) ?? { ...EMPTY, notices: [] };
  }

  saveOutbox(channelId: string, box: Outbox): Promise<void> {
    return this.#table.set(`out:${channelId}`, box);
  }

  /**
   * Records condition changes and queues their notices, in one write (one statement on SQLite): a crash leaves
   * either both or neither, so a change is never recorded without its messages, nor queued twice.
   */
  async commit(states: Map<string, ConditionState>, queued: Map<string, Notice[]>): Promise<void> {
    if (states.size === 0 && queued.size === 0) return;
    const boxes = await Promise.all([...queued.keys()].map((id) => this.outbox(id)));
    const entries: { key: string; value: Row }[] = [];
    for (const [key, state] of states) entries.push({ key: `cond:${key}`, value: state });
    [...queued].forEach(([id, notices], i) => {
      const box = boxes[i]!;
      const all = [...box.notices, ...notices];
      const over = Math.max(0, all.length - MAX_QUEUED);
      entries.push({
        key: `out:${id}`,
        value: { ...box, notices: all.slice(over), ...(over > 0 ? { dropped: (box.dropped ?? 0) + over } : {}) },
      });
    });
    await this.#table.setMany(entries);
  }

  /** The therapists mapped when conditions were last observed; undefined before the first time. */
  async mapped(): Promise<string[] | undefined> {
    return ((await this.#table.get("fact:mapped")) as MappedFacts | undefined)?.ids;
  }

  /** Forgets every condition (of `kinds`) of the therapists `gone`, and records `ids` as the ones mapped now. */
  async remap(ids: string[], gone: string[], kinds: readonly string[]): Promise<void> {
    for (const id of gone) for (const kind of kinds) await this.#table.delete(`cond:${kind}:${id}`);
    await this.#table.set("fact:mapped", { ids });
  }

  async reconcileFacts(): Promise<ReconcileFacts | undefined> {
    return (await this.#table.get("fact:reconcile")) as ReconcileFacts | undefined;
  }

  setReconcileFacts(facts: ReconcileFacts): Promise<void> {
    return this.#table.set("fact:reconcile", facts);
  }

  async endpointFacts(): Promise<EndpointFacts | undefined> {
    return (await this.#table.get("fact:endpoint")) as EndpointFacts | undefined;
  }

  setEndpointFacts(facts: EndpointFacts): Promise<void> {
    return this.#table.set("fact:endpoint", facts);
  }
}
