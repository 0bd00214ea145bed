// Credentials alerts told again while they stay open (ConditionKind.variant), review25: a service-account therapist
// has nothing to reconnect, so a change of reason is never told as "reconnecting now helps"; and an OAuth therapist's
// probe whose answer flips between a refusal reconnecting fixes and one it cannot is told once, not at each flip: a
// new kind of open is told after VARIANT_HOLD_MS without a break, a flip back to the kind told sends nothing.
import { Registry } from "prom-client";
import { afterEach, expect, it } from "vitest";
import { CalendarHealth } from "../../src/calendar/calendar-health.ts";
import { CalendarError } from "../../src/calendar/errors.ts";
import { gatewayMetrics } from "../../src/calendar/metrics.ts";
import { ManualClock } from "../../src/clock.ts";
import { type Config, type ConfigInput, ConfigSchema } from "../../src/config/schema.ts";
import { SecretRegistry, silentLogger } from "../../src/log.ts";
import { VARIANT_HOLD_MS } from "../../src/notify/conditions.ts";
import { Notifier } from "../../src/notify/notifier.ts";
import { daemonView } from "../../src/notify/view.ts";
import { openStore } from "../../src/store/store.ts";
import { captureLog } from "../support/log-capture.ts";
import { type MailSink, SMTP_PASS, SMTP_USER, startMailSink } from "./support.ts";

const cleanups: (() => Promise<void>)[] = [];
afterEach(async () => {
  for (const c of cleanups.splice(0).reverse()) await c().catch(() => {});
});

function raw(google: ConfigInput["google"], sink?: MailSink): ConfigInput {
  return {
    booking: { base_url: "http://127.0.0.1:9", api_key: "bk_test_0123456789" },
    webhooks: { signing_secrets: ["whsec_test_0123456789"] },
    google,
    therapists: [
      {
        therapist_id: "th_a",
        name: "Anna",
        calendar_id: "anna@clinic.example",
        email: "anna@clinic.example",
        ...(google?.auth?.type === "service_account" ? { impersonate: "anna@clinic.example" } : {}),
      },
    ],
    ...(sink
      ? {
          notify: {
            label: "unit",
            targets: [
              {
                type: "email" as const,
                name: "mail",
                smtp: { host: "127.0.0.1", port: sink.port, auth: { user: SMTP_USER, pass: SMTP_PASS } },
                from: "calbridge@clinic.test",
                to: ["ops@clinic.test"],
                therapists: true,
              },
            ],
          },
        }
      : {}),
  } as ConfigInput;
}

async function setup(auth: "oauth" | "service_account") {
  const sink = await startMailSink();
  cleanups.push(sink.close);
  const config: Config = ConfigSchema.parse(
    raw(
      auth === "oauth"
        ? { auth: { type: "oauth" }, oauth: { client_id: "client", client_secret: "oauth-secret-0123" } }
        : { auth: { type: "service_account", key_file: "/etc/calbridge/sa.json" } },
      sink,
    ),
  );
  const clock = new ManualClock(Date.UTC(2026, 10, 23, 8, 0, 0));
  const health = new CalendarHealth({
    therapistId: "th_a",
    calendarId: "anna@clinic.example",
    clock,
    logger: silentLogger,
    metrics: gatewayMetrics(new Registry()),
    quotaPauseMs: 3_600_000,
    credentialProbeMs: 600_000,
    authKind: auth,
    ...(auth === "service_account" ? { account: "anna@clinic.example" } : {}),
  });
  const store = await openStore("memory://");
  cleanups.push(() => store.close());
  const links: string[] = [];
  const notifier = new Notifier({
    config,
    store,
    registry: new Registry(),
    clock,
    logger: captureLog("debug", new SecretRegistry()).logger,
    isLeader: () => true,
    live: daemonView({
      config,
      calendars: new Map([["th_a", { health: () => health.snapshot() }]]),
      credentialErrors: new Map(),
      deadLetters: () => 0,
    }),
    listWebhooks: async () => [],
    reconnectLink: async (id) => {
      links.push(id);
      return `https://sync.clinic.example/connect?invite=${links.length}-${id}`;
    },
    random: () => 1,
  });
  cleanups.push(async () => notifier.close());
  return {
    clock,
    health,
    notifier,
    links,
    anna: () => sink.mails.filter((m) => m.to.includes("anna@clinic.example")),
    ops: () => sink.mails.filter((m) => m.to.includes("ops@clinic.test")),
  };
}

const grant = new CalendarError("token: 400 invalid_grant", {
  kind: "auth",
  status: 400,
  reason: "invalid_grant",
  tokenEndpoint: true,
});
// An egress proxy that now and then answers the token request with a 403 page of its own (no verdict on the grant).
const proxy = new CalendarError("token: 403", { kind: "auth", status: 403, tokenEndpoint: true });

it("a service-account therapist: Calendar API off, then delegation missing, is never told 'reconnecting now helps'", async () => {
  const f = await setup("service_account");
  // The Calendar API is switched off in the service account's project.
  f.health.markBroken(
    new CalendarError("events.list: 403 accessNotConfigured", {
      kind: "auth",
      status: 403,
      reason: "accessNotConfigured",
    }),
  );
  await f.notifier.check();
  const told = f.ops().length;
  expect(told).toBe(1);
  // The admin enables it; now the delegation turns out missing (unauthorized_client at the token endpoint).
  f.health.markBroken(
    new CalendarError("token: 401 unauthorized_client", {
      kind: "auth",
      status: 401,
      reason: "unauthorized_client",
      tokenEndpoint: true,
    }),
  );
  for (let i = 0; i < 4; i++) {
    await f.clock.advance(31 * 60_000);
    await f.notifier.check();
  }
  // There is nothing a service-account therapist (or the admins) could reconnect: no update at all.
  expect(f.ops()).toHaveLength(told);
  expect(
    f
      .ops()
      .map((m) => m.subject)
      .join("\n"),
  ).not.toMatch(/reconnecting now helps/);
  expect(
    f
      .anna()
      .map((m) => `${m.subject} ${m.text}`)
      .join("\n"),
  ).not.toMatch(/reconnect/i);
  expect(f.links).toEqual([]);
});

it("an OAuth therapist whose probe alternates between a proxy's 403 page and invalid_grant is told once", async () => {
  const f = await setup("oauth");
  // One probe every 10 minutes for 3 hours, the proxy in the way every other one; the notifier looks every minute.
  for (let i = 0; i < 18; i++) {
    f.health.markBroken(i % 2 === 0 ? grant : proxy);
    for (let m = 0; m < 10; m++) {
      await f.notifier.check();
      await f.clock.advance(60_000);
    }
  }
  // The credentials never worked meanwhile: one problem, told once, one link each for the admins and for her.
  expect(f.anna().map((m) => m.subject)).toEqual(["[unit] Your Google Calendar is no longer updated"]);
  expect(f.ops().map((m) => m.subject)).toEqual(["[unit] Google credentials of Anna (th_a) stopped working"]);
  expect(f.links).toHaveLength(2);
});

it("a change that lasts the hold period is told once, then a flip back within it is not told", async () => {
  expect(VARIANT_HOLD_MS).toBeGreaterThan(10 * 60_000); // longer than the credentials probe interval
  const f = await setup("oauth");
  f.health.markBroken(grant);
  await f.notifier.check();
  expect(f.ops()).toHaveLength(1);
  // The proxy now refuses each token request: reconnecting does not help. Told only once it has lasted the hold.
  f.health.markBroken(proxy);
  await f.notifier.check();
  await f.clock.advance(VARIANT_HOLD_MS - 60_000);
  await f.notifier.check();
  expect(f.ops()).toHaveLength(1);
  await f.clock.advance(60_000);
  await f.notifier.check();
  expect(f.ops().map((m) => m.subject)).toEqual([
    "[unit] Google credentials of Anna (th_a) stopped working",
    "[unit] Google credentials of Anna (th_a) still not working: reconnecting does not help",
  ]);
  expect(f.anna().at(-1)?.subject).toBe("[unit] Your Google Calendar is still not updated: reconnecting does not help");
  // invalid_grant again for 20 minutes, then the proxy again: a flip back to what was told sends nothing.
  f.health.markBroken(grant);
  await f.clock.advance(60_000);
  await f.notifier.check();
  await f.clock.advance(20 * 60_000);
  await f.notifier.check();
  f.health.markBroken(proxy);
  await f.clock.advance(60_000);
  await f.notifier.check();
  for (let i = 0; i < 3; i++) {
    await f.clock.advance(VARIANT_HOLD_MS);
    await f.notifier.check();
  }
  expect(f.ops()).toHaveLength(2);
  expect(f.anna()).toHaveLength(2);
  expect(f.links).toHaveLength(2);
  // invalid_grant for good (the proxy fixed): reconnecting helps, told after the hold, with a new link each.
  f.health.markBroken(grant);
  await f.notifier.check();
  await f.clock.advance(VARIANT_HOLD_MS);
  await f.notifier.check();
  expect(f.ops().at(-1)?.subject).toBe(
    "[unit] Google credentials of Anna (th_a) still not working: reconnecting now helps",
  );
  expect(f.anna().at(-1)?.text).toMatch(/Open the link below to reconnect it\./);
  expect(f.links).toHaveLength(4);
});
