// Owns how values become text in the store: byte for byte what keyv's own serializer (@keyv/serialize) writes, so rows
// written before and after read the same, but through JSON.stringify where that gives the same text. keyv's
// serializer walks the value in JavaScript (a string concatenation per property, to escape strings that start with a
// colon and to mark Buffers); the webhook inbox writes two rows per delivery and this walk was a tenth of the CPU
// a delivery cost.
import { defaultSerialize } from "@keyv/serialize";

/**
 * Text of which JSON.stringify and keyv's serializer may differ: a string that starts with a colon (keyv escapes it
 * as "::..."; it opens right after `[`, `{`, `,` or `:`, never after a backslash, as an escaped quote would be) or a
 * Buffer (keyv writes ":base64:..."; JSON.stringify its toJSON object). A match may be a false alarm (a key that starts
 * with a colon, an object that looks like a Buffer): such a value takes keyv's own path, which is always right.
 */
const KEYV_SPECIFIC = /[[{,:]":|\{"type":"Buffer","data":\[/;

/**
 * Longest text taken by the fast path. It bounds the nesting depth (at most half the length), far below what keyv's
 * recursive serializer and its reviving parser handle; a longer value takes keyv's own path, which refuses a value
 * nested too deeply as it always did (the store reports it as unstorable).
 */
const FAST_MAX_LENGTH = 4096;

/**
 * keyv's serializer, faster. Differs from it only for values no caller stores: functions and holes inside arrays
 * (JSON.stringify writes null where keyv leaves the element out).
 */
export function serializeForKeyv(data: unknown): string {
  if (data !== null && typeof data === "object" && !Buffer.isBuffer(data)) {
    const text = JSON.stringify(data);
    if (typeof text === "string" && text.length <= FAST_MAX_LENGTH && !KEYV_SPECIFIC.test(text)) return text;
  }
  return defaultSerialize(data);
}
