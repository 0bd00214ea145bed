// Settings shared between therapists with a YAML anchor and a merge key (`<<: *defaults`, as in docker compose files
// and most YAML examples) were refused as `unknown key "<<" (a typo?)`: merge keys are read now.
import { expect, it } from "vitest";
import { ConfigError, parseConfig } from "../../src/config/load.ts";
import { SecretRegistry } from "../../src/log.ts";

const text = (extra = "") => `
booking:
  base_url: http://127.0.0.1:9999
  api_key: sk_test_0123456789
webhooks:
  signing_secrets: ["whsec_abcdefghij"]
google:
  auth: { type: service_account, key_file: /tmp/sa.json }
therapists:
  - &anna
    therapist_id: th_anna
    calendar_id: anna@clinic.example
    timezone: Europe/Berlin
    writeback: { cancel: false }${extra}
  - <<: *anna
    therapist_id: th_ben
    calendar_id: ben@clinic.example
`;

function problems(t: string): string[] {
  try {
    parseConfig(t, { env: {}, secrets: new SecretRegistry() });
    return [];
  } catch (err) {
    if (!(err instanceof ConfigError)) throw err;
    return err.problems;
  }
}

it("a therapist entry with a merge key (<<: *anchor) takes the anchor's values, its own keys winning", () => {
  const cfg = parseConfig(text(), { env: {}, secrets: new SecretRegistry() });
  expect(cfg.therapists[1]).toMatchObject({
    therapist_id: "th_ben",
    calendar_id: "ben@clinic.example",
    timezone: "Europe/Berlin",
    writeback: { cancel: false },
  });
  expect(cfg.therapists[0]).toMatchObject({ therapist_id: "th_anna", calendar_id: "anna@clinic.example" });
});

it("a problem in merged values is named at each entry: the anchor's line, the merging entry's line", () => {
  expect(problems(text("\n    timezone_x: UTC"))).toEqual([
    'therapists[0]: unknown key "timezone_x" (a typo?) (line 15)',
    'therapists[1]: unknown key "timezone_x" (a typo?) (line 16)',
  ]);
});
