// Owns checking a compressed webhook body's signature over its decoded bytes without holding them: the body goes
// through a streaming decoder whose output feeds the signature's HMAC and is dropped, up to a size. The spec does not
// say whether a compressed delivery is signed as sent or as decoded (route.ts accepts either). A body that is over
// `webhooks.max_body_bytes` as sent, or only once decoded, was judged by the bytes as sent alone: one signed over its
// decoded JSON was refused 401, which the sender retries 7 times and then disables the endpoint, stopping every later
// webhook. With this, it is recognised as authentic and set aside like any other oversized delivery.
import { Writable } from "node:stream";
import { pipeline } from "node:stream/promises";
import { createGunzip, createInflate, type Gunzip, type Inflate } from "node:zlib";
import type { SignatureDigest } from "./signature.ts";

export type DecodedDigestResult = { ok: true; bytes: number } | { ok: false; reason: "too_large" | "invalid" };

class DecodedTooLarge extends Error {}

export interface DecodedDigest {
  /** Feeds bytes as sent; false when the decoder wants a pause until `drain` (call `onDrain`). */
  write(chunk: Buffer): boolean;
  onDrain(wake: () => void): void;
  /** After the last chunk: what the decoding came to; the digest has then seen every decoded byte. */
  end(): Promise<DecodedDigestResult>;
  /** Stops decoding (the body was not read to its end). */
  abandon(): void;
}

/**
 * `digest` is fed the decoded bytes, at most `maxBytes` of them: a body that decodes to more stops with "too_large"
 * (a small body that inflates a thousandfold costs its decoding up to that size, never memory), one that is not valid
 * in its encoding with "invalid".
 */
export function decodedDigest(encoding: "gzip" | "deflate", digest: SignatureDigest, maxBytes: number): DecodedDigest {
  const decoder: Gunzip | Inflate = encoding === "gzip" ? createGunzip() : createInflate();
  let bytes = 0;
  let settled = false;
  const sink = new Writable({
    write(chunk: Buffer, _encoding, callback) {
      bytes += chunk.length;
      if (bytes > maxBytes) return callback(new DecodedTooLarge());
      digest.update(chunk);
      callback();
    },
  });
  const done: Promise<DecodedDigestResult> = pipeline(decoder, sink).then(
    () => ({ ok: true, bytes }),
    (error: unknown) => ({ ok: false, reason: error instanceof DecodedTooLarge ? "too_large" : "invalid" }),
  );
  void done.then(() => {
    settled = true;
  });
  return {
    write: (chunk) => (settled || decoder.destroyed ? true : decoder.write(chunk)),
    onDrain: (wake) => {
      if (settled || decoder.destroyed) wake();
      else {
        // A decoder that stops (too large, invalid) never drains: its close wakes the reader too.
        const once = () => {
          decoder.off("drain", once);
          decoder.off("close", once);
          wake();
        };
        decoder.on("drain", once);
        decoder.on("close", once);
      }
    },
    end: () => {
      if (!settled && !decoder.destroyed) decoder.end();
      return done;
    },
    abandon: () => {
      if (!decoder.destroyed) decoder.destroy();
    },
  };
}

/** A body held in memory (at most `max_body_bytes` as sent) checked over its decoded bytes, up to `maxBytes`. */
export async function digestDecoded(
  raw: Buffer,
  encoding: "gzip" | "deflate",
  digest: SignatureDigest,
  maxBytes: number,
): Promise<DecodedDigestResult> {
  const decoding = decodedDigest(encoding, digest, maxBytes);
  decoding.write(raw);
  return decoding.end();
}
