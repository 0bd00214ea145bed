// Owns the sync engine's view of metrics: the few instruments it reports to, with a no-op default so the engine
// runs without a metrics registry (the daemon passes the prom-client ones from src/daemon/metrics.ts).

interface CounterLike {
  inc(labels: Record<string, string>, value?: number): void;
}
interface PlainCounterLike {
  inc(): void;
}
interface GaugeLike {
  set(value: number): void;
}
interface HistogramLike {
  observe(value: number): void;
}

interface LabelledGaugeLike {
  set(labels: Record<string, string>, value: number): void;
  remove(labels: Record<string, string>): void;
}

export interface SyncMetrics {
  operations: CounterLike;
  writebacks: CounterLike;
  guardTripped: PlainCounterLike;
  /** Write-backs held by the write-back guard, per therapist. */
  writebacksHeld: LabelledGaugeLike;
  /** Times a therapist's write-back hold opened. */
  writebackGuardTripped: CounterLike;
  lastReconcileSuccess: GaugeLike;
  reconcileDuration: HistogramLike;
  deadLetters: GaugeLike;
}

const noop = { inc() {}, set() {}, observe() {}, remove() {} };

export const noopSyncMetrics: SyncMetrics = {
  operations: noop,
  writebacks: noop,
  guardTripped: noop,
  writebacksHeld: noop,
  writebackGuardTripped: noop,
  lastReconcileSuccess: noop,
  reconcileDuration: noop,
  deadLetters: noop,
};
