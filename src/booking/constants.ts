// Owns the booking client's defaults and its User-Agent.
import { createRequire } from "node:module";

function version(): string {
  try {
    // Two levels up from src/booking/ and from dist/booking/ alike.
    const pkg = createRequire(import.meta.url)("../../package.json") as { version?: unknown };
    return typeof pkg.version === "string" ? pkg.version : "0.0.0";
  } catch {
    return "0.0.0";
  }
}

export const USER_AGENT = `calbridge/${version()}`;
export const DEFAULT_TIMEOUT_MS = 15_000;
export const DEFAULT_MAX_RETRIES = 4;
export const DEFAULT_MAX_RATE_LIMIT_RETRIES = 8;
/** Full-jitter backoff between retries: random() * min(cap, base * 2^attempt). */
export const BACKOFF_BASE_MS = 500;
export const BACKOFF_CAP_MS = 20_000;
/** The spec's maximum page size; lists always ask for it. */
export const PER_PAGE = 100;
/** Pages of GET /v1/webhooks read at most (a thousand endpoints): an answer that never ends is not read for ever. */
export const MAX_WEBHOOK_PAGES = 10;
