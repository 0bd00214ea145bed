// A secret of the wrong type is named by its type, never its value (review18). An API key of digits left unquoted is a
// YAML number: the problem read `booking.api_key: expected string, found number 12345678901234`, and the reloader logs
// every problem at error level, where nothing redacts it (only values read from ${...} references are hidden). A list
// of secrets written as one string showed its start the same way.
import { describe, expect, it } from "vitest";
import { ConfigError, parseConfig } from "../../src/config/load.ts";
import { SecretRegistry } from "../../src/log.ts";

function problems(text: string): string[] {
  try {
    parseConfig(text, { source: "f.yaml", env: {}, secrets: new SecretRegistry() });
  } catch (e) {
    if (e instanceof ConfigError) return e.problems;
    throw e;
  }
  throw new Error("expected problems");
}

describe("a secret of the wrong type", () => {
  it("is reported by its type, with how to write it, never by its value", () => {
    const text = `booking: { base_url: https://api.booking.example, api_key: 12345678901234 }
webhooks: { signing_secrets: [98765432109876] }
admin: { bearer_token: 55555555555555 }
google:
  auth: { type: oauth }
  oauth: { client_id: c, client_secret: 44444444444444 }
  push: { public_url: https://sync.example/webhooks/google, token: 33333333333333 }
connect: { public_url: https://sync.example, secret: 77777777777777, clinic_name: C }
store: { encryption_key: 66666666666666 }
notify:
  targets:
    - { type: email, smtp: { host: h, auth: { user: u, pass: 22222222222222 } }, from: a@x.example, to: [b@x.example] }
therapists: [{ therapist_id: a, calendar_id: a@x, auth: { type: oauth, refresh_token: 11111111111111 } }]
`;
    const found = problems(text);
    const all = found.join("\n");
    for (const digits of ["1234567890", "9876543210", "5555555555", "4444444444", "3333333333", "7777777777"]) {
      expect(all).not.toContain(digits);
    }
    for (const digits of ["6666666666", "2222222222", "1111111111"]) expect(all).not.toContain(digits);
    expect(found).toContain(
      "booking.api_key: expected a string, found a number; quote it or use a ${...} reference (line 1)",
    );
    expect(found).toContain(
      "webhooks.signing_secrets[0]: expected a string, found a number; quote it or use a ${...} reference (line 2)",
    );
    for (const path of [
      "admin.bearer_token",
      "google.oauth.client_secret",
      "google.push.token",
      "connect.secret",
      "store.encryption_key",
      "notify.targets[0].smtp.auth.pass",
      "therapists[0].auth.refresh_token",
    ]) {
      expect(found).toContainEqual(
        expect.stringMatching(new RegExp(`^${path.replace(/[.[\]]/g, "\\$&")}: expected a string, found a number;`)),
      );
    }
  });

  it("a list of secrets written as one value is named by its type too", () => {
    const text = `booking: { base_url: https://api.booking.example, api_key: k }
webhooks: { signing_secrets: whsec_plain_secret_value }
google: { auth: { type: service_account, key_file: /k } }
store: { previous_encryption_keys: old-store-key-0123456789abcdef0123456789 }
therapists: [{ therapist_id: a, calendar_id: a@x }]
`;
    const found = problems(text);
    expect(found.join("\n")).not.toContain("whsec_plain");
    expect(found.join("\n")).not.toContain("old-store-key");
    expect(found).toEqual([
      "webhooks.signing_secrets: expected a list, found a string; write each secret as a list item: - ${NAME} (line 2)",
      "store.previous_encryption_keys: expected a list, found a string; write each secret as a list item: - ${NAME} (line 4)",
    ]);
  });

  it("other settings still show the value found, and a missing secret is required", () => {
    expect(
      problems(`booking: { base_url: https://api.booking.example, api_key: k, requests_per_minute: lots }
webhooks: { signing_secrets: [s] }
google: { auth: { type: service_account, key_file: /k } }
therapists: [{ therapist_id: a, calendar_id: a@x }]
`),
    ).toEqual(['booking.requests_per_minute: expected number, found "lots" (line 1)']);
    expect(
      problems(`booking: { base_url: https://api.booking.example }
webhooks: { signing_secrets: [s] }
google: { auth: { type: service_account, key_file: /k } }
therapists: [{ therapist_id: a, calendar_id: a@x }]
`),
    ).toEqual(["booking.api_key: required (line 1)"]);
  });
});
