// Owns telling that a calendar's push channel missed a change: a timer poll found one older than a notification
// would have let it be.
import type { Logger } from "../log.ts";
import type { PushHealth } from "./push-health.ts";
import type { CalEvent } from "./types.ts";

/**
 * A change older than this that a timer poll finds was never announced: with push working, the poll a notification
 * triggers takes it within seconds.
 */
const MISSED_AFTER_MS = 2 * 60_000;

/**
 * A timer poll of a calendar whose channel is trusted found a change (any event: ours, a therapist's, their own
 * private ones) made long enough ago that a notification would have had it polled already: the channel missed it.
 */
export function checkAnnounced(
  push: PushHealth | undefined,
  therapistId: string,
  events: readonly CalEvent[],
  readAt: number,
  log: Logger,
): void {
  if (!push?.channel(therapistId)?.confirmed) return;
  const notified = push.lastNotifiedAt(therapistId) ?? Number.NEGATIVE_INFINITY;
  const missed = events.find((e) => {
    const updated = e.updated ? Date.parse(e.updated) : Number.NaN;
    return updated < readAt - MISSED_AFTER_MS && updated > notified;
  });
  if (!missed) return;
  log.warn(
    { event_id: missed.id, updated: missed.updated },
    "push channel did not announce a change: polling this calendar every calendar_poll_seconds until a new channel is confirmed",
  );
  push.suspect(therapistId, `change of ${missed.updated} not announced`);
}
