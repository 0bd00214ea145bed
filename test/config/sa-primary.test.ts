// A therapist on `calendar_id: primary` with no `impersonate` whose credentials are the service account: the service
// account acts as itself, and `primary` is its own calendar, which no therapist ever sees. It was accepted, `doctor`
// passed it ("reachable, access owner"), and two such therapists shared that one calendar: the first reconciliation
// deleted one therapist's events as stray copies and wrote the deletions back as cancellations.
import { afterEach, expect, it } from "vitest";
import { ManualClock } from "../../src/clock.ts";
import { ConfigError, parseConfig } from "../../src/config/load.ts";
import type { Config } from "../../src/config/schema.ts";
import { type App, createApp } from "../../src/daemon/app.ts";
import { SecretRegistry, silentLogger } from "../../src/log.ts";
import { startWorld, WORLD_WEBHOOK_SECRET, type World } from "../../src/simulator/world.ts";
import { openStore } from "../../src/store/store.ts";
import { runCli, writeConfig } from "../cli/support.ts";

const cleanups: (() => Promise<unknown>)[] = [];
afterEach(async () => {
  for (const c of cleanups.splice(0).reverse()) await c().catch(() => {});
});

const config = (google: string, therapists: string) => `
booking:
  base_url: http://127.0.0.1:9999
  api_key: sk_test_0123456789
webhooks:
  signing_secrets: ["whsec_abcdefghij"]
google:
${google}
therapists:
${therapists}
`;
const SA = "  auth: { type: service_account, key_file: /tmp/sa.json }";
const OAUTH = "  oauth: { client_id: 123-abc.apps.googleusercontent.com, client_secret: gsecret_123456 }";

function problems(text: string): string[] {
  try {
    parseConfig(text, { env: {}, secrets: new SecretRegistry() });
    return [];
  } catch (err) {
    if (!(err instanceof ConfigError)) throw err;
    return err.problems;
  }
}

it("refuses a service-account therapist on `primary` without impersonate, each one, naming the fix", () => {
  const found = problems(
    config(
      SA,
      "  - { therapist_id: th_anna, calendar_id: primary }\n  - { therapist_id: th_ben, calendar_id: primary }",
    ),
  );
  expect(found).toHaveLength(2);
  expect(found[0]).toMatch(
    /^therapists\[0\]\.calendar_id: "primary" without impersonate is the service account's own calendar, which no therapist sees: set impersonate to the therapist's address .* \(line 10\)$/,
  );
  expect(found[1]).toMatch(/^therapists\[1\]\.calendar_id: "primary" without impersonate/);
  // The therapist's own `auth: { type: service_account }` counts as the default does: the effective credentials decide.
  expect(
    problems(
      config(`${SA}\n${OAUTH}`, "  - { therapist_id: th_anna, calendar_id: primary, auth: { type: service_account } }"),
    ),
  ).toHaveLength(1);
});

it("accepts `primary` with impersonate, and OAuth therapists on `primary` (each their own account's calendar)", () => {
  expect(
    problems(
      config(
        SA,
        "  - { therapist_id: th_anna, calendar_id: primary, impersonate: anna@clinic.example }\n  - { therapist_id: th_ben, calendar_id: ben@clinic.example }",
      ),
    ),
  ).toEqual([]);
  // OAuth by the therapist's own auth beside a service-account default, and OAuth as the default.
  expect(
    problems(
      config(
        `${SA}\n${OAUTH}`,
        "  - { therapist_id: th_anna, calendar_id: primary, auth: { type: oauth } }\n  - { therapist_id: th_ben, calendar_id: primary, auth: { type: oauth } }",
      ),
    ),
  ).toEqual([]);
  expect(
    problems(
      config(
        `  auth: { type: oauth }\n${OAUTH}`,
        "  - { therapist_id: th_anna, calendar_id: primary }\n  - { therapist_id: th_ben, calendar_id: primary }",
      ),
    ),
  ).toEqual([]);
});

async function world(): Promise<World> {
  const w = await startWorld({ therapists: ["th_anna", "th_ben"] });
  cleanups.push(() => w.close());
  return w;
}

it("doctor fails such a file (a failed configuration check with --json) instead of passing the service account's calendar", async () => {
  const w = await world();
  w.booking.addWebhookEndpoint({
    url: "https://sync.example/webhooks/booking",
    secret: WORLD_WEBHOOK_SECRET,
    events: ["*"],
  });
  const file = writeConfig(w, (c: Config) => {
    c.webhooks.public_url = "https://sync.example/webhooks/booking";
    c.therapists[0]!.calendar_id = "primary";
    delete c.therapists[0]!.impersonate;
  });
  await (await openStore(w.config.store.url)).close();
  const r = await runCli("doctor", "--json", "--config", file);
  expect(r.code).toBe(2);
  const out = JSON.parse(r.stdout) as { ok: boolean; checks: { name: string; status: string; detail: string }[] };
  expect(out.ok).toBe(false);
  expect(out.checks).toEqual([
    {
      name: "configuration",
      status: "fail",
      detail: expect.stringMatching(/^therapists\[0\]\.calendar_id: "primary" without impersonate/),
    },
  ]);
  expect(r.stderr).toMatch(/invalid configuration .*therapists\[0\]\.calendar_id: "primary" without impersonate/s);
});

it("a daemon given such a configuration in code makes no gateway for them: their appointments wait, none is cancelled", async () => {
  const w = await world();
  for (const t of w.config.therapists) {
    t.calendar_id = "primary";
    delete t.impersonate;
  }
  const clock = new ManualClock(Date.now());
  const app: App = await createApp(w.config, { clock, logger: silentLogger, oneShot: true, listen: "127.0.0.1:0" });
  cleanups.push(() => app.stop(500));
  const start = new Date(Date.now() + 2 * 86_400_000);
  start.setUTCHours(10, 0, 0, 0);
  const ids = ["th_anna", "th_ben"].map((therapist_id) =>
    String(w.booking.create({ therapist_id, start_time: start.toISOString() }, { force: true }).id),
  );
  await app.reconcile();
  expect([...app.calendars.keys()]).toEqual([]);
  expect(ids.map((id) => w.booking.get(id)!.status)).toEqual(["confirmed", "confirmed"]);
});
