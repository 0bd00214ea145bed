// Owns the retry delay of Google calls: truncated exponential backoff with full jitter.

export interface BackoffPolicy {
  /** Cap of the first delay; doubles per attempt. */
  baseMs: number;
  /** Truncation: no delay exceeds this. */
  maxMs: number;
  /** Uniform in [0, 1). */
  random: () => number;
}

export const DEFAULT_BACKOFF: Omit<BackoffPolicy, "random"> = { baseMs: 1000, maxMs: 32_000 };

/**
 * Delay before retry number `attempt` (1 = first retry): random in [0, min(max, base * 2^(attempt-1))), but at least a
 * server's Retry-After, itself truncated at `maxMs` (a call never sleeps longer than that between two tries).
 */
export function backoffDelay(attempt: number, policy: BackoffPolicy, retryAfterMs = 0): number {
  const cap = Math.min(policy.maxMs, policy.baseMs * 2 ** Math.max(0, attempt - 1));
  return Math.max(Math.min(retryAfterMs, policy.maxMs), Math.floor(policy.random() * cap));
}
