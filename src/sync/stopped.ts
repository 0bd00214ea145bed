// Owns the error of work the sync engine gave up because it stops (a module of its own: the steps of a sync check for
// it without importing the engine's queue).
/** Thrown to callers waiting for a request the engine will not finish (it stopped): the work stays where it came from. */
export class EngineStoppedError extends Error {
  constructor() {
    super("the sync engine stopped before this request was finished");
    this.name = "EngineStoppedError";
  }
}
