// Owns the write guard of a sync: a check run before each attempt of a call that changes something outside calbridge
// (a calendar write, a write-back to the booking service), however deep in the sync the call is made. The engine runs
// each sync within one, so a replica that lost the leader lease sends none of a running sync's further writes: the
// next leader does that work, and two leaders never send the same cancellation.
import { AsyncLocalStorage } from "node:async_hooks";

const scope = new AsyncLocalStorage<() => void>();

/** Runs `fn` so that `guard` runs before each attempt of the writes it makes; one that throws sends nothing. */
export function guardingWrites<T>(guard: () => void, fn: () => T): T {
  return scope.run(guard, fn);
}

/** The guard of the sync this call is part of, if any. */
export function writeGuard(): (() => void) | undefined {
  return scope.getStore();
}
