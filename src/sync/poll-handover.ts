// Owns how a calendar poll waits for the syncs it handed to the engine. A sync the engine refused (this replica no
// longer leads, or the daemon stops) fails the poll, so the calendar's sync token is not advanced past the change:
// the leader's poll reads it again (the token is in the shared store). The refusal is logged at debug, with why.
import type { Logger } from "../log.ts";
import { EngineStoppedError } from "./stopped.ts";

/**
 * Waits for every sync of a poll's changes; rejects with the first refusal once they all ended. Resolves whether each
 * change is settled: false when one failed for now and waits for the engine's retry, which lives in memory only (a
 * stop before it forgot the change for good, for an appointment beyond the sync window): the token stays then.
 */
export async function handedOver(work: readonly Promise<unknown>[], log: Logger): Promise<boolean> {
  const ends = await Promise.allSettled(work);
  const refused = ends.flatMap((end) => (end.status === "rejected" ? [end.reason] : []));
  if (refused.length === 0) {
    const retrying = ends.filter((end) => end.status === "fulfilled" && isRetrying(end.value)).length;
    if (retrying > 0) {
      log.info(
        { retrying, changes: work.length },
        "calendar changes not synced yet (retried): the sync token stays where it was, so they are read again",
      );
    }
    return retrying === 0;
  }
  const first: unknown = refused[0];
  if (first instanceof EngineStoppedError) {
    log.debug(
      { reason: first.message, refused: refused.length, changes: work.length },
      "calendar changes not synced here: the sync token stays where it was, so the leader's poll reads them again",
    );
  }
  throw first;
}

/** A sync that failed for now and is retried later (SyncOutcome `ok: false`, not final). */
function isRetrying(outcome: unknown): boolean {
  const o = outcome as { ok?: unknown; final?: unknown } | null | undefined;
  return o?.ok === false && o.final !== true;
}
