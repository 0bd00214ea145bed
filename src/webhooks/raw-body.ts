// Owns reading a request body as raw bytes under a size limit: refused up front when Content-Length is too big,
// cut short as soon as a streamed body passes the limit.
import type { IncomingMessage } from "node:http";

export type RawBody = { ok: true; body: Buffer } | { ok: false; reason: "too_large" | "aborted" };

export function readRawBody(req: IncomingMessage, maxBytes: number): Promise<RawBody> {
  const declared = Number(req.headers["content-length"]);
  if (Number.isFinite(declared) && declared > maxBytes) return Promise.resolve({ ok: false, reason: "too_large" });
  return new Promise((resolve) => {
    const chunks: Buffer[] = [];
    let size = 0;
    const finish = (result: RawBody) => {
      req.off("data", onData);
      req.off("end", onEnd);
      req.off("error", onError);
      req.off("close", onError);
      resolve(result);
    };
    const onData = (chunk: Buffer) => {
      size += chunk.length;
      if (size > maxBytes) {
        // Stop reading; the caller answers 413 and closes the connection.
        req.pause();
        finish({ ok: false, reason: "too_large" });
        return;
      }
      chunks.push(chunk);
    };
    const onEnd = () => finish({ ok: true, body: Buffer.concat(chunks, size) });
    const onError = () => finish({ ok: false, reason: "aborted" });
    req.on("data", onData);
    req.on("end", onEnd);
    req.on("error", onError);
    // "close" before "end": the client went away mid-body.
    req.on("close", onError);
  });
}
