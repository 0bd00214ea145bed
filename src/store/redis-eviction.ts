// Owns the check of a Redis store's eviction policy. calbridge keeps in Redis what must not vanish: accepted webhooks
// not yet processed (acknowledged 2xx, so the booking service will not send them again), links, held and pending
// write-backs, stored OAuth tokens. With a maxmemory and any policy but noeviction, Redis drops keys once full
// (allkeys-*: any key, the least used first, which are exactly these; volatile-*: those with a ttl), silently. Redis's
// documentation (redis.io, "Key eviction"): "noeviction: New values aren't saved when memory limit is reached"; with it
// a full Redis refuses writes, which calbridge sees (/readyz fails, webhooks are answered 503 and sent again).
import type { RedisClient } from "./store.ts";

export const EVICTION_FIX =
  "CONFIG SET maxmemory-policy noeviction (and in redis.conf: maxmemory-policy noeviction), or give Redis no maxmemory; keep --appendonly yes";

/** How long the check waits for INFO: a start or doctor must not hang on it. */
const INFO_WAIT_MS = 5000;

/** Why Redis may drop calbridge's keys (a maxmemory with a policy other than noeviction), or undefined. */
export async function evictionRisk(client: RedisClient): Promise<string | undefined> {
  let timer: NodeJS.Timeout | undefined;
  const info = await Promise.race([
    client.info("memory").catch(() => undefined), // INFO refused (a managed Redis's ACL): it cannot be told here
    new Promise<undefined>((r) => {
      timer = setTimeout(() => r(undefined), INFO_WAIT_MS);
    }),
  ]).finally(() => clearTimeout(timer));
  if (info === undefined) return undefined;
  const field = (name: string) => new RegExp(`^${name}:(.*)$`, "m").exec(info)?.[1]?.trim();
  const maxmemory = Number(field("maxmemory") ?? 0);
  const policy = field("maxmemory_policy");
  if (!(maxmemory > 0) || policy === undefined || policy === "noeviction") return undefined;
  return `Redis may evict calbridge's keys: maxmemory ${maxmemory} bytes with maxmemory-policy ${policy}; once full it drops accepted webhooks, links, held write-backs and stored tokens without a word`;
}
