// Unit tests of the pure signature scheme: every verdict, rotation, several v1 entries, and the fix-it hints.
import { createHmac } from "node:crypto";
import { describe, expect, it } from "vitest";
import {
  checkSignatureHeader,
  parseSignatureHeader,
  secretHints,
  sign,
  type VerifyInput,
  verifySignature,
} from "../../src/webhooks/signature.ts";

const SECRET = "whsec_test_0123456789abcdef";
const OTHER = "whsec_other_aaaaaaaaaaaaaaaa";
const NOW_MS = Date.UTC(2026, 10, 22, 9, 0, 0);
const NOW_SEC = NOW_MS / 1000;
const body = Buffer.from(
  JSON.stringify({ id: "evt_1", type: "appointment.created", data: { object: { id: "apt_1" } } }),
);

function verify(header: VerifyInput["header"], overrides: Partial<Parameters<typeof verifySignature>[0]> = {}) {
  return verifySignature({ rawBody: body, header, secrets: [SECRET], toleranceSec: 300, nowMs: NOW_MS, ...overrides });
}

describe("sign", () => {
  it("is the lowercase hex HMAC-SHA256 of `<t>.<raw body>`", () => {
    const expected = createHmac("sha256", SECRET).update(`${NOW_SEC}.${body.toString()}`).digest("hex");
    expect(sign(body, SECRET, NOW_SEC)).toBe(`t=${NOW_SEC},v1=${expected}`);
    expect(sign(body.toString(), SECRET, NOW_SEC)).toBe(sign(body, SECRET, NOW_SEC));
    expect(expected).toMatch(/^[0-9a-f]{64}$/);
  });
});

describe("verifySignature", () => {
  it("accepts a valid signature and returns its timestamp", () => {
    expect(verify(sign(body, SECRET, NOW_SEC))).toEqual({ ok: true, timestamp: NOW_SEC });
  });

  it("rejects a tampered body, with a hint about the raw body and without the expected signature", () => {
    const header = sign(body, SECRET, NOW_SEC);
    const result = verify(header, { rawBody: Buffer.from(body.toString().replace("apt_1", "apt_2")) });
    expect(result).toMatchObject({ ok: false, reason: "mismatch" });
    if (result.ok) throw new Error("unreachable");
    expect(result.message).toMatch(/raw request body/);
    const expected = sign(Buffer.from(body.toString().replace("apt_1", "apt_2")), SECRET, NOW_SEC).split("v1=")[1]!;
    expect(result.message).not.toContain(expected);
    expect(result.message).not.toContain(SECRET);
  });

  it("rejects re-serialized JSON (whitespace changed)", () => {
    const pretty = Buffer.from(JSON.stringify(JSON.parse(body.toString()), null, 2));
    expect(verify(sign(body, SECRET, NOW_SEC), { rawBody: pretty })).toMatchObject({ reason: "mismatch" });
  });

  it("rejects a stale timestamp beyond the tolerance, and accepts one at its edge", () => {
    expect(verify(sign(body, SECRET, NOW_SEC - 300))).toMatchObject({ ok: true });
    const stale = verify(sign(body, SECRET, NOW_SEC - 301));
    expect(stale).toMatchObject({ ok: false, reason: "stale" });
    if (!stale.ok) expect(stale.message).toMatch(/301s ago, tolerance 300s/);
    // The sender signs its whole seconds: at the edge whatever the fraction of this host's second (was: refused
    // from .001 on), before the body is read as after it.
    const midSecond = NOW_MS + 999;
    expect(verify(sign(body, SECRET, NOW_SEC - 300), { nowMs: midSecond })).toMatchObject({ ok: true });
    expect(checkSignatureHeader(sign(body, SECRET, NOW_SEC - 300), 300, midSecond)).toMatchObject({ ok: true });
    expect(verify(sign(body, SECRET, NOW_SEC - 301), { nowMs: midSecond })).toMatchObject({ reason: "stale" });
    expect(verify(sign(body, SECRET, NOW_SEC + 301), { nowMs: midSecond })).toMatchObject({ reason: "future" });
  });

  it("rejects a timestamp from the future beyond the tolerance", () => {
    expect(verify(sign(body, SECRET, NOW_SEC + 300))).toMatchObject({ ok: true });
    const future = verify(sign(body, SECRET, NOW_SEC + 3600));
    expect(future).toMatchObject({ ok: false, reason: "future" });
    if (!future.ok) expect(future.message).toMatch(/3600s in the future/);
  });

  it("reports a forged stale delivery as a mismatch, not as stale", () => {
    expect(verify(sign(body, OTHER, NOW_SEC - 10_000))).toMatchObject({ reason: "mismatch" });
  });

  it("rejects a missing or empty header", () => {
    expect(verify(undefined)).toMatchObject({ ok: false, reason: "missing" });
    expect(verify("  ")).toMatchObject({ ok: false, reason: "missing" });
  });

  it.each([
    "garbage",
    "t=,v1=abc",
    `v1=${"a".repeat(64)}`,
    `t=${NOW_SEC}`,
    `t=${NOW_SEC},v0=${"a".repeat(64)}`,
    `t=abc,v1=${"a".repeat(64)}`,
    `t=${NOW_SEC},t=${NOW_SEC + 1},v1=${"a".repeat(64)}`,
    `t=-5,v1=${"a".repeat(64)}`,
    `t=1e9,v1=${"a".repeat(64)}`,
  ])("rejects a malformed header: %s", (header) => {
    expect(verify(header)).toMatchObject({ ok: false, reason: "malformed" });
  });

  it("accepts any of several secrets (rotation)", () => {
    const secrets = [OTHER, SECRET];
    expect(verify(sign(body, SECRET, NOW_SEC), { secrets })).toMatchObject({ ok: true });
    expect(verify(sign(body, OTHER, NOW_SEC), { secrets })).toMatchObject({ ok: true });
    expect(verify(sign(body, "whsec_third_xxxxxxxxxxxx", NOW_SEC), { secrets })).toMatchObject({ reason: "mismatch" });
  });

  it("accepts a header with several v1 entries when one of them is valid, in any position", () => {
    const good = sign(body, SECRET, NOW_SEC).split(",")[1]!;
    const bad = `v1=${"0".repeat(64)}`;
    expect(verify(`t=${NOW_SEC},${bad},${good}`)).toMatchObject({ ok: true });
    expect(verify(`t=${NOW_SEC}, ${good} , v0=zz, ${bad}`)).toMatchObject({ ok: true });
    expect(verify(`t=${NOW_SEC},${bad},v1=short`)).toMatchObject({ reason: "mismatch" });
  });

  it("does not accept uppercase hex or a signature over another timestamp", () => {
    const [, v1] = sign(body, SECRET, NOW_SEC).split(",v1=");
    expect(verify(`t=${NOW_SEC},v1=${v1!.toUpperCase()}`)).toMatchObject({ reason: "mismatch" });
    expect(verify(`t=${NOW_SEC + 1},v1=${v1}`)).toMatchObject({ reason: "mismatch" });
  });

  it("never verifies with an empty secret, nor without secrets", () => {
    expect(verify(sign(body, "", NOW_SEC), { secrets: [""] })).toMatchObject({ reason: "mismatch" });
    expect(verify(sign(body, SECRET, NOW_SEC), { secrets: [] })).toMatchObject({ reason: "mismatch" });
  });
});

describe("checkSignatureHeader", () => {
  it("reads the header once, and verifySignature judges the body against what it read", () => {
    const header = `t=${NOW_SEC},v1=${"0".repeat(64)},v0=x,v1=${sign(body, SECRET, NOW_SEC).split("v1=")[1]}`;
    const pre = checkSignatureHeader(header, 300, NOW_MS);
    expect(pre).toEqual({ ok: true, timestamp: NOW_SEC, signatures: ["0".repeat(64), expect.any(String)] });
    if (!pre.ok) return;
    expect(verify(pre)).toEqual({ ok: true, timestamp: NOW_SEC });
    expect(verify(pre, { rawBody: Buffer.from(`${body} `) })).toMatchObject({ ok: false, reason: "mismatch" });
    // The tolerance is judged again once the timestamp is authenticated (the body may have taken its time).
    expect(verify(pre, { nowMs: NOW_MS + 301_000 })).toMatchObject({ ok: false, reason: "stale" });
  });

  it("refuses before the body a header that is missing, unreadable, stale or from the future", () => {
    expect(checkSignatureHeader(undefined, 300, NOW_MS)).toMatchObject({ ok: false, reason: "missing" });
    expect(checkSignatureHeader("v1=abc", 300, NOW_MS)).toMatchObject({ ok: false, reason: "malformed" });
    const at = (sec: number) => checkSignatureHeader(`t=${sec},v1=abc`, 300, NOW_MS);
    expect(at(NOW_SEC - 301)).toMatchObject({ ok: false, reason: "stale" });
    expect(at(NOW_SEC + 301)).toMatchObject({ ok: false, reason: "future" });
    expect(at(NOW_SEC - 300)).toEqual({ ok: true, timestamp: NOW_SEC - 300, signatures: ["abc"] });
  });
});

describe("parseSignatureHeader", () => {
  it("reads t and every v1, ignoring other schemes", () => {
    expect(parseSignatureHeader("t=12,v1=ab,v0=cd,v1=ef")).toEqual({ timestamp: 12, signatures: ["ab", "ef"] });
  });
});

describe("secretHints", () => {
  it("flags stray whitespace, empty and absent secrets, never quoting the secret", () => {
    expect(secretHints([SECRET])).toEqual([]);
    const hints = secretHints([SECRET, `${OTHER}\n`, ""]);
    expect(hints).toHaveLength(2);
    expect(hints[0]).toMatch(/#2 has leading or trailing whitespace/);
    expect(hints[1]).toMatch(/#3 is empty/);
    expect(hints.join(" ")).not.toContain(OTHER);
    expect(secretHints([])[0]).toMatch(/No webhook signing secret/);
  });
});
