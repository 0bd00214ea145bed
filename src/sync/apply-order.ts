// Owns the order and pace in which a reconciliation hands its plan to the engine: therapists in turn, a bounded
// number at a time.
import type { PlanEntry } from "./types.ts";

/** Plan entries handed to the engine at once at most. */
export const APPLY_IN_FLIGHT = 256;

/**
 * `fn` over `items`, at most `size` at once, each next one started as soon as one finishes. After the first rejection
 * (the engine refused: this replica no longer leads) none is started; it rejects with it once those running ended.
 */
export async function inPool<T>(items: readonly T[], size: number, fn: (item: T) => Promise<void>): Promise<void> {
  let next = 0;
  let failed = false;
  const worker = async () => {
    try {
      while (next < items.length && !failed) await fn(items[next++]!);
    } catch (err) {
      failed = true;
      throw err;
    }
  };
  const ends = await Promise.allSettled(Array.from({ length: Math.min(size, items.length) }, worker));
  for (const end of ends) if (end.status === "rejected") throw end.reason;
}

/** The plan with therapists taking turns: the first entry of each, then the second of each, and so on. */
export function interleaved(plan: readonly PlanEntry[]): PlanEntry[] {
  const byTherapist = new Map<string, PlanEntry[]>();
  for (const entry of plan) {
    const t = "therapistId" in entry ? entry.therapistId : "to" in entry ? entry.to.therapistId : "";
    const list = byTherapist.get(t);
    if (list) list.push(entry);
    else byTherapist.set(t, [entry]);
  }
  const lists = [...byTherapist.values()];
  const out: PlanEntry[] = [];
  for (let i = 0; out.length < plan.length; i++) for (const list of lists) if (i < list.length) out.push(list[i]!);
  return out;
}

/**
 * Hands out each appointment's sync source for the writes and lets it go after its last plan entry, so what the
 * sources hold (the listed appointment, its event) is freed during the write burst rather than after it. An
 * appointment with events strayed into two calendars has two entries, and both get the source.
 */
export class SourcesInUse<S> {
  readonly #sources: Map<string, S>;
  readonly #uses = new Map<string, number>();

  constructor(sources: Map<string, S>, plan: readonly PlanEntry[]) {
    this.#sources = sources;
    for (const entry of plan) this.#uses.set(entry.appointmentId, (this.#uses.get(entry.appointmentId) ?? 0) + 1);
  }

  take(appointmentId: string): S | undefined {
    const source = this.#sources.get(appointmentId);
    const left = (this.#uses.get(appointmentId) ?? 1) - 1;
    if (left > 0) this.#uses.set(appointmentId, left);
    else {
      this.#uses.delete(appointmentId);
      this.#sources.delete(appointmentId);
    }
    return source;
  }
}

/** Empties what a run no longer needs, so nothing it holds outlives its use while the run goes on. */
export function forget(collections: { clear(): void }[], lists: unknown[][]): void {
  for (const c of collections) c.clear();
  for (const l of lists) l.length = 0;
}
