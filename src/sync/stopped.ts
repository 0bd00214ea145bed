// Owns the error of work the sync engine gave up because it stops, or because this replica lost the leader lease (a
// module of its own: the steps of a sync check for it without importing the engine's queue).
/** Thrown to callers waiting for a request the engine will not finish (it stopped): the work stays where it came from. */
export class EngineStoppedError extends Error {
  constructor(message = "the sync engine stopped before this request was finished") {
    super(message);
    this.name = "EngineStoppedError";
  }
}

/**
 * A sync refused, or given up before its next calendar write, because this replica no longer holds the leader lease:
 * the next leader writes the same calendars and does this work. A stop like any other (nothing failed, nothing is
 * gone, nothing refused): no retry, no dead letter, no restore.
 */
export class LeadershipLostError extends EngineStoppedError {
  constructor() {
    super("this replica no longer leads (the leader lease was lost): the next leader syncs this");
    this.name = "LeadershipLostError";
  }
}
