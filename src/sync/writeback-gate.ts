// Owns what stands between a therapist's calendar change and the booking service: a grace period (Google's Undo, a
// restore from the Bin, a move moved back) before a deletion or a move is written back, and the write-back guard that
// holds a burst of them for a person to decide. An administrator's decision passes both: restore, and apply of the
// write-back that was held (one that has changed since is held again as what it is now).
import type { Clock } from "../clock.ts";
import type { WritebackConfig } from "../config/schema.ts";
import type { Mapping } from "./mapping.ts";
import type { PendingWritebacks } from "./pending-writebacks.ts";
import type { Known, Planner } from "./planner.ts";
import { LeadershipLostError } from "./stopped.ts";
import type { Action, CalEvent, Link, SyncRequest } from "./types.ts";
import type { HeldWriteback, WritebackGuard } from "./writeback-guard.ts";
import type { WritebackOutcome } from "./writeback-steps.ts";

/** The answers of a write-back that sent nothing to the booking service. */
const NOTHING_SENT = new Set<WritebackOutcome["result"]>(["moved_back", "rewritten", "disabled"]);

type WritebackAction = Extract<Action, { kind: "writeback_cancel" | "writeback_reschedule" }>;

/** How long a write-back of `kind` waits before it is sent (a deletion's, which may be a reassignment, or a move's). */
export const graceMsOf = (wb: WritebackConfig, kind: WritebackAction["kind"]): number =>
  (kind === "writeback_cancel" ? wb.cancel_grace_seconds : wb.reschedule_grace_seconds) * 1000;

/**
 * The longest wait of the write-backs a therapist's settings can produce: a deletion is one whenever cancelling or
 * reassigning from the calendar is on (decide.ts: a move to a colleague's calendar is seen as a deletion first).
 */
export const longestGraceMs = (wb: WritebackConfig): number =>
  Math.max(
    wb.cancel || wb.reassign ? graceMsOf(wb, "writeback_cancel") : 0,
    wb.reschedule ? graceMsOf(wb, "writeback_reschedule") : 0,
  );

/** A write-back not sent now: waiting for its grace period to pass, or held by the guard. Not a failure. */
export class WritebackWaits extends Error {
  readonly why: "grace" | "held";
  readonly inMs: number;
  readonly action: Action;
  constructor(why: "grace" | "held", action: Action, inMs = 0) {
    super(why === "grace" ? `write-back waits ${Math.ceil(inMs / 1000)} s for the grace period` : "write-back held");
    this.name = "WritebackWaits";
    this.why = why;
    this.action = action;
    this.inMs = inMs;
  }
}

/** What the gate keeps about one appointment's pending write-back across runs (the engine's pending work). */
export interface GateState {
  /** The grace period running now. A new one (a new object) starts whenever the write-back decided on changes. */
  grace?: Grace;
}

/** One grace period: what it is for, and since when. */
export interface Grace {
  /** The write-back it is for (graceKey): what would be sent, and the calendar change it comes from. */
  key: string;
  /** Our clock when that write-back was first decided on. */
  since: number;
}

/**
 * What a write-back would send and the calendar change it comes from: the kind, a reschedule's new start, and the
 * event's etag (a deletion after an Undo is another deletion, though it would send the same cancel). Any change of it
 * restarts the grace period: the change to be sent must itself have stood that long.
 */
export function graceKey(action: WritebackAction, event: CalEvent | null | undefined): string {
  const version = event?.etag ?? event?.updated ?? "";
  return action.kind === "writeback_cancel"
    ? `cancel ${version}`
    : `reschedule ${Date.parse(action.startTime)} ${version}`;
}

/** What the guard would hold of a write-back. */
function heldEntry(action: WritebackAction): Omit<HeldWriteback, "heldAt" | "reason"> {
  return {
    appointmentId: action.appointmentId,
    therapistId: action.therapistId,
    kind: action.kind === "writeback_cancel" ? "cancel" : "reschedule",
    ...(action.kind === "writeback_reschedule" ? { startTime: action.startTime } : {}),
  };
}

/** The same write-back as the one held: the same kind, for the same therapist, a reschedule to the same start. */
function sameWriteback(held: HeldWriteback, entry: Omit<HeldWriteback, "heldAt" | "reason">): boolean {
  if (held.kind !== entry.kind || held.therapistId !== entry.therapistId) return false;
  if (entry.kind === "cancel") return true;
  const a = Date.parse(held.startTime ?? "");
  return Number.isFinite(a) && a === Date.parse(entry.startTime ?? "");
}

/** A write-back not sent because this replica no longer holds the leader lease; the next leader sends it. */
/** A lost leadership like any other (LeadershipLostError): given up, not a failure; the next leader sends it. */
export class NotLeadingError extends LeadershipLostError {
  constructor(appointmentId: string) {
    super();
    this.message = `write-back of ${appointmentId} not sent: this replica no longer leads; the next leader takes it up`;
    this.name = "NotLeadingError";
  }
}

/** An administrator's restore with no event to put back: nothing is done, and the hold stays (writeback-held.ts). */
const DECLINED = "write-back declined by an administrator";

export const ADMIN_RESTORE_NOTICE =
  "calbridge: this event was put back by an administrator: the change made to it in the calendar was held by the write-back guard and not sent to the booking service.";

export class WritebackGate {
  readonly #guard: WritebackGuard;
  readonly #mapping: Mapping;
  readonly #planner: Planner;
  readonly #clock: Clock;
  readonly #pending: PendingWritebacks | undefined;
  readonly #leading: (() => boolean) | undefined;

  constructor(o: {
    guard: WritebackGuard;
    mapping: Mapping;
    planner: Planner;
    clock: Clock;
    /** Where waits are kept across a restart (without it, in memory only). */
    pending?: PendingWritebacks;
    /** Whether this process may write back now (it holds the leader lease); without it, always. */
    leading?: () => boolean;
  }) {
    this.#guard = o.guard;
    this.#mapping = o.mapping;
    this.#planner = o.planner;
    this.#clock = o.clock;
    this.#pending = o.pending;
    this.#leading = o.leading;
  }

  get guard(): WritebackGuard {
    return this.#guard;
  }

  /**
   * The action to carry out now, or WritebackWaits. Actions other than write-backs pass unchanged. An administrator's
   * "restore" turns a held write-back into putting the event back; "apply" sends it if it is still the one held.
   */
  async pass(
    action: Action,
    c: {
      known: Known | null;
      link: Link | undefined;
      /** The event the action was decided from. */
      event: CalEvent | null | undefined;
      override: SyncRequest["override"];
      state: GateState;
    },
  ): Promise<Action> {
    if (action.kind !== "writeback_cancel" && action.kind !== "writeback_reschedule") return action;
    const { appointmentId: id, therapistId } = action;
    const entry = heldEntry(action);
    if (c.override === "apply") {
      // A person applies what the hold showed them, and only that: a held move since deleted is not sent as a
      // cancellation. The hold shows what the calendar asks for now, for them to decide again.
      const held = await this.#guard.heldFor(id);
      if (held) {
        if (sameWriteback(held, entry)) return action;
        await this.#guard.rehold(entry, held);
        throw new WritebackWaits("held", action);
      }
      // Nothing held (any more): no decision about this write-back was made; it takes the ordinary way.
    }
    if (c.override === "restore") {
      // Throws NeedsFullRead when the state at hand lacks fields the event shows: the engine reads and comes back.
      const restore =
        c.known && c.link ? this.#planner.restoreOf(id, c.known, c.link, ADMIN_RESTORE_NOTICE) : undefined;
      // A person said no to this write-back: with no event to put back, nothing is done, and it is never sent.
      return restore ?? { kind: "none", appointmentId: id, reason: DECLINED };
    }
    if (await this.#guard.isHeld(id)) throw new WritebackWaits("held", action);
    this.#guard.note(therapistId, id);
    const now = this.#clock.now();
    // Timed from when this write-back was first decided on, not the first of the pending work: a deletion after an
    // Undo, or after a move, waits its own full period.
    const key = graceKey(action, c.event);
    // A wall clock stepped back (NTP) would put `since` in the future and hold the write-back that much longer (an
    // hour for an hour's step): the period starts again from now instead, at most one period late.
    if (c.state.grace?.key !== key || c.state.grace.since > now) c.state.grace = { key, since: now };
    const wb = this.#mapping.writeback(therapistId);
    const remaining = c.state.grace.since + graceMsOf(wb, action.kind) - now;
    if (remaining > 0) {
      await this.#pending?.note(id, therapistId);
      throw new WritebackWaits("grace", action, remaining);
    }
    const verdict = await this.#guard.admit(entry);
    if (verdict === "held") throw new WritebackWaits("held", action);
    // Sent only while this replica leads: one that lost the lease meanwhile (a long stall, a store it could not reach)
    // leaves the write-back to the next leader, which takes it up from the store (never both sending it).
    if (this.#leading && !this.#leading()) {
      await this.#pending?.note(id, therapistId);
      throw new NotLeadingError(id);
    }
    return action;
  }

  /**
   * An action was carried out: a write-back sent keeps counting in the window; anything else ends the intent, also a
   * write-back that sent nothing (`writeback`: a move to the therapist's own calendar undone, a reassignment turned off).
   * An action that left the calendar change as it was ends nothing: a hold of it stays for a person to decide.
   */
  async done(action: Action, link: Link | undefined, writeback?: WritebackOutcome): Promise<void> {
    const unsent = writeback && NOTHING_SENT.has(writeback.result);
    const sent = (action.kind === "writeback_cancel" || action.kind === "writeback_reschedule") && !unsent;
    const therapistId = link?.therapistId ?? ("therapistId" in action ? action.therapistId : undefined);
    if (this.#resolves(action, therapistId)) await this.#guard.settled(therapistId, action.appointmentId, sent);
    await this.#pending?.clear(action.appointmentId);
  }

  /**
   * Whether the action settles the therapist's calendar change. Not when nothing was done about it: the therapist is
   * not mapped (their calendar is neither written nor written back from; a booking webhook or a reconciliation of one
   * of their appointments dropped its hold, and the deletion was neither sent nor put back), or an administrator's
   * restore found no event to put back.
   */
  #resolves(action: Action, therapistId: string | undefined): boolean {
    if (action.kind !== "none") return true;
    if (action.reason === DECLINED) return false;
    return therapistId === undefined || this.#mapping.therapist(therapistId) !== undefined;
  }
}
