import { readFileSync } from "node:fs";
import { describe, expect, it } from "vitest";
import { parseDocument } from "yaml";
import { configJsonSchema, schemaKeyPaths } from "../../src/config/json-schema.ts";
import { ConfigError, loadConfig, parseConfig } from "../../src/config/load.ts";
import { SecretRegistry } from "../../src/log.ts";

const env = {
  BOOKING_API_KEY: "sk_test_0123456789",
  BOOKING_WEBHOOK_SECRET: "whsec_abcdefghij",
  GOOGLE_OAUTH_CLIENT_SECRET: "gsecret_123456",
  GOOGLE_CHANNEL_TOKEN: "chan_token_123456",
  BEN_REFRESH_TOKEN: "1//refresh-ben-123456",
};

const minimal = `
booking:
  base_url: http://127.0.0.1:9999
  api_key: \${BOOKING_API_KEY}
webhooks:
  signing_secrets: ["\${BOOKING_WEBHOOK_SECRET}"]
google:
  auth: { type: service_account, key_file: /tmp/sa.json }
therapists:
  - therapist_id: th_anna
    calendar_id: anna@clinic.example
`;

function problems(text: string, e: NodeJS.ProcessEnv = env): string[] {
  try {
    parseConfig(text, { env: e, secrets: new SecretRegistry() });
  } catch (err) {
    if (err instanceof ConfigError) return err.problems;
    throw err;
  }
  return [];
}

describe("configuration", () => {
  it("loads the documented example with every reference resolved", () => {
    const registry = new SecretRegistry();
    const cfg = loadConfig("config/example.yaml", { env, secrets: registry });
    expect(cfg.booking.api_key).toBe(env.BOOKING_API_KEY);
    expect(cfg.therapists[1]?.auth).toEqual({ type: "oauth", refresh_token: env.BEN_REFRESH_TOKEN });
    expect(registry.scrub(`key ${env.BOOKING_API_KEY} secret ${env.BOOKING_WEBHOOK_SECRET}`)).toBe(
      "key [REDACTED] secret [REDACTED]",
    );
  });

  it("fills in defaults", () => {
    const cfg = parseConfig(minimal, { env, secrets: new SecretRegistry() });
    expect(cfg.booking.requests_per_minute).toBe(60);
    expect(cfg.webhooks.listen).toBe("0.0.0.0:8080");
    expect(cfg.webhooks.tolerance_seconds).toBe(300);
    expect(cfg.sync.window).toEqual({ past_days: 7, future_days: 90 });
    expect(cfg.sync.writeback.reason).toBe("Cancelled in the therapist's calendar");
    expect(cfg.sync.max_delete_ratio).toBe(0.2);
    expect(cfg.event.colors).toEqual({ completed: "2", no_show: "11" });
    expect(cfg.store.url).toBe("sqlite://./data/calbridge.sqlite");
    expect(cfg.therapists[0]?.timezone).toBe("UTC");
  });

  it("names a missing environment variable and reads ${file:} references", () => {
    expect(problems(minimal, { ...env, BOOKING_API_KEY: undefined })).toEqual([
      "booking.api_key: environment variable BOOKING_API_KEY is not set",
    ]);
    const cfg = parseConfig(minimal.replace("${BOOKING_API_KEY}", "${file:/run/secrets/key}"), {
      env,
      secrets: new SecretRegistry(),
      readFile: (p) => (p === "/run/secrets/key" ? "from-file-key\n" : ""),
    });
    expect(cfg.booking.api_key).toBe("from-file-key");
    expect(problems(minimal.replace("${BOOKING_API_KEY}", "${file:/nope/key}"), env).join("\n")).toMatch(
      /^booking\.api_key: cannot read \/nope\/key \(ENOENT\)$/,
    );
  });

  it("reports one line per problem with the YAML path, and catches every kind of mistake", () => {
    const bad = `
booking:
  base_url: not a url
  api_key: \${BOOKING_API_KEY}
  requets_per_minute: 60
webhooks:
  signing_secrets: []
google:
  auth: { type: service_account, key_file: /tmp/sa.json }
sync:
  reconcile_cron: "every 5 minutes"
  window: { past_days: -1 }
  cancelled_events: archive
store:
  url: mongodb://x
therapists:
  - therapist_id: th_anna
    calendar_id: a@x
  - therapist_id: th_ben
    calendar_id: b@x
    timezone: Mars/Olympus
  - therapist_id: th_anna
`;
    const p = problems(bad);
    expect(p).toEqual(
      expect.arrayContaining([
        expect.stringMatching(/^booking\.base_url: expected an http\(s\) URL/),
        expect.stringMatching(/^booking: unknown key "requets_per_minute" \(a typo\?\) \(line 5\)$/),
        expect.stringMatching(/^webhooks\.signing_secrets: at least one signing secret is required/),
        expect.stringMatching(/^sync\.reconcile_cron: not a valid cron expression/),
        expect.stringMatching(/^sync\.window\.past_days: /),
        expect.stringMatching(/^sync\.cancelled_events: expected one of "delete", "keep"/),
        expect.stringMatching(/^store\.url: expected sqlite:\/\/PATH/),
        expect.stringMatching(/^therapists\[1\]\.timezone: expected an IANA time zone/),
        expect.stringMatching(/^therapists\[2\]\.calendar_id: required/),
      ]),
    );
    // Duplicates are found by the cross-field check, which runs once the shape is right.
    const dup = minimal + "  - therapist_id: th_anna\n    calendar_id: other@x\n";
    expect(problems(dup)).toEqual([
      'therapists[1].therapist_id: duplicate therapist_id "th_anna" (first at therapists[0]) (line 12)',
    ]);
  });

  it("says what was found when a value has the wrong type", () => {
    const text = minimal.replace(
      "base_url: http://127.0.0.1:9999",
      "base_url: http://127.0.0.1:9999\n  requests_per_minute: lots",
    );
    expect(problems(text)).toEqual(['booking.requests_per_minute: expected number, found "lots" (line 4)']);
  });

  it("requires the OAuth client when a therapist uses OAuth", () => {
    const text = minimal + "    auth: { type: oauth, refresh_token: abcdefghij }\n";
    expect(problems(text)).toEqual([expect.stringMatching(/^google\.oauth: required because therapists\[0\]/)]);
  });

  it("reports YAML syntax errors with a line number", () => {
    expect(problems("booking:\n  base_url: [unclosed\n")[0]).toMatch(/^line \d+: /);
  });

  it("reports a missing file clearly", () => {
    expect(() => loadConfig("/nonexistent/calbridge.yaml")).toThrow(/file not found/);
  });

  it("exports a JSON Schema and the example documents every key of it, and only those", () => {
    const schema = configJsonSchema();
    expect(schema.type).toBe("object");
    const fromSchema = new Set(schemaKeyPaths(schema));
    const doc = parseDocument(readFileSync("config/example.yaml", "utf8")).toJS();
    const fromExample = new Set<string>();
    const walk = (v: unknown, prefix: string) => {
      if (Array.isArray(v)) for (const item of v) walk(item, `${prefix}[]`);
      else if (v && typeof v === "object")
        for (const [k, child] of Object.entries(v)) {
          const path = prefix ? `${prefix}.${k}` : k;
          fromExample.add(path);
          walk(child, path);
        }
    };
    walk(doc, "");
    expect([...fromExample].filter((k) => !fromSchema.has(k))).toEqual([]);
    // A therapist's writeback overrides take the keys of sync.writeback, documented there.
    const undocumented = [...fromSchema].filter(
      (k) => !fromExample.has(k) && !fromExample.has(k.replace("therapists[].writeback", "sync.writeback")),
    );
    expect(undocumented).toEqual([]);
  });
});
