// Owns the order and pace in which a reconciliation hands its plan to the engine: therapists in turn, a bounded
// number at a time.
import type { PlanEntry } from "./types.ts";

/** Plan entries handed to the engine at once at most. */
export const APPLY_IN_FLIGHT = 256;

/** `fn` over `items`, at most `size` at once, each next one started as soon as one finishes. */
export async function inPool<T>(items: readonly T[], size: number, fn: (item: T) => Promise<void>): Promise<void> {
  let next = 0;
  const worker = async () => {
    while (next < items.length) await fn(items[next++]!);
  };
  await Promise.all(Array.from({ length: Math.min(size, items.length) }, worker));
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
