// Owns one attempt of an appointment's sync: read both sides, plan (reading the full form when the payload or list
// item at hand lacks fields the event shows), pass the write-back gate, apply, and decide once more after a 412 (or a
// 403 on patching an event a person deleted).
import { isChangedMeanwhile } from "../booking/errors.ts";
import { givingUpWaits, guardingWrites } from "../calendar/call-runner.ts";
import type { Logger } from "../log.ts";
import { type Applied, applyAction } from "./apply.ts";
import type { Effects } from "./effects.ts";
import { isCalendarKind } from "./errors.ts";
import type { HistoryRecorder } from "./history.ts";
import { NeedsFullRead } from "./inputs.ts";
import { removeOwnCopy } from "./moved-out.ts";
import type { Known } from "./planner.ts";
import type { ReadState, StateReader } from "./reader.ts";
import { removeColleagueCopy } from "./reassign.ts";
import type { Relocator } from "./relocate.ts";
import type { BookingState } from "./snapshot.ts";
import { LeadershipLostError } from "./stopped.ts";
import type { Action, BookingPort, CalEvent, Link, Snapshot, SyncRequest } from "./types.ts";
import { type Pending, seenIn } from "./work.ts";
import { ChangeTakenBack } from "./writeback-basis.ts";
import { type Grace, graceKey, type WritebackGate } from "./writeback-gate.ts";
import type { WritebackOutcome } from "./writeback-steps.ts";

/** What an attempt carried out, and what came of it when that was a write-back. */
export interface Attempted {
  action: Action;
  writeback?: WritebackOutcome;
}

export const known = (state: ReadState): Known | null => (state.appt ? { appt: state.appt, full: state.full } : null);

export interface AttemptDeps {
  booking: BookingPort;
  fx: Effects;
  read: StateReader;
  gate: WritebackGate;
  maxAttempts: number;
  /** Where each decision about the appointment is told. */
  history: HistoryRecorder;
  /** Brings a link's event to the calendar the mapping names now before anything else is decided about it. */
  relocator?: Relocator;
  /** Whether this process may write calendars now (a daemon: while it holds the leader lease). */
  leading: () => boolean;
}

/**
 * The action planned from `state`, or from the full form when `state` is not enough (NeedsFullRead); `onFull` gets the
 * full state when one was read.
 */
export async function planReading(
  deps: Pick<AttemptDeps, "fx" | "read">,
  id: string,
  link: Link | undefined,
  state: ReadState,
  event: CalEvent | null | undefined,
  request: SyncRequest,
  then: (planned: Action, state: ReadState) => Promise<Action> = async (a) => a,
  signal?: AbortSignal,
  onFull?: (state: ReadState) => void,
): Promise<{ action: Action; state: ReadState }> {
  for (;;) {
    try {
      const planned = deps.fx.planner.plan(id, known(state), link, event, seenIn(request), request.priority);
      return { action: await then(planned, state), state };
    } catch (err) {
      if (!(err instanceof NeedsFullRead) || state.full) throw err;
      state = await deps.read.full(id, link, request, signal);
      onFull?.(state);
    }
  }
}

/**
 * One attempt. When `abort` aborts (the engine stops), its Google calls waiting for quota or a retry with nothing sent
 * are given up and the attempt rejects with the abort's reason; calls already sent finish. Once this process no longer
 * leads, the attempt sends no further calendar write (each is checked before it is sent, reads are not) and rejects
 * with LeadershipLostError: the next leader writes the same calendars, and its sync of the appointment makes it whole.
 */
export function attemptSync(
  deps: AttemptDeps,
  id: string,
  p: Pending,
  log: Logger,
  attempt: number,
  read: { state?: BookingState },
  abort: AbortSignal,
): Promise<Attempted> {
  const mayWrite = () => {
    if (!deps.leading()) throw new LeadershipLostError();
  };
  return givingUpWaits(abort, () => guardingWrites(mayWrite, () => attemptIn(deps, id, p, log, attempt, read, abort)));
}

async function attemptIn(
  deps: AttemptDeps,
  id: string,
  p: Pending,
  log: Logger,
  attempt: number,
  read: { state?: BookingState },
  abort: AbortSignal,
): Promise<Attempted> {
  const request = p.request;
  const stored = await deps.fx.links.get(id);
  // An event left in a calendar the mapping no longer names is moved first: nothing is decided from the old one.
  const readFull = async () => known(await deps.read.full(id, stored, request));
  let link = deps.relocator ? await deps.relocator.settle(stored, log, readFull) : stored;
  if (link && stored && link.calendarId !== stored.calendarId) deps.history.relocated(id, request, link);
  if (request.only === "relocate") {
    return { action: { kind: "none", appointmentId: id, reason: "event in its calendar" } };
  }
  if (request.priority === "enrich" && !(link?.present && link.enrich)) {
    return { action: { kind: "none", appointmentId: id, reason: "nothing left to enrich" } };
  }
  // An enrichment waiting for leftover budget gives way when the engine stops.
  const signal = request.priority === "enrich" ? abort : undefined;
  const remember = (s: ReadState) => {
    if (s.appt) read.state = { appt: s.appt, sourceAt: s.sourceAt, full: s.full, readAt: s.readAt };
  };
  let state = await deps.read.booking(id, link, request, signal);
  remember(state);
  // A deleted event beside a live later generation of it: the link is stale (a store put back from an older backup).
  // The live one is adopted, and nothing is written back for the deletion of the old one.
  const seen = await deps.read.decidable(link, state.appt, request);
  if (seen.relinked) {
    await deps.fx.links.save(seen.link!);
    log.warn(
      { stale_event_id: link?.eventId, event_id: seen.link?.eventId, generation: seen.link?.generation },
      "the linked event was deleted, but a later generation of it is live in the calendar: the link names that one now, and nothing is written back",
    );
  }
  link = seen.link;
  let event = seen.event;
  // Every read of the event decided from is over: a calendar change it shows was made before (moved-out.ts).
  const seenAt = deps.fx.clock.now();
  let taken: Snapshot | undefined; // what a write-back of this attempt made of the booking (WritebackInput.taken)
  for (let round = 0; ; round++) {
    const planned = await planReading(
      deps,
      id,
      link,
      state,
      event,
      request,
      (a, s) => deps.gate.pass(a, { known: known(s), link, event, override: request.override, state: p.gate }),
      signal,
      (s) => {
        log.debug("the state at hand lacks fields the event shows: the full form was read");
        remember(s);
      },
    );
    const action = planned.action;
    state = planned.state;
    try {
      const before = { link, appt: state.appt };
      let writeback: WritebackOutcome | undefined;
      const tell = (applied: Applied) => {
        writeback = applied.writeback ?? writeback;
        if (applied.writeback?.result === "ok" && action.kind === "writeback_reschedule" && state.appt) {
          taken = { ...state.appt, start_time: action.startTime };
        }
        deps.history.applied(id, request, action, applied, before);
      };
      await applyAction(
        action,
        {
          ...state,
          id,
          link,
          event,
          seenAt: decidedAt(action, event, p.gate.grace) ?? seenAt,
          log,
          attempt,
          maxAttempts: deps.maxAttempts,
          tell,
          ...(taken ? { taken } : {}),
        },
        deps.fx,
        deps.booking,
      );
      // A deleted event put back (an administrator's restore of a held deletion, cancelling from the calendar turned
      // off, ...) may have been moved to a calendar of the therapist's own account: the copy there would go on showing
      // the appointment, never updated again.
      if (link && ((action.kind === "restore" && deleted(event)) || putBackAfterRefusal(action, link))) {
        await removeOwnCopy(deps.fx, link, log, seenAt);
        await removeColleagueCopy(deps.fx, link, log);
      }
      await deps.gate.done(action, link, writeback);
      return { action, ...(writeback ? { writeback } : {}) };
    } catch (err) {
      // 412: the therapist changed the event since we last saw it. Read it and decide again, once.
      if (round === 0 && isCalendarKind(err, "precondition") && "therapistId" in action) {
        log.info({ action: action.kind }, "event changed meanwhile; re-reading it before deciding again");
        // Write-backs name no event of their own: theirs is the linked one.
        const eventId = "eventId" in action ? action.eventId : link?.eventId;
        if (eventId === undefined) throw err;
        event = await deps.fx.calendar(action.therapistId).get(eventId);
        continue;
      }
      // A write-back not sent: someone else changed the appointment since it was decided on (writeback-basis.ts).
      // Read it and decide again, twice at most (a booking changed on every read is left to the retries).
      if (round < 2 && isChangedMeanwhile(err)) {
        state = await deps.read.full(id, link, request, signal);
        remember(state);
        continue;
      }
      // A write-back not sent: the therapist took the calendar change back meanwhile. Decided again from the event read.
      if (round < 2 && err instanceof ChangeTakenBack) {
        if (err.relinked) link = err.relinked.link; // another process's record: decided from it
        event = err.event;
        continue;
      }
      // 403 on bringing the linked event up to date: Google refuses any change to an event a person deleted. The
      // booking changed while that deletion waited (its grace period, a hold) or before a poll saw it: read, it is
      // decided again by sync.conflict (the event back under a new id, or the cancellation by its own way), not
      // retried into a dead letter. A live event read means a real refusal, which stays the error.
      if (round === 0 && action.kind === "update" && isCalendarKind(err, "forbidden")) {
        const read = await deps.fx.calendar(action.therapistId).get(action.eventId);
        if (read?.status !== "cancelled") throw err;
        log.info({ event_id: action.eventId }, "the event was deleted in the calendar; deciding again from that");
        event = read;
        continue;
      }
      throw err;
    }
  }
}

/**
 * When a write-back of a deletion was first decided on from this very version of the deleted event (the grace period
 * runs since then, graceKey): it was seen deleted by then. Earlier than the attempt's own reads, so a calendar list read
 * meanwhile for another deletion can serve this one (moved-out.ts).
 */
function decidedAt(action: Action, event: CalEvent | null | undefined, grace: Grace | undefined): number | undefined {
  if (action.kind !== "writeback_cancel" || !(event?.etag ?? event?.updated)) return undefined;
  return grace?.key === graceKey(action, event) ? grace.since : undefined;
}

/**
 * The event of a refused write-back brought back in its own calendar by a later sync (a link not present is decided
 * without reading the event): the refusal is recorded before a refused reassignment's copy leaves the colleague's
 * calendar (reassign.ts), so a failure or a crash in between leaves that copy for this sync to remove.
 */
const putBackAfterRefusal = (action: Action, link: Link | undefined) =>
  action.kind === "create" && link?.removedBy === "refused" && action.therapistId === link.therapistId;

/** The event as read shows a deletion in the mapped calendar (undefined: not read). */
const deleted = (event: CalEvent | null | undefined) => event === null || event?.status === "cancelled";
