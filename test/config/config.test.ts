import { mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { describe, expect, it } from "vitest";
import { parseDocument } from "yaml";
import { configJsonSchema, schemaKeyPaths } from "../../src/config/json-schema.ts";
import { ConfigError, loadConfig, parseConfig } from "../../src/config/load.ts";
import { exampleWithOptionalKeys } from "../../src/config/reference.ts";
import { SecretRegistry } from "../../src/log.ts";
import { runCli } from "../cli/support.ts";

const env = {
  BOOKING_API_KEY: "sk_test_0123456789",
  BOOKING_WEBHOOK_SECRET: "whsec_abcdefghij",
  GOOGLE_OAUTH_CLIENT_SECRET: "gsecret_123456",
  GOOGLE_CHANNEL_TOKEN: "chan_token_123456",
  BEN_REFRESH_TOKEN: "1//refresh-ben-123456",
  CALBRIDGE_ADMIN_TOKEN: "admin-token-123456",
  NOTIFY_WEBHOOK_URL: "https://hooks.slack.com/services/T0/B0/example-token",
  SMTP_PASSWORD: "smtp-password-123456",
  CALBRIDGE_CONNECT_SECRET: "connect-secret-0123456789abcdefghijklmnop",
  CALBRIDGE_STORE_KEY: "store-key-0123456789abcdef0123456789",
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

  it("copied as it is, the example sets no optional key that changes behaviour, and loads without their variables", () => {
    const { CALBRIDGE_ADMIN_TOKEN: _admin, GOOGLE_CHANNEL_TOKEN: _channel, ...rest } = env;
    const cfg = loadConfig("config/example.yaml", { env: rest, secrets: new SecretRegistry() });
    expect(cfg.admin.bearer_token).toBeUndefined();
    expect(cfg.google.push?.token).toBeUndefined();
    expect(cfg.event.reminders).toBeUndefined();
    // Set, the commented-out examples are valid.
    const all = parseConfig(exampleWithOptionalKeys(readFileSync("config/example.yaml", "utf8")), {
      env,
      secrets: new SecretRegistry(),
    });
    expect(all.google.push?.token).toBe(env.GOOGLE_CHANNEL_TOKEN);
    expect(all.event.reminders).toEqual([{ method: "popup", minutes: 30 }]);
  });

  it("fills in defaults", () => {
    const cfg = parseConfig(minimal, { env, secrets: new SecretRegistry() });
    expect(cfg.booking.requests_per_minute).toBe(60);
    expect(cfg.webhooks.listen).toBe("0.0.0.0:8080");
    expect(cfg.webhooks.tolerance_seconds).toBe(300);
    expect(cfg.webhooks.max_body_bytes).toBe(65_536);
    expect(cfg.webhooks.max_connections).toBe(512);
    expect(cfg.webhooks.max_buffered_bytes).toBe(32 * 1024 * 1024);
    expect(cfg.admin).toEqual({ listen: "127.0.0.1:9090" });
    expect(cfg.store.min_free_mb).toBe(64);
    expect(cfg.sync.window).toEqual({ past_days: 7, future_days: 90 });
    expect(cfg.sync.writeback.reason).toBe("Cancelled in the therapist's calendar");
    expect(cfg.sync.max_delete_ratio).toBe(0.2);
    expect(cfg.event.colors).toEqual({ completed: "2", no_show: "11" });
    expect(cfg.store.url).toBe("sqlite://./data/calbridge.sqlite");
    expect(cfg.therapists[0]?.timezone).toBe("UTC");
  });

  it("takes a therapist's time zone only as an IANA name: UTC offsets refused, names in another case spelled right", () => {
    // Google takes an event's timeZone only as an IANA name (400 "Invalid time zone definition" otherwise); Node's
    // Intl also takes UTC offsets, which were let through and written into every event.
    const zone = (tz: string) => `${minimal}    timezone: "${tz}"\n`;
    expect(problems(zone("+01:00"))).toEqual([
      "therapists[0].timezone: expected an IANA time zone such as Europe/Berlin, not a UTC offset (+01:00): Google Calendar takes only zone names (a fixed +01:00 is Etc/GMT-1, the sign inverted) (line 12)",
    ]);
    for (const tz of ["-05:00", "+0100", "+05:30", "-03", "\u221205:00"]) {
      expect(problems(zone(tz)), tz).toEqual([
        expect.stringMatching(
          /^therapists\[0\]\.timezone: expected an IANA time zone such as Europe\/Berlin, not a UTC offset/,
        ),
      ]);
    }
    const read = (tz: string) => parseConfig(zone(tz), { env, secrets: new SecretRegistry() }).therapists[0]?.timezone;
    expect(read("europe/berlin")).toBe("Europe/Berlin");
    expect(read("AMERICA/NEW_YORK")).toBe("America/New_York");
    expect(read("utc")).toBe("UTC");
    // Names written in their own case are kept as written, links included (not replaced by their target).
    expect(read("Europe/Berlin")).toBe("Europe/Berlin");
    expect(read("Asia/Kolkata")).toBe("Asia/Kolkata");
    expect(read("Etc/GMT-1")).toBe("Etc/GMT-1");
  });

  it("names a missing environment variable and reads ${file:} references", () => {
    expect(problems(minimal, { ...env, BOOKING_API_KEY: undefined })).toEqual([
      "booking.api_key: environment variable BOOKING_API_KEY is not set (line 4)", // with its line, as every problem
    ]);
    const cfg = parseConfig(minimal.replace("${BOOKING_API_KEY}", "${file:/run/secrets/key}"), {
      env,
      secrets: new SecretRegistry(),
      readFile: (p) => (p === "/run/secrets/key" ? "from-file-key\n" : ""),
    });
    expect(cfg.booking.api_key).toBe("from-file-key");
    expect(problems(minimal.replace("${BOOKING_API_KEY}", "${file:/nope/key}"), env).join("\n")).toMatch(
      /^booking\.api_key: cannot read \/nope\/key \(ENOENT\) \(line 4\)$/,
    );
  });

  it("refuses a ${ never closed, and a YAML tag it does not read, instead of using the text as the secret", () => {
    // A typo of ${BOOKING_API_KEY} was sent as the API key; in signing_secrets, every webhook failed its check.
    expect(problems(minimal.replace("${BOOKING_API_KEY}", "${BOOKING_API_KEY"))).toEqual([
      'booking.api_key: a "${" reference is never closed (a missing "}"?; write $${ for a literal ${) (line 4)',
    ]);
    expect(problems(minimal.replace("${BOOKING_API_KEY}", "x-${BOOKING_API_KEY}-${OOPS"))).toHaveLength(1);
    expect(problems(minimal.replace("${BOOKING_API_KEY}", () => "sk_$${literal}"))).toEqual([]);
    // Home Assistant's `!secret name` was read as the plain string "name", and that used as the key.
    expect(problems(minimal.replace("${BOOKING_API_KEY}", "!secret booking_key"))).toEqual([
      "line 4, column 12: Unresolved tag: !secret (tags are not read here; a secret is ${NAME} or ${file:/path})",
    ]);
  });

  it("refuses a colour id Google does not have, and what is almost a placeholder, instead of failing later", () => {
    const withEvent = (yaml: string) => problems(`${minimal}event:\n${yaml}`);
    // Any string loaded, then every completed event's write failed: 400 "Invalid color ID".
    expect(withEvent('  colors: { completed: "green", no_show: 12 }\n')).toEqual([
      expect.stringMatching(/^event\.colors\.completed: expected one of Google's event colour ids, "1" to "11"/),
      expect.stringMatching(/^event\.colors\.no_show: expected one of Google's event colour ids/),
    ]);
    expect(withEvent("  colors: { completed: 5 }\n")).toEqual([]);
    // Printed as written in every event's title.
    expect(
      withEvent('  title: "{Service_Name}: { customer_name } {customer-name} {{notes}} {service_name}"\n'),
    ).toEqual([
      expect.stringMatching(
        /^event\.title: unknown placeholders \{Service_Name\}, \{ customer_name \}, \{customer-name\}, \{\{notes\}\} \(/,
      ),
    ]);
  });

  it("refuses a webhook path no delivery could reach: a query, /healthz, Google's route, the connect pages", () => {
    const at = (path: string) => problems(minimal.replace("webhooks:\n", `webhooks:\n  path: "${path}"\n`));
    expect(at("/hooks/booking")).toEqual([]);
    expect(at("/webhooks/booking?token=abc")).toEqual([
      expect.stringMatching(/^webhooks\.path: a path only: a query or fragment .* \(line \d+\)$/),
    ]);
    expect(at("/healthz")).toEqual([expect.stringMatching(/^webhooks\.path: \/healthz is the listener's own/)]);
    expect(at("/webhooks/google/")).toEqual([expect.stringMatching(/Google's push notifications/)]);
    for (const path of ["/connect", "/connect/callback"]) {
      expect(at(path)).toEqual([expect.stringMatching(/the connect pages'/)]);
    }
    expect(at("/connector")).toEqual([]);
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

  it("refuses a YAML anchor used inside itself with one line, not a stack overflow", () => {
    for (const [text, where] of [
      ["booking: &b {x: *b}\n", "booking.x"],
      ["therapists: &t\n  - *t\n", "therapists[0]"],
    ] as const) {
      let err: unknown;
      try {
        parseConfig(text, { env: {}, secrets: new SecretRegistry() });
      } catch (e) {
        err = e;
      }
      expect(err).toBeInstanceOf(ConfigError);
      expect((err as ConfigError).problems).toEqual([
        `${where}: nested deeper than 32 levels (a YAML anchor used inside itself?)`,
      ]);
    }
  });

  it("says what was found when a value has the wrong type", () => {
    const text = minimal.replace(
      "base_url: http://127.0.0.1:9999",
      "base_url: http://127.0.0.1:9999\n  requests_per_minute: lots",
    );
    expect(problems(text)).toEqual(['booking.requests_per_minute: expected number, found "lots" (line 4)']);
  });

  it("names the one problem of a listen address without a port, and a missing credential type as required", () => {
    expect(problems(`${minimal}admin: { listen: localhost }\n`)).toEqual([
      "admin.listen: expected host:port, e.g. 0.0.0.0:8080 (line 12)",
    ]);
    expect(problems(`${minimal}admin: { listen: "127.0.0.1:70000" }\n`)).toEqual([
      "admin.listen: port out of range (line 12)",
    ]);
    expect(
      problems(minimal.replace("{ type: service_account, key_file: /tmp/sa.json }", "{ key_file: /tmp/sa.json }")),
    ).toEqual(["google.auth.type: required (line 8)"]);
    expect(problems(minimal.replace("type: service_account", "type: service-account"))).toEqual([
      "google.auth.type: unknown type (line 8)",
    ]);
  });

  it("refuses two therapists on one calendar (a reassignment between them would read as a deletion), not two OAuth primaries", () => {
    const two = (second: string) =>
      minimal.replace(
        "    calendar_id: anna@clinic.example\n",
        `    calendar_id: anna@clinic.example\n  - therapist_id: th_ben\n${second}`,
      );
    expect(problems(two("    calendar_id: Anna@clinic.example\n"))).toEqual([
      "therapists[1].calendar_id: Anna@clinic.example is already the calendar of th_anna (therapists[0]): each therapist needs a calendar of their own (line 13)",
    ]);
    expect(problems(two("    calendar_id: primary\n    impersonate: anna@clinic.example\n"))[0]).toMatch(
      /^therapists\[1\]\.calendar_id: anna@clinic\.example is already the calendar of th_anna/,
    );
    expect(problems(two("    calendar_id: ben@clinic.example\n"))).toEqual([]);
    // impersonate means nothing to OAuth (its `primary` is the consenting account's): no calendar named, none refused.
    const oauth = two("    calendar_id: primary\n    impersonate: anna@clinic.example\n    auth: { type: oauth }\n");
    expect(problems(oauth).filter((p) => p.includes("already the calendar"))).toEqual([]);
  });

  it("rejects a secret with whitespace at either end, naming its YAML path and never its value", () => {
    // Every secret of the schema, each from a reference the way admins write them.
    const text = `
booking:
  base_url: https://api.booking.example
  api_key: \${BOOKING_API_KEY}
webhooks:
  signing_secrets: ["\${BOOKING_WEBHOOK_SECRET}", "\${file:/run/secrets/old-webhook}"]
google:
  auth: { type: service_account, key_file: /tmp/sa.json }
  oauth: { client_id: 123-abc.apps.googleusercontent.com, client_secret: "\${file:/run/secrets/client}" }
  push: { public_url: https://sync.clinic.example/webhooks/google, token: "\${GOOGLE_CHANNEL_TOKEN}" }
therapists:
  - therapist_id: th_ben
    calendar_id: primary
    auth: { type: oauth, refresh_token: "\${BEN_REFRESH_TOKEN}" }
`;
    const files: Record<string, string> = {
      "/run/secrets/old-webhook": "whsec_old_0123456789 \n", // a trailing space the loader's newline strip leaves
      "/run/secrets/client": "gsecret_123456\n\n", // `echo` into a file that already ended with a newline
    };
    const dirty = {
      BOOKING_API_KEY: "sk_live_abc123456\n", // a Kubernetes secret made from a file with a newline
      BOOKING_WEBHOOK_SECRET: "whsec_abcdefghij\r\n",
      GOOGLE_CHANNEL_TOKEN: "\tchan_token_123456",
      BEN_REFRESH_TOKEN: "  1//refresh-ben-123456  ",
    };
    let found: string[] = [];
    try {
      parseConfig(text, { env: dirty, readFile: (p) => files[p] ?? "", secrets: new SecretRegistry() });
    } catch (err) {
      if (!(err instanceof ConfigError)) throw err;
      found = err.problems;
      for (const value of [...Object.values(dirty), ...Object.values(files)]) {
        expect(err.message).not.toContain(value.trim());
      }
    }
    const hint = "(from the file or environment variable?); remove it";
    expect(found).toEqual([
      `booking.api_key: has a trailing newline ${hint} (line 4)`,
      `webhooks.signing_secrets[0]: has a trailing newline ${hint} (line 6)`,
      `webhooks.signing_secrets[1]: has trailing spaces ${hint} (line 6)`,
      `google.oauth.client_secret: has a trailing newline ${hint} (line 9)`,
      `google.push.token: has leading whitespace ${hint} (line 10)`,
      `therapists[0].auth.refresh_token: has leading spaces and trailing spaces ${hint} (line 14)`,
    ]);
    // A value typed into the YAML is held to the same rule; one final newline of a secret file is no problem.
    expect(problems(minimal.replace('["${BOOKING_WEBHOOK_SECRET}"]', '["whsec_typed_123456 "]'))).toEqual([
      `webhooks.signing_secrets[0]: has trailing spaces ${hint} (line 6)`,
    ]);
    expect(problems(minimal, { ...env, BOOKING_API_KEY: " \n" })).toEqual([
      "booking.api_key: is only whitespace (from the file or environment variable?); set the secret (line 4)",
    ]);
    const clean = parseConfig(text, {
      env,
      readFile: (p) => (p === "/run/secrets/client" ? "gsecret_123456\n" : "whsec_old_0123456789\n"),
      secrets: new SecretRegistry(),
    });
    expect(clean.google.oauth?.client_secret).toBe("gsecret_123456");
  });

  it("stops the command line with exit code 2 when a secret file has a trailing newline", async () => {
    const dir = mkdtempSync(join(tmpdir(), "calbridge-config-"));
    try {
      const keyFile = join(dir, "api-key");
      writeFileSync(keyFile, "sk_live_from_file_987654\n\n");
      const file = join(dir, "calbridge.yaml");
      writeFileSync(file, minimal.replace("${BOOKING_API_KEY}", `\${file:${keyFile}}`));
      expect(() => loadConfig(file, { env, secrets: new SecretRegistry() })).toThrow(ConfigError);
      const saved = process.env.BOOKING_WEBHOOK_SECRET;
      process.env.BOOKING_WEBHOOK_SECRET = env.BOOKING_WEBHOOK_SECRET;
      try {
        const r = await runCli("doctor", "--config", file);
        expect(r).toEqual({
          code: 2,
          stdout: "",
          stderr:
            `calbridge: invalid configuration ${file}: 1 problem\n` +
            "  booking.api_key: has a trailing newline (from the file or environment variable?); remove it (line 4)\n",
        });
      } finally {
        if (saved === undefined) delete process.env.BOOKING_WEBHOOK_SECRET;
        else process.env.BOOKING_WEBHOOK_SECRET = saved;
      }
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });

  it("caps webhooks.tolerance_seconds at the spec's 300 seconds", () => {
    const withTolerance = (n: number) =>
      minimal.replace('signing_secrets: ["${BOOKING_WEBHOOK_SECRET}"]', `$&\n  tolerance_seconds: ${n}`);
    const message =
      "webhooks.tolerance_seconds: at most 300: the booking service's receivers reject deliveries more than 300 seconds (5 minutes) old, and a larger value widens the replay window (line 7)";
    expect(problems(withTolerance(86400))).toEqual([message]);
    expect(problems(withTolerance(301))).toEqual([message]);
    expect(parseConfig(withTolerance(300), { env, secrets: new SecretRegistry() }).webhooks.tolerance_seconds).toBe(
      300,
    );
    expect(parseConfig(withTolerance(30), { env, secrets: new SecretRegistry() }).webhooks.tolerance_seconds).toBe(30);
  });

  it("requires an https booking.base_url, except on a loopback host", () => {
    const withBase = (url: string) => minimal.replace("base_url: http://127.0.0.1:9999", `base_url: ${url}`);
    const message =
      "booking.base_url: must be an https:// URL: over http:// the API key would travel in clear text (http:// is allowed only for localhost, 127.0.0.1 and [::1]) (line 3)";
    for (const url of [
      "http://api.booking.example",
      "http://10.0.0.5:8080",
      "http://127.0.0.1.nip.io",
      "http://0.0.0.0:9",
    ]) {
      expect(problems(withBase(url)), url).toEqual([message]);
    }
    for (const url of [
      "https://api.booking.example",
      "https://10.0.0.5:8443/",
      "http://127.0.0.1:9999",
      "http://localhost:8080",
      "http://[::1]:8080",
    ]) {
      expect(problems(withBase(url)), url).toEqual([]);
    }
  });

  it("requires https for google.api_root, token_url and auth_url, except on a loopback host", () => {
    const withGoogle = (key: string, url: string) => minimal.replace("google:\n", `google:\n  ${key}: ${url}\n`);
    const carried: Record<string, string> = {
      api_root: "the calendar's access tokens and every event",
      token_url: "refresh tokens, the OAuth client secret and signed assertions",
      auth_url: "the consent page (and the sign-in it leads to)",
    };
    for (const [key, what] of Object.entries(carried)) {
      const message = `google.${key}: must be an https:// URL: over http:// ${what} would travel in clear text (http:// is allowed only for localhost, 127.0.0.1 and [::1]) (line 8)`;
      for (const url of ["http://www.googleapis.com/", "http://10.0.0.5:8080/token", "http://127.0.0.1.nip.io/"]) {
        expect(problems(withGoogle(key, url)), `${key} ${url}`).toEqual([message]);
      }
      for (const url of [
        "https://proxy.clinic.example/",
        "http://127.0.0.1:9/",
        "http://localhost:8080/x",
        "http://[::1]:8/",
      ]) {
        expect(problems(withGoogle(key, url)), `${key} ${url}`).toEqual([]);
      }
    }
  });

  it("defaults the Google quotas to Google's and refuses a concurrency ceiling below its floor", () => {
    const cfg = parseConfig(minimal, { env, secrets: new SecretRegistry() });
    expect(cfg.google.quota).toEqual({ project_per_minute: 10_000, user_per_minute: 600 });
    expect(cfg.sync).toMatchObject({ concurrency: 4, max_concurrency: 64 });
    const text = `${minimal}sync:\n  concurrency: 8\n  max_concurrency: 6\n`;
    expect(problems(text)).toEqual([
      "sync.max_concurrency: 6 is below sync.concurrency (8): the most syncs at once cannot be fewer than the least (line 14)",
    ]);
    expect(problems(minimal.replace("google:\n", "google:\n  quota: { user_per_minute: 0 }\n"))).toEqual([
      expect.stringMatching(/^google\.quota\.user_per_minute: /),
    ]);
  });

  it("requires an https push address, except on a loopback host (an emulator)", () => {
    const withPush = (url: string) => minimal.replace("google:\n", `google:\n  push: { public_url: "${url}" }\n`);
    expect(problems(withPush("http://sync.clinic.example/webhooks/google"))).toEqual([
      "google.push.public_url: must be an https:// URL: over http:// each channel's token would travel in clear text (http:// is allowed only for localhost, 127.0.0.1 and [::1]) (line 8)",
    ]);
    expect(problems(withPush("http://127.0.0.1:8080/webhooks/google"))).toEqual([]);
    expect(problems(withPush("https://sync.clinic.example/webhooks/google"))).toEqual([]);
  });

  it("requires the OAuth client when a therapist uses OAuth", () => {
    const text = minimal + "    auth: { type: oauth, refresh_token: abcdefghij }\n";
    expect(problems(text)).toEqual([expect.stringMatching(/^google\.oauth: required because therapists\[0\]/)]);
  });

  it("reports YAML syntax errors with a line number", () => {
    expect(problems("booking:\n  base_url: [unclosed\n")[0]).toMatch(/^line \d+, column \d+: /);
  });

  it("reports each YAML syntax problem once, where it is, with line and column: no cascade", () => {
    const text = [
      "booking:", //                                         1
      "  base_url: https://api.booking.example", //          2
      "  api_key: [${BOOKING_API_KEY}", //                   3: a bracket never closed
      "webhooks:", //                                        4
      "  path: /webhooks: booking", //                       5: a second mapping on one line
      '  signing_secrets: ["${BOOKING_WEBHOOK_SECRET}"]', // 6
      "therapists:", //                                      7
      '  - therapist_id: "th_anna', //                       8: an unterminated quote...
      "    calendar_id: anna@clinic.example", //             9  ...that swallows the rest of the file
      "  - therapist_id: th_ben", //                         10
      "    calendar_id: ben@clinic.example", //              11
      "",
    ].join("\n");
    expect(problems(text)).toEqual([
      "line 3, column 12: the [ opened here is never closed (a missing ]?)",
      "line 5, column 9: Nested mappings are not allowed in compact mappings",
      'line 8, column 19: the " opened here is never closed (a missing "?)',
    ]);
    // Alone, the quote is one problem where it opens, not several where the file ends.
    expect(problems(minimal.replace("calendar_id: anna@clinic.example", 'calendar_id: "anna@clinic.example'))).toEqual([
      'line 11, column 18: the " opened here is never closed (a missing "?)',
    ]);
    expect(problems('webhooks:\n  signing_secrets: ["${X}]\n  path: /x\n')).toEqual([
      'line 2, column 21: the " opened here is never closed (a missing "?)',
    ]);
  });

  it("refuses an admin listener on the public listener's port, unless the hosts differ", () => {
    const withAdmin = (pub: string, admin: string) =>
      problems(minimal.replace("webhooks:\n", `webhooks:\n  listen: "${pub}"\n`) + `admin:\n  listen: "${admin}"\n`);
    expect(withAdmin("0.0.0.0:8080", "127.0.0.1:8080")).toEqual([
      "admin.listen: must use another port than webhooks.listen (0.0.0.0:8080): the admin routes are never served on the public port (line 14)",
    ]);
    expect(withAdmin("10.0.0.1:8080", "10.0.0.1:8080")).toHaveLength(1);
    // localhost is bound as 127.0.0.1: the start failed with EADDRINUSE instead of this message.
    expect(withAdmin("127.0.0.1:8080", "LocalHost:8080")).toHaveLength(1);
    expect(withAdmin("10.0.0.1:8080", "127.0.0.1:8080")).toEqual([]);
    expect(withAdmin("0.0.0.0:8080", "127.0.0.1:9090")).toEqual([]);
    expect(withAdmin("127.0.0.1:0", "127.0.0.1:0")).toEqual([]);
  });

  it("keeps the admin bearer token out of messages and logs", () => {
    const registry = new SecretRegistry();
    const cfg = parseConfig(exampleWithOptionalKeys(readFileSync("config/example.yaml", "utf8")), {
      env,
      secrets: registry,
    });
    expect(cfg.admin.bearer_token).toBe(env.CALBRIDGE_ADMIN_TOKEN);
    expect(registry.scrub(`token ${env.CALBRIDGE_ADMIN_TOKEN}`)).toBe("token [REDACTED]");
    expect(problems(`${minimal}admin:\n  bearer_token: " padded-token-123"\n`)[0]).toMatch(
      /^admin.bearer_token: has leading spaces/,
    );
  });

  it("reports a missing file clearly", () => {
    expect(() => loadConfig("/nonexistent/calbridge.yaml")).toThrow(/file not found/);
  });

  it("reads notification targets: defaults, secrets registered, and every kind of mistake named", () => {
    const registry = new SecretRegistry();
    const notify = `notify:
  targets:
    - { type: webhook, url: "\${HOOK_URL}" }
    - type: email
      smtp: { host: smtp.clinic.example, auth: { user: calbridge, pass: "\${SMTP_PASS}" } }
      from: calbridge@clinic.example
      to: [ops@clinic.example]
`;
    const hookUrl = "https://hooks.slack.com/services/T0/B0/abcdefghijkl";
    const cfg = parseConfig(minimal + notify, {
      env: { ...env, HOOK_URL: hookUrl, SMTP_PASS: "smtp-pass-123456" },
      secrets: registry,
    });
    expect(cfg.notify).toMatchObject({
      label: "calbridge",
      min_interval_seconds: 60,
      reconcile_failures: 3,
      dead_letters_after_seconds: 300,
      webhook_check_hours: 6,
    });
    expect(cfg.notify.targets[0]).toEqual({ type: "webhook", url: hookUrl, format: "slack" });
    expect(cfg.notify.targets[1]).toMatchObject({ smtp: { port: 587, secure: false }, therapists: false });
    expect(registry.scrub(`posting to ${hookUrl} with smtp-pass-123456`)).toBe("posting to [REDACTED] with [REDACTED]");
    expect(parseConfig(minimal, { env, secrets: new SecretRegistry() }).notify.targets).toEqual([]);
    // Written into the file as it is (not advised), the address is still a secret.
    const literal = new SecretRegistry();
    parseConfig(`${minimal}notify:\n  targets: [{ type: webhook, url: "${hookUrl}" }]\n`, { env, secrets: literal });
    expect(literal.scrub(`to ${hookUrl}`)).toBe("to [REDACTED]");
    // A receiver's error page that echoes the path (Express: "Cannot POST /path") carries the token without the host.
    const token = "Xy7sEcReTtOkEn0123456789";
    const echoing = new SecretRegistry();
    parseConfig(
      `${minimal}notify:\n  targets: [{ type: webhook, url: "https://chat.example/hooks/T0/B0/${token}?x=1" }]\n`,
      {
        env,
        secrets: echoing,
      },
    );
    expect(echoing.scrub(`HTTP 404 Cannot POST /hooks/T0/B0/${token}?x=1`)).not.toContain(token);
    expect(echoing.scrub(`HTTP 404 Cannot POST /hooks/T0/B0/${token}`)).not.toContain(token);
    expect(echoing.scrub(`token ${token}`)).toBe("token [REDACTED]");
    // A path without a token is no secret: lines naming it stay readable.
    const plain = new SecretRegistry();
    parseConfig(`${minimal}notify:\n  targets: [{ type: webhook, url: "https://chat.example/webhooks" }]\n`, {
      env,
      secrets: plain,
    });
    expect(plain.scrub("POST /webhooks/booking 200")).toBe("POST /webhooks/booking 200");

    const bad = `notify:
  targets:
    - { type: webhook, url: "http://hooks.example/x", format: discord }
    - { type: webhook, name: webhook-1, url: "https://hooks.example/y" }
    - { type: email, smtp: { host: "" }, from: nobody, to: [] }
    - { type: pager }
therapists:
  - therapist_id: th_anna
    calendar_id: anna@clinic.example
    email: anna-at-clinic
`;
    const p = problems(minimal.replace(/therapists:[\s\S]*$/, "") + bad);
    expect(p).toEqual(
      expect.arrayContaining([
        expect.stringMatching(
          /^notify\.targets\[0\]\.url: must be an https:\/\/ URL: over http:\/\/ the webhook's token and the messages would travel in clear text/,
        ),
        expect.stringMatching(/^notify\.targets\[0\]\.format: expected one of "slack", "matrix", "teams"/),
        expect.stringMatching(/^notify\.targets\[2\]\.smtp\.host: /),
        expect.stringMatching(/^notify\.targets\[2\]\.from: expected an e-mail address/),
        expect.stringMatching(/^notify\.targets\[2\]\.to: at least one recipient/),
        expect.stringMatching(/^notify\.targets\[3\]\.type: unknown type/),
        expect.stringMatching(/^therapists\[0\]\.email: expected an e-mail address/),
      ]),
    );
    const dup = `notify:
  targets:
    - { type: webhook, url: "https://hooks.example/x" }
    - { type: webhook, name: webhook-1, url: "https://hooks.example/y" }
`;
    expect(problems(minimal + dup)).toEqual([
      'notify.targets[1].name: duplicate target name "webhook-1" (first at notify.targets[0]) (line 15)',
    ]);
    const stray = `notify:\n  targets:\n    - { type: webhook, url: "\${HOOK_URL}" }\n`;
    expect(problems(minimal + stray, { ...env, HOOK_URL: `${hookUrl}\n` }).join("\n")).toMatch(
      /^notify\.targets\[0\]\.url: has a trailing newline/,
    );
  });

  it("exports a JSON Schema and the example documents every key of it, and only those", () => {
    const schema = configJsonSchema();
    expect(schema.type).toBe("object");
    const fromSchema = new Set(schemaKeyPaths(schema));
    const doc = parseDocument(exampleWithOptionalKeys(readFileSync("config/example.yaml", "utf8"))).toJS();
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
