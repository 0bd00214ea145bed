// Owns the sync retry policy: how many attempts an appointment gets, how long between them, and how long a calendar
// may stay unavailable before the appointments waiting on it go to the dead letters.

export interface RetryPolicy {
  /** Failed attempts before an appointment's sync is given up (a dead letter). */
  maxAttempts: number;
  /** First wait between attempts; doubles each time, up to maxDelayMs, with jitter. */
  baseMs: number;
  maxDelayMs: number;
  /** How long a therapist's calendar may be unusable (credentials, quota pause) before its syncs are given up. */
  unavailableGraceMs: number;
}

export const DEFAULT_RETRY: RetryPolicy = {
  maxAttempts: 5,
  baseMs: 5_000,
  maxDelayMs: 300_000,
  unavailableGraceMs: 24 * 3_600_000,
};

export function withDefaults(partial: Partial<RetryPolicy> | undefined): RetryPolicy {
  const out = { ...DEFAULT_RETRY };
  for (const [k, v] of Object.entries(partial ?? {})) if (v !== undefined) (out as Record<string, number>)[k] = v;
  return out;
}

/** The wait before the next attempt after `failures` failures: exponential, capped, with jitter (half to full). */
export function retryDelay(policy: RetryPolicy, failures: number, random: () => number = Math.random): number {
  const exp = Math.min(policy.maxDelayMs, policy.baseMs * 2 ** Math.max(0, failures - 1));
  return Math.round(exp * (0.5 + random() / 2));
}
