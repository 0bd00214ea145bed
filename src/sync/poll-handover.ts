// Owns how a calendar poll waits for the syncs it handed to the engine. A sync the engine refused (this replica no
// longer leads, or the daemon stops) fails the poll, so the calendar's sync token is not advanced past the change:
// the leader's poll reads it again (the token is in the shared store). The refusal is logged at debug, with why.
import type { Logger } from "../log.ts";
import { EngineStoppedError } from "./stopped.ts";

/** Waits for every sync of a poll's changes; rejects with the first refusal once they all ended. */
export async function handedOver(work: readonly Promise<unknown>[], log: Logger): Promise<void> {
  const refused = (await Promise.allSettled(work)).flatMap((end) => (end.status === "rejected" ? [end.reason] : []));
  if (refused.length === 0) return;
  const first: unknown = refused[0];
  if (first instanceof EngineStoppedError) {
    log.debug(
      { reason: first.message, refused: refused.length, changes: work.length },
      "calendar changes not synced here: the sync token stays where it was, so the leader's poll reads them again",
    );
  }
  throw first;
}
