// The event section of the configuration: privacy presets, reminders (also per therapist) and placeholders, each
// refused with a message that names the key and the way out.
import { describe, expect, it } from "vitest";
import { ConfigError, parseConfig } from "../../src/config/load.ts";
import { SecretRegistry } from "../../src/log.ts";

const env = { BOOKING_API_KEY: "sk_test_0123456789", BOOKING_WEBHOOK_SECRET: "whsec_abcdefghij" };

const base = (event: string, therapist = "") => `
booking:
  base_url: http://127.0.0.1:9999
  api_key: \${BOOKING_API_KEY}
webhooks:
  signing_secrets: ["\${BOOKING_WEBHOOK_SECRET}"]
google:
  auth: { type: service_account, key_file: /tmp/sa.json }
event:
${event}
therapists:
  - therapist_id: th_anna
    calendar_id: anna@clinic.example
${therapist}`;

function parse(text: string) {
  return parseConfig(text, { env, secrets: new SecretRegistry() });
}

function problems(text: string): string[] {
  try {
    parse(text);
  } catch (err) {
    if (err instanceof ConfigError) return err.problems;
    throw err;
  }
  return [];
}

describe("event configuration", () => {
  it("takes a preset, reminders and a therapist's own reminders", () => {
    const cfg = parse(
      base(
        "  preset: initials\n  reminders:\n    - { method: popup, minutes: 30 }\n    - { method: email, minutes: 1440 }",
        "    reminders: none\n",
      ),
    );
    expect(cfg.event.preset).toBe("initials");
    expect(cfg.event.title).toBeUndefined();
    expect(cfg.event.reminders).toEqual([
      { method: "popup", minutes: 30 },
      { method: "email", minutes: 1440 },
    ]);
    expect(cfg.therapists[0]?.reminders).toBe("none");
    expect(parse(base("  reminders: default")).event.reminders).toBe("default");
    expect(parse(base("  include_customer_contact: false")).event.reminders).toBeUndefined();
  });

  it("refuses customer contact details with a preset that shows less of the customer", () => {
    expect(problems(base("  preset: first_name\n  include_customer_contact: true"))).toEqual([
      "event.include_customer_contact: the preset first_name shows less of the customer; customer contact details contradict it (remove one of the two) (line 11)",
    ]);
    expect(problems(base("  preset: full\n  include_customer_contact: true"))).toEqual([]);
    expect(problems(base("  preset: everything"))[0]).toMatch(
      /^event\.preset: expected one of "full", "first_name", "initials", "booking_only"/,
    );
  });

  it("refuses placeholders nobody knows", () => {
    expect(problems(base('  title: "{service_name}: {customer}"\n  description: "{note} {notes} {note}"'))).toEqual([
      "event.title: unknown placeholder {customer} (README lists the placeholders, e.g. {service_name}, {customer_name}, {notes}, each in single braces) (line 10)",
      "event.description: unknown placeholder {note} (README lists the placeholders, e.g. {service_name}, {customer_name}, {notes}, each in single braces) (line 11)",
    ]);
  });

  it("refuses reminders Google would refuse or change", () => {
    const p = (r: string) => problems(base(`  reminders: ${r}`));
    expect(p("[]")[0]).toMatch(/^event\.reminders: .*an empty list: write `none` for no reminders/);
    expect(p("[{ method: sms, minutes: 10 }]")[0]).toMatch(
      /^event\.reminders: \[0\]\.method: expected one of "popup", "email"/,
    );
    expect(p("[{ method: popup, minutes: 50000 }]")[0]).toMatch(/at most 40320 \(four weeks\): Google's limit/);
    expect(p("[{ method: popup, minutes: -1 }]")[0]).toMatch(/^event\.reminders/);
    const six = `[${Array.from({ length: 6 }, (_, i) => `{ method: popup, minutes: ${i} }`).join(", ")}]`;
    expect(p(six)[0]).toMatch(/at most 5 reminders: Google's limit/);
    expect(p("[{ method: popup, minutes: 10 }, { method: popup, minutes: 10 }]")[0]).toMatch(
      /duplicate reminder popup 10/,
    );
    expect(p("sometimes")[0]).toMatch(
      /^event\.reminders: expected default, none, or a list of \{ method: popup \| email, minutes \}, found "sometimes"/,
    );
  });
});
