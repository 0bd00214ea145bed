// Owns the emulator's HTTP plumbing: Google's error body shape, JSON and form bodies, answers.
import type { IncomingMessage, ServerResponse } from "node:http";

const DEFAULT_MESSAGES: Record<string, string> = {
  invalid: "Invalid Value",
  badRequest: "Bad Request",
  required: "Required",
  authError: "Invalid Credentials",
  forbidden: "Forbidden",
  notFound: "Not Found",
  duplicate: "The requested identifier already exists.",
  deleted: "Resource has been deleted",
  fullSyncRequired: "Sync token is no longer valid, a full sync is required.",
  conditionNotMet: "Precondition Failed",
  rateLimitExceeded: "Rate Limit Exceeded",
  userRateLimitExceeded: "User Rate Limit Exceeded",
  quotaExceeded: "Calendar usage limits exceeded.",
  dailyLimitExceeded: "Daily Limit Exceeded",
  backendError: "Backend Error",
  timeRangeEmpty: "The specified time range is empty.",
  channelIdNotUnique: "Channel id not unique",
  eventRemindersCountExceedsLimit: "The event exceeds the allowed maximum number of reminders.",
  cannotUseDefaultRemindersAndSpecifyOverride: "Cannot specify both default reminders and overrides at the same time.",
  cannotChangeOrganizerOfInstance: "Cannot change the organizer of an instance.",
  eventTypeRestriction: "This event type cannot be moved.",
  forbiddenForServiceAccounts: "Service accounts cannot invite attendees without Domain-Wide Delegation of Authority.",
};

const USAGE_LIMIT_REASONS = new Set([
  "rateLimitExceeded",
  "userRateLimitExceeded",
  "quotaExceeded",
  "dailyLimitExceeded",
]);

/** An error the emulator answers in Google's shape. */
export class ApiError extends Error {
  readonly status: number;
  readonly reason: string;
  readonly extra: Record<string, string>;
  /** errors[].domain; by default "usageLimits" for quota reasons, else "global". */
  readonly domain: string | undefined;
  constructor(status: number, reason: string, message?: string, extra: Record<string, string> = {}, domain?: string) {
    super(message ?? DEFAULT_MESSAGES[reason] ?? reason);
    this.status = status;
    this.reason = reason;
    this.extra = extra;
    this.domain = domain;
  }
}

/** `{"error":{"errors":[{"domain","reason","message"}],"code","message"}}` */
export function googleErrorBody(
  status: number,
  reason: string,
  message?: string,
  extra: Record<string, string> = {},
  domainOverride?: string,
) {
  const text = message ?? DEFAULT_MESSAGES[reason] ?? reason;
  const domain = domainOverride ?? (USAGE_LIMIT_REASONS.has(reason) ? "usageLimits" : "global");
  return { error: { errors: [{ domain, reason, message: text, ...extra }], code: status, message: text } };
}

export function readBody(req: IncomingMessage, limit = 1_000_000): Promise<string> {
  return new Promise((resolve, reject) => {
    let size = 0;
    const chunks: Buffer[] = [];
    req.on("data", (chunk: Buffer) => {
      size += chunk.length;
      if (size > limit) reject(new ApiError(413, "badRequest", "Request too large"));
      else chunks.push(chunk);
    });
    req.on("end", () => resolve(Buffer.concat(chunks).toString("utf8")));
    req.on("error", reject);
  });
}

export function parseJsonBody(text: string): Record<string, unknown> {
  if (!text.trim()) return {};
  try {
    const value = JSON.parse(text) as unknown;
    if (value && typeof value === "object" && !Array.isArray(value)) return value as Record<string, unknown>;
  } catch {
    // answered below
  }
  throw new ApiError(400, "parseError", "Parse Error");
}

export function sendJson(
  res: ServerResponse,
  status: number,
  body: unknown,
  headers: Record<string, string> = {},
): void {
  const text = JSON.stringify(body);
  res.writeHead(status, { "content-type": "application/json; charset=UTF-8", ...headers });
  res.end(text);
}

export function sendEmpty(res: ServerResponse, status: number): void {
  res.writeHead(status);
  res.end();
}

export function sendError(res: ServerResponse, err: ApiError): void {
  sendJson(res, err.status, googleErrorBody(err.status, err.reason, err.message, err.extra, err.domain));
}

/** Query parameters with repeatable ones kept as arrays. */
export function queryOf(url: URL): Record<string, string | string[]> {
  const out: Record<string, string | string[]> = {};
  for (const key of new Set(url.searchParams.keys())) {
    const all = url.searchParams.getAll(key);
    out[key] = all.length === 1 ? (all[0] as string) : all;
  }
  return out;
}
