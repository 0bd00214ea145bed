// Invitation links as pure functions (signature, expiry, shape, durations) and the `connect` configuration section.
import { describe, expect, it } from "vitest";
import { parseConfig } from "../../src/config/load.ts";
import { callbackUrl, createInvite, inviteUrl, parseTtl, verifyInvite } from "../../src/connect/invite.ts";
import { SecretRegistry } from "../../src/log.ts";

const SECRET = "s3cret-s3cret-s3cret-s3cret-s3cret-0123";
const NOW = Date.UTC(2031, 4, 6, 12);

describe("invitation links", () => {
  it("verify with the secret until they expire, and carry therapist, expiry and nonce", () => {
    const { token, invite } = createInvite("th_ben", { secret: SECRET, ttlMs: 3_600_000, now: NOW });
    expect(invite).toMatchObject({ therapistId: "th_ben", expiresAt: NOW + 3_600_000 });
    expect(invite.nonce).toMatch(/^[\w-]{22}$/);
    expect(verifyInvite(token, SECRET, NOW + 3_599_999)).toEqual({ ok: true, invite });
    expect(verifyInvite(token, SECRET, NOW + 3_600_000)).toEqual({ ok: false, problem: "expired", invite });
    expect(createInvite("th_ben", { secret: SECRET, now: NOW }).invite.nonce).not.toBe(invite.nonce);
  });

  it("refuse another secret, any changed character, and what is not a token", () => {
    const { token } = createInvite("th_ben", { secret: SECRET, now: NOW });
    expect(verifyInvite(token, `${SECRET}x`, NOW)).toEqual({ ok: false, problem: "signature" });
    const [payload, signature] = token.split(".") as [string, string];
    // Another therapist with the old signature.
    const forged = Buffer.from(JSON.stringify({ v: 1, t: "th_anna", e: NOW + 1e9, n: "x" })).toString("base64url");
    expect(verifyInvite(`${forged}.${signature}`, SECRET, NOW)).toEqual({ ok: false, problem: "signature" });
    // Every other last character, those that decode to the same bytes included (its 2 low bits are unused): a test
    // that flipped one character at random passed or failed with the random nonce.
    const alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
    for (const last of alphabet.replace(signature.at(-1)!, "")) {
      const flipped = `${payload}.${signature.slice(0, -1)}${last}`;
      expect(verifyInvite(flipped, SECRET, NOW), flipped).toEqual({ ok: false, problem: "signature" });
    }
    for (const [i, c] of [...signature].entries()) {
      const other = c === "A" ? "B" : "A";
      const changed = `${payload}.${signature.slice(0, i)}${other}${signature.slice(i + 1)}`;
      expect(verifyInvite(changed, SECRET, NOW).ok, changed).toBe(false);
    }
    for (const junk of ["", "abc", "a.b.c", `${payload}.`, `${payload}.${signature}.x`, "x".repeat(700), "a b.c"]) {
      expect(verifyInvite(junk, SECRET, NOW)).toMatchObject({ ok: false });
    }
  });

  it("builds the link and the callback on the public address, and reads durations", () => {
    expect(inviteUrl("https://sync.clinic.example/", "abc.def")).toBe(
      "https://sync.clinic.example/connect?invite=abc.def",
    );
    expect(callbackUrl("https://clinic.example/calbridge")).toBe("https://clinic.example/calbridge/connect/callback");
    expect([parseTtl("7d"), parseTtl("12h"), parseTtl("90m")]).toEqual([604_800_000, 43_200_000, 5_400_000]);
    expect([parseTtl("0d"), parseTtl("7"), parseTtl("-1d"), parseTtl("1w")]).toEqual([
      undefined,
      undefined,
      undefined,
      undefined,
    ]);
  });
});

describe("connect configuration", () => {
  const base = (connect: string, oauth = true) => `
booking: { base_url: http://127.0.0.1:9999, api_key: sk_test_0123456789 }
webhooks: { signing_secrets: [whsec_abcdefghij] }
google:
  auth: { type: oauth }
${oauth ? "  oauth: { client_id: 1-abc.apps.googleusercontent.com, client_secret: gsecret_123456 }" : ""}
connect: ${connect}
therapists: [{ therapist_id: th_ben, calendar_id: primary }]
`;
  const problems = (text: string) => {
    try {
      parseConfig(text, { env: {}, secrets: new SecretRegistry() });
      return [];
    } catch (err) {
      return (err as { problems: string[] }).problems;
    }
  };

  it("accepts https (and http on loopback) with a long secret and a clinic name", () => {
    expect(
      problems(base(`{ public_url: https://sync.clinic.example, secret: ${SECRET}, clinic_name: Praxis }`)),
    ).toEqual([]);
    expect(problems(base(`{ public_url: "http://127.0.0.1:8080", secret: ${SECRET}, clinic_name: Praxis }`))).toEqual(
      [],
    );
  });

  it("refuses plain http elsewhere, a short secret, a query, and connect without an OAuth client", () => {
    expect(problems(base(`{ public_url: http://sync.clinic.example, secret: ${SECRET}, clinic_name: P }`))).toEqual([
      expect.stringMatching(/^connect\.public_url: must be an https:\/\/ address/),
    ]);
    expect(problems(base(`{ public_url: "https://x.example/?a=1", secret: ${SECRET}, clinic_name: P }`))).toEqual([
      expect.stringMatching(/^connect\.public_url: must be an https:\/\/ address without query/),
    ]);
    const short = problems(base("{ public_url: https://x.example, secret: tooshort-secret, clinic_name: P }"));
    expect(short).toEqual([expect.stringMatching(/^connect\.secret: too short: use at least 32 characters/)]);
    expect(short.join()).not.toContain("tooshort-secret");
    expect(problems(base(`{ public_url: https://x.example, secret: ${SECRET}, clinic_name: P }`, false))).toContain(
      "google.oauth: required by connect: a Web application OAuth client whose redirect URI is https://x.example/connect/callback (line 5)",
    );
  });
});
