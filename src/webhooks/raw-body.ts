// Owns reading a request body as raw bytes under limits: its own size (refused up front when Content-Length is too
// big, cut short as soon as a streamed body passes it), a share of the budget of bytes held across all requests in
// flight, and an idle timeout between chunks, so a slow or huge body never holds memory for long.
import type { IncomingMessage } from "node:http";
import type { ByteBudget } from "./byte-budget.ts";

export type RawBodyFailure = "too_large" | "over_budget" | "timeout" | "aborted";

export type RawBody =
  | {
      ok: true;
      body: Buffer;
      /** Gives the body's bytes back to the budget; call once the body is no longer needed. Idempotent. */
      release(): void;
    }
  | {
      ok: false;
      reason: RawBodyFailure;
      /**
       * With "too_large" on a body that came without a Content-Length: the bytes read before it passed the limit, in
       * order (the request is paused after them), for a caller that goes on reading it (oversized.ts).
       */
      consumed?: Buffer[];
    };

export interface BodyLimits {
  maxBytes: number;
  /** Shared by every request in flight; reserved by Content-Length up front, or chunk by chunk when streamed. */
  budget?: ByteBudget;
  /** The body fails with "timeout" when no byte arrives for this long. Default: none. */
  idleTimeoutMs?: number;
  /**
   * The body fails with "timeout" when it is not whole this long after it began to be awaited (a body trickled just
   * inside the idle timeout: the listener's own request limit would end it unsaid, as a client's abort). Default: none.
   */
  totalTimeoutMs?: number;
}

/** Content-Length as a number, or undefined when absent or unreadable (a chunked body). */
export function declaredLength(req: IncomingMessage): number | undefined {
  const value = req.headers["content-length"];
  if (value === undefined) return undefined;
  const n = Number(value);
  return Number.isFinite(n) && n >= 0 ? n : undefined;
}

export function readRawBody(req: IncomingMessage, limits: BodyLimits): Promise<RawBody> {
  const { maxBytes, budget } = limits;
  const declared = declaredLength(req);
  if (declared !== undefined && declared > maxBytes) return Promise.resolve({ ok: false, reason: "too_large" });
  // With a Content-Length, its whole size is reserved before a byte is read: refused at once when it does not fit.
  let reserved = 0;
  if (declared !== undefined && budget) {
    if (!budget.tryReserve(declared)) return Promise.resolve({ ok: false, reason: "over_budget" });
    reserved = declared;
  }
  const release = () => {
    budget?.release(reserved);
    reserved = 0;
  };
  return new Promise((resolve) => {
    const chunks: Buffer[] = [];
    let size = 0;
    let timer: NodeJS.Timeout | undefined;
    let total: NodeJS.Timeout | undefined;
    let finished = false;
    // One timer per body, pushed back by each chunk (refresh() reuses it instead of a new one per chunk), and none once
    // the parser has seen the whole message (`req.complete`): what is left are local events, nothing can stall.
    const armTimer = () => {
      if (limits.idleTimeoutMs === undefined || finished || req.complete) return;
      if (timer) timer.refresh();
      else {
        timer = setTimeout(() => fail("timeout"), limits.idleTimeoutMs);
        // Armed with the first idle timer: a body that is whole at once costs neither.
        if (limits.totalTimeoutMs !== undefined) total = setTimeout(() => fail("timeout"), limits.totalTimeoutMs);
      }
    };
    // The listeners stay on the request once it is settled (taking four off again cost more than the rest of this
    // function) and do nothing then: "close" comes after every request, and a late "error" is swallowed.
    const done = () => {
      finished = true;
      clearTimeout(timer);
      clearTimeout(total);
    };
    const fail = (reason: RawBodyFailure, consumed?: Buffer[]) => {
      if (finished) return;
      done();
      // Stop reading; the caller answers and closes the connection (or reads on, without holding the bytes).
      req.pause();
      chunks.length = 0;
      release();
      resolve(consumed ? { ok: false, reason, consumed } : { ok: false, reason });
    };
    const onData = (chunk: Buffer) => {
      if (finished) return;
      size += chunk.length;
      if (size > maxBytes) return fail("too_large", [...chunks, chunk]);
      if (budget && size > reserved) {
        // Streamed (or longer than declared, which node's parser does not allow): reserve as it comes.
        if (!budget.tryReserve(size - reserved)) return fail("over_budget");
        reserved = size;
      }
      chunks.push(chunk);
      armTimer();
    };
    const onEnd = () => {
      if (finished) return;
      done();
      resolve({ ok: true, body: Buffer.concat(chunks, size), release });
      chunks.length = 0;
    };
    const onAborted = () => fail("aborted");
    req.on("data", onData);
    req.on("end", onEnd);
    req.on("error", onAborted);
    // "close" before "end": the client went away mid-body.
    req.on("close", onAborted);
    // The request arrives while node parses the bytes that carried its headers, which often carry the whole body too:
    // the timer is armed once that parse is over, only when the body is still incomplete (a small delivery then costs
    // no timer at all).
    queueMicrotask(armTimer);
  });
}
