// Owns the per-appointment history as the sync engine feeds it: one call per decision (an action carried out, a
// write-back waiting or held, a failure), each one line at its hook, turned into an entry and queued for the store.
// Recording never fails a sync and never waits for the store.
import type { Clock } from "../clock.ts";
import type { Applied } from "./apply.ts";
import { actionEntry, failureEntry, type HistoryEntry, originOf, waitEntry } from "./history-entry.ts";
import type { HistoryLog } from "./history-log.ts";
import type { Action, Link, Snapshot, SyncRequest } from "./types.ts";

/** What the engine tells the history. */
export interface HistoryRecorder {
  /**
   * An action took effect (`applied`: what came of it, told as soon as it is known, so a step that fails afterwards,
   * such as putting an event back after a refusal, does not hide it), decided from `before`.
   */
  applied(
    id: string,
    request: SyncRequest,
    action: Action,
    applied: Applied,
    before: { link: Link | undefined; appt: Snapshot | null },
  ): void;
  /**
   * A write-back was not sent now. `period` stands for the grace period it waits out (the gate's, for this
   * appointment's pending work): each one is told once, however often the work runs while it waits.
   */
  waiting(
    id: string,
    request: SyncRequest,
    wait: { why: "grace" | "held"; action: Action; inMs: number },
    period: object,
  ): void;
  /** The event was moved to the calendar the mapping names now (an administrator changed it); `link` is the new one. */
  relocated(id: string, request: SyncRequest, link: Link): void;
  /** A sync failed: `key` is the engine's (`appt:<id>`); told on the first failure of a chain, and when given up. */
  failed(key: string, request: SyncRequest, err: unknown, o: { final: boolean; runs: number }): void;
}

export const noHistory: HistoryRecorder = { applied() {}, waiting() {}, relocated() {}, failed() {} };

export class History implements HistoryRecorder {
  readonly log: HistoryLog;
  readonly #clock: Clock;
  /** Grace periods already told. */
  readonly #graceTold = new WeakSet<object>();

  constructor(log: HistoryLog, clock: Clock) {
    this.log = log;
    this.#clock = clock;
  }

  applied(
    id: string,
    request: SyncRequest,
    action: Action,
    applied: Applied,
    before: { link: Link | undefined; appt: Snapshot | null },
  ): void {
    this.#add(id, actionEntry(this.#base(request), action, applied, before));
  }

  waiting(
    id: string,
    request: SyncRequest,
    wait: { why: "grace" | "held"; action: Action; inMs: number },
    period: object,
  ): void {
    if (wait.why === "grace") {
      if (this.#graceTold.has(period)) return;
      this.#graceTold.add(period);
    }
    this.#add(id, waitEntry(this.#base(request), wait.action, wait.why, wait.inMs));
  }

  relocated(id: string, request: SyncRequest, link: Link): void {
    this.#add(id, {
      ...this.#base(request),
      origin: "admin",
      kind: "event_relocated",
      therapistId: link.therapistId,
      eventId: link.eventId,
      reason: "the mapping names another calendar",
    });
  }

  failed(key: string, request: SyncRequest, err: unknown, o: { final: boolean; runs: number }): void {
    if (!key.startsWith("appt:") || !(o.final || o.runs === 1)) return;
    this.#add(key.slice("appt:".length), failureEntry(this.#base(request), err, o.final, o.runs));
  }

  #base(request: SyncRequest): Pick<HistoryEntry, "at" | "origin" | "trigger"> {
    return { at: new Date(this.#clock.now()).toISOString(), origin: originOf(request), trigger: request.reason };
  }

  #add(id: string, entry: HistoryEntry | undefined): void {
    if (entry) this.log.append(id, entry);
  }
}
