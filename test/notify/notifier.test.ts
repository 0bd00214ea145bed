// Tests the notifier's delivery rules against a real SMTP server and HTTP receiver: a storm of conditions becomes one
// summary, the rate limit holds later notices back, a failing target is retried with backoff without holding the
// others up, an e-mail address refused while the others take the message is retried alone (a 4xx) or told (a 5xx),
// each chat gets its own payload, OAuth therapists' messages carry their reconnect link (and, when asked,
// reach the therapist), reconciliation streaks and guard holds are told, secrets are removed.
import { Registry } from "prom-client";
import { afterEach, describe, expect, it } from "vitest";
import { BookingApiError } from "../../src/booking/errors.ts";
import { ManualClock } from "../../src/clock.ts";
import { type Config, type ConfigInput, ConfigSchema } from "../../src/config/schema.ts";
import { SecretRegistry } from "../../src/log.ts";
import { MAX_QUEUED, NotifyLedger } from "../../src/notify/ledger.ts";
import { Notifier, type NotifierOptions } from "../../src/notify/notifier.ts";
import type { LiveView, TherapistView } from "../../src/notify/view.ts";
import { openStore, type Store } from "../../src/store/store.ts";
import type { ReconcileReport } from "../../src/sync/reconcile.ts";
import { captureLog } from "../support/log-capture.ts";
import { type HookSink, type MailSink, SMTP_PASS, SMTP_USER, startHookSink, startMailSink } from "./support.ts";

const cleanups: (() => Promise<void>)[] = [];
afterEach(async () => {
  for (const c of cleanups.splice(0).reverse()) await c().catch(() => {});
});

const THERAPISTS = ["th_a", "th_b", "th_c", "th_d", "th_e"];

interface Fixture {
  notifier: Notifier;
  clock: ManualClock;
  hook: HookSink;
  mail: MailSink;
  store: Store;
  registry: Registry;
  log: ReturnType<typeof captureLog>;
  live: LiveView;
  /** Sets one therapist's credentials. */
  set(id: string, change: Partial<TherapistView>): void;
}

async function fixture(
  edit: (raw: ConfigInput) => void = () => {},
  options: Partial<NotifierOptions> = {},
): Promise<Fixture> {
  const hook = await startHookSink();
  const mail = await startMailSink();
  const raw: ConfigInput = {
    booking: { base_url: "http://127.0.0.1:9", api_key: "bk_test_0123456789" },
    webhooks: { signing_secrets: ["whsec_test_0123456789"] },
    google: { auth: { type: "oauth" }, oauth: { client_id: "client", client_secret: "oauth-secret-0123" } },
    therapists: THERAPISTS.map((id) => ({ therapist_id: id, calendar_id: `${id}@clinic.test` })),
    notify: {
      label: "unit",
      targets: [
        { type: "webhook", name: "chat", url: hook.url },
        {
          type: "email",
          name: "mail",
          smtp: { host: "127.0.0.1", port: mail.port, auth: { user: SMTP_USER, pass: SMTP_PASS } },
          from: "calbridge@clinic.test",
          to: ["ops@clinic.test", "boss@clinic.test"],
        },
      ],
    },
  };
  edit(raw);
  const config: Config = ConfigSchema.parse(raw);
  const store = await openStore("memory://");
  const clock = new ManualClock(Date.UTC(2026, 10, 23, 8, 0, 0));
  const registry = new Registry();
  const log = captureLog("debug", new SecretRegistry());
  const live: LiveView = {
    deadLetters: 0,
    therapists: THERAPISTS.map((id) => ({ id, auth: "oauth", calendarId: `${id}@clinic.test`, credentials: "ok" })),
  };
  const notifier = new Notifier({
    config,
    store,
    registry,
    clock,
    logger: log.logger,
    isLeader: () => true,
    live: () => live,
    listWebhooks: async () => [],
    random: () => 1,
    ...options,
  });
  cleanups.push(
    hook.close,
    mail.close,
    () => store.close(),
    async () => notifier.close(),
  );
  return {
    notifier,
    clock,
    hook,
    mail,
    store,
    registry,
    log,
    live,
    set(id, change) {
      const i = live.therapists.findIndex((t) => t.id === id);
      live.therapists[i] = { ...live.therapists[i]!, ...change };
    },
  };
}

async function sent(registry: Registry, target: string, result: string): Promise<number> {
  const m = await registry.getSingleMetric("calbridge_notifications_total")?.get();
  return m?.values.find((v) => v.labels.target === target && v.labels.result === result)?.value ?? 0;
}

const slackText = (f: Fixture, i: number) => String(f.hook.posts[i]?.body.text);

describe("delivery", () => {
  it("turns a storm into one summary, then holds later notices back for min_interval_seconds", async () => {
    const f = await fixture((raw) => {
      raw.notify!.dead_letters_after_seconds = 0;
    });
    for (const id of THERAPISTS) f.set(id, { credentials: "broken", reason: "invalid_grant" });
    await f.notifier.check();
    expect(f.hook.posts).toHaveLength(1);
    expect(f.mail.mails).toHaveLength(1);
    expect(f.mail.mails[0]!.subject).toBe("[unit] 5 changes: 5 new");
    expect(f.mail.mails[0]!.to).toEqual(["ops@clinic.test", "boss@clinic.test"]);
    for (const id of THERAPISTS) expect(f.mail.mails[0]!.text).toContain(`Google credentials of ${id} stopped working`);
    expect(slackText(f, 0)).toMatch(/^\*\[unit\] 5 changes: 5 new\*\n• \*Google credentials of th_a stopped working\*/);

    // Within the next minute one recovers and one more breaks: held back, then sent together.
    f.set("th_a", { credentials: "ok" });
    await f.clock.advance(20_000);
    await f.notifier.check();
    f.live.deadLetters = 2;
    await f.clock.advance(20_000);
    await f.notifier.check();
    expect(f.hook.posts).toHaveLength(1);
    await f.clock.advance(20_000);
    await f.notifier.check();
    expect(f.hook.posts).toHaveLength(2);
    expect(f.mail.mails).toHaveLength(2);
    expect(f.mail.mails[1]!.subject).toBe("[unit] 2 changes: 1 new, 1 recovered");
    expect(f.mail.mails[1]!.text).toContain("Google credentials of th_a work again");
    expect(f.mail.mails[1]!.text).toContain("2 appointments failed to sync");
  });

  it("retries a failing target with growing backoff and does not hold the other target up", async () => {
    const f = await fixture();
    f.hook.failNext(2, 500);
    f.set("th_b", { credentials: "broken", reason: "invalid_grant" });
    await f.notifier.check();
    expect(f.mail.mails).toHaveLength(1);
    expect(f.hook.failures).toBe(1);
    expect(await sent(f.registry, "chat", "failed")).toBe(1);
    const warn = f.log.lines.find((l) => l.msg === "notification not delivered; retried with backoff");
    expect(warn).toMatchObject({ target: "chat", attempts: 1, retry_in_s: 30 });
    expect(String(warn?.err)).toMatch(/^target chat: HTTP 500 invalid_payload$/);

    await f.clock.advance(29_000);
    await f.notifier.check(); // backoff not over: no attempt
    expect(f.hook.failures).toBe(1);
    await f.clock.advance(1_000);
    await f.notifier.check();
    expect(f.hook.failures).toBe(2);
    expect(f.log.lines.filter((l) => l.retry_in_s === 60)).toHaveLength(1);
    await f.clock.advance(60_000);
    await f.notifier.check();
    expect(f.hook.posts).toHaveLength(1);
    expect(slackText(f, 0)).toContain("Google credentials of th_b stopped working");
    expect(await sent(f.registry, "chat", "sent")).toBe(1);
    expect(await sent(f.registry, "mail", "sent")).toBe(1);
    expect(f.mail.mails).toHaveLength(1);
    // The chat's address is its credential: never in a log line.
    expect(f.log.raw.join("\n")).not.toContain("secret-token-0123456789");
  });

  it("retries an SMTP server that refuses for a while", async () => {
    const f = await fixture();
    f.mail.refuseNext(1);
    f.set("th_c", { quotaPause: { reason: "quotaExceeded", until: f.clock.now() + 3_600_000 } });
    await f.notifier.check();
    expect(f.mail.mails).toHaveLength(0);
    expect(await sent(f.registry, "mail", "failed")).toBe(1);
    await f.clock.advance(30_000);
    await f.notifier.check();
    expect(f.mail.mails).toHaveLength(1);
    expect(f.mail.mails[0]!.subject).toBe("[unit] Google paused the calendar of th_c (quotaExceeded)");
    expect(f.mail.mails[0]!.text).toContain("leaves it alone until 2026-11-23 09:00 UTC");
  });

  it("speaks each chat's payload: Slack text, Matrix hookshot text and html, a Teams Workflows card", async () => {
    const f = await fixture((raw) => {
      const url = (raw.notify!.targets![0] as { url: string }).url;
      raw.notify!.targets = [
        { type: "webhook", name: "slack", url: `${url}?to=slack`, format: "slack" },
        { type: "webhook", name: "matrix", url: `${url}?to=matrix`, format: "matrix" },
        { type: "webhook", name: "teams", url: `${url}?to=teams`, format: "teams" },
      ];
      raw.therapists[0]!.name = "Anna <& Co>";
    });
    f.set("th_a", { credentials: "broken", reason: "invalid_grant" });
    await f.notifier.check();
    const by = (to: string) => f.hook.posts.find((p) => p.path.endsWith(`to=${to}`))!;
    expect(by("slack").contentType).toBe("application/json; charset=utf-8");
    expect(by("slack").body).toEqual({
      text: expect.stringMatching(/^\*\[unit\] Google credentials of Anna &lt;&amp; Co&gt;/),
    });
    const matrix = by("matrix").body as { text: string; html: string };
    expect(matrix.text).toMatch(/^\[unit\] Google credentials of Anna <& Co> \(th_a\) stopped working/);
    expect(matrix.html).toMatch(/^<p><strong>\[unit\] Google credentials of Anna &lt;&amp; Co&gt; \(th_a\)/);
    const teams = by("teams").body as {
      type: string;
      attachments: { contentType: string; content: { type: string; body: { text: string }[] } }[];
    };
    expect(teams.type).toBe("message");
    expect(teams.attachments[0]!.contentType).toBe("application/vnd.microsoft.card.adaptive");
    expect(teams.attachments[0]!.content.type).toBe("AdaptiveCard");
    expect(teams.attachments[0]!.content.body[0]!.text).toBe(
      "[unit] Google credentials of Anna <& Co> (th_a) stopped working",
    );
  });

  it("gives OAuth therapists' messages their reconnect link, and e-mails the therapist when asked to", async () => {
    const asked: string[] = [];
    const f = await fixture(
      (raw) => {
        (raw.notify!.targets![1] as { therapists?: boolean }).therapists = true;
        raw.therapists[0]!.email = "anna@therapists.example";
        raw.therapists[0]!.name = "Anna";
        raw.therapists[1]!.email = "ben@therapists.example";
      },
      {
        reconnectLink: async (id) => {
          asked.push(id);
          return `https://sync.clinic.example/connect/${id}?sig=abc&exp=1`;
        },
      },
    );
    f.set("th_a", { credentials: "broken", reason: "invalid_grant" });
    await f.notifier.check();
    // One link per recipient's message (the connect flow's links are single-use): the chat, the admins, Anna.
    expect(asked).toEqual(["th_a", "th_a", "th_a"]);
    const admins = f.mail.mails.find((m) => m.to.includes("ops@clinic.test"))!;
    const anna = f.mail.mails.find((m) => m.to.includes("anna@therapists.example"))!;
    expect(f.mail.mails).toHaveLength(2);
    expect(admins.text).toContain("Send them the reconnect link below.");
    expect(admins.text).toContain("Reconnect the calendar: https://sync.clinic.example/connect/th_a?sig=abc&exp=1");
    expect(admins.text).toContain('"Testing" issues refresh tokens that expire after 7 days');
    expect(anna.subject).toBe("[unit] Your Google Calendar is no longer updated");
    expect(anna.text).toMatch(/^Hello Anna, calbridge can no longer reach your Google Calendar/m);
    expect(anna.text).toContain("Reconnect the calendar: https://sync.clinic.example/connect/th_a?sig=abc&exp=1");
    expect(slackText(f, 0)).toContain(
      "<https://sync.clinic.example/connect/th_a?sig=abc&amp;exp=1|Reconnect the calendar>",
    );

    // Ben is told nothing about Anna; Anna hears when it works again, without a link.
    f.set("th_a", { credentials: "ok" });
    await f.clock.advance(60_000);
    await f.notifier.check();
    expect(f.mail.mails).toHaveLength(4);
    expect(f.mail.mails.some((m) => m.to.includes("ben@therapists.example"))).toBe(false);
    expect(f.mail.mails[3]!.text).not.toContain("https://");
    expect(asked).toHaveLength(3);
  });

  it("names a therapist who was never connected, without a link maker the CLI hint", async () => {
    const f = await fixture();
    f.set("th_d", { credentials: "setup", reason: "not_connected" });
    await f.notifier.check();
    expect(f.mail.mails[0]!.subject).toBe("[unit] th_d has no usable Google credentials");
    expect(f.mail.mails[0]!.text).toContain("No refresh token is stored for them");
    expect(f.mail.mails[0]!.text).toContain("`calbridge authorize --therapist th_d`");
  });

  it("removes registered secrets from every message", async () => {
    const registry = new SecretRegistry();
    registry.add("Hunter2-very-secret");
    const f = await fixture(
      (raw) => {
        raw.therapists[4]!.name = "Hunter2-very-secret";
      },
      { secrets: registry },
    );
    f.set("th_e", { credentials: "broken" });
    await f.notifier.check();
    expect(f.mail.mails[0]!.raw).not.toContain("Hunter2-very-secret");
    expect(f.mail.mails[0]!.subject).toBe("[unit] Google credentials of [REDACTED] (th_e) stopped working");
    expect(f.hook.posts[0]!.raw).not.toContain("Hunter2-very-secret");
  });
});

describe("an e-mail target's address refused while the others take the message", () => {
  const OPS = "ops@clinic.test";
  const BOSS = "boss@clinic.test";

  it("refused for a moment (a 4xx to RCPT TO): retried to that address alone with backoff, the others get it once", async () => {
    const f = await fixture();
    f.mail.deferred.add(BOSS); // greylisted
    f.set("th_b", { credentials: "broken", reason: "invalid_grant" });
    await f.notifier.check();
    expect(f.mail.mails.map((m) => m.to)).toEqual([[OPS]]);
    expect(await sent(f.registry, "mail", "sent")).toBe(1);
    expect(await sent(f.registry, "mail", "failed")).toBe(1);
    const warn = f.log.lines.find((l) => l.address === BOSS);
    expect(warn).toMatchObject({ level: 40, target: "mail", attempts: 1, retry_in_s: 30 });
    expect(String(warn?.err)).toContain("451 4.7.1 Greylisted");

    await f.clock.advance(29_000);
    await f.notifier.check(); // backoff not over
    expect(f.mail.mails).toHaveLength(1);
    await f.clock.advance(1_000);
    await f.notifier.check(); // still greylisted: the wait doubles
    expect(f.mail.mails).toHaveLength(1);
    expect(f.log.lines.filter((l) => l.address === BOSS && l.retry_in_s === 60)).toHaveLength(1);

    f.mail.deferred.delete(BOSS);
    await f.clock.advance(60_000);
    await f.notifier.check();
    expect(f.mail.mails.map((m) => m.to)).toEqual([[OPS], [BOSS]]);
    expect(f.mail.mails[1]!.subject).toBe(f.mail.mails[0]!.subject);
    expect(f.mail.mails[1]!.subject).toBe("[unit] Google credentials of th_b stopped working");
    await f.clock.advance(31 * 60_000);
    await f.notifier.check(); // nothing left to send to anyone
    expect(f.mail.mails).toHaveLength(2);
    expect(await sent(f.registry, "mail", "sent")).toBe(2);
    expect(await sent(f.registry, "mail", "failed")).toBe(2);
    expect(f.hook.posts).toHaveLength(1);
  });

  it("refused for good (a 5xx to RCPT TO): an error naming the address, counted, not sent again", async () => {
    const f = await fixture();
    f.mail.unknown.add(BOSS);
    f.set("th_b", { credentials: "broken", reason: "invalid_grant" });
    await f.notifier.check();
    expect(f.mail.mails.map((m) => m.to)).toEqual([[OPS]]);
    const error = f.log.lines.find((l) => l.level === 50);
    expect(error).toMatchObject({ target: "mail", address: BOSS, notices: 1 });
    expect(String(error?.msg)).toContain("refused for good");
    expect(String(error?.err)).toContain("550 5.1.1 mailbox unavailable");
    expect(await sent(f.registry, "mail", "sent")).toBe(1);
    expect(await sent(f.registry, "mail", "refused")).toBe(1);
    for (let i = 0; i < 3; i++) {
      await f.clock.advance(31 * 60_000);
      await f.notifier.check();
    }
    expect(f.mail.mails.map((m) => m.to)).toEqual([[OPS]]);
    expect(await sent(f.registry, "mail", "failed")).toBe(0);
  });

  it("tells doctor's test which address refused it", async () => {
    const f = await fixture();
    f.mail.unknown.add(BOSS);
    const results = await f.notifier.sendTest();
    expect(results[1]).toMatchObject({ target: "mail", ok: false });
    expect(results[1]!.detail).toMatch(
      /^test message accepted for the other addresses; refused for boss@clinic\.test: .*550/,
    );
  });
});

describe("a target down for long", () => {
  it("keeps the newest notices queued, counts the dropped ones, and sends one summary of it all", async () => {
    const f = await fixture();
    const ledger = new NotifyLedger(f.store);
    const notices = Array.from({ length: 250 }, (_, i) => ({
      id: `dead_letters:@${i}`,
      condition: "dead_letters",
      subject: "",
      opened: i % 2 === 0,
      at: i,
      facts: { count: i },
    }));
    await ledger.commit(new Map(), new Map([["chat", notices]]));
    const box = await ledger.outbox("chat");
    expect(box.notices).toHaveLength(MAX_QUEUED);
    expect(box.notices[0]!.at).toBe(50);
    expect(box.dropped).toBe(50);
    await f.notifier.check();
    expect(f.hook.posts).toHaveLength(1);
    const text = slackText(f, 0);
    expect(text).toMatch(/^\*\[unit\] 200 changes: 100 new, 100 recovered\*/);
    expect(text).toContain("… and 225 more (see /status and the log).");
    expect((await ledger.outbox("chat")).notices).toEqual([]);
  });
});

describe("reconciliation conditions", () => {
  const report = (over: Partial<ReconcileReport>): ReconcileReport => ({
    dryRun: false,
    startedAt: new Date(0).toISOString(),
    durationMs: 1,
    window: { from: "", to: "" },
    appointments: 10,
    skippedUnmapped: 0,
    waitingForCalendar: 0,
    heldWritebacks: 0,
    managedEvents: 10,
    calendarsListed: 1,
    calendarsIncremental: 0,
    plan: [],
    counts: {},
    guard: { tripped: false, destructive: 0, managed: 10, limit: 2 },
    calendarErrors: {},
    failed: 0,
    unreadableLinks: [],
    ok: true,
    ...over,
  });
  const apiDown = () =>
    new BookingApiError({ code: "server_error", message: "customer zelda@x.example exploded", status: 503 });

  it("tells when reconciliations failed reconcile_failures times in a row, and when one succeeds", async () => {
    const f = await fixture((raw) => {
      raw.notify!.reconcile_failures = 3;
    });
    await f.notifier.reconcileFinished({ error: apiDown() });
    await f.notifier.reconcileFinished({ report: report({ failed: 2, ok: false }) });
    await f.notifier.check();
    expect(f.mail.mails).toHaveLength(0);
    await f.notifier.reconcileFinished({ error: apiDown() });
    const gauge = await f.registry.getSingleMetric("calbridge_reconcile_consecutive_failures")?.get();
    expect(gauge?.values[0]?.value).toBe(3);
    await f.notifier.check();
    expect(f.mail.mails).toHaveLength(1);
    expect(f.mail.mails[0]!.subject).toBe("[unit] Reconciliation failed 3 times in a row");
    // The API's own text may echo customer data: only its code and status are told.
    expect(f.mail.mails[0]!.text).toContain("Last error: the booking API answered server_error (HTTP 503).");
    expect(f.mail.mails[0]!.raw).not.toContain("zelda");

    await f.notifier.reconcileFinished({ error: apiDown() });
    await f.clock.advance(60_000);
    await f.notifier.check();
    expect(f.mail.mails).toHaveLength(1);
    await f.notifier.reconcileFinished({ report: report({}) });
    await f.notifier.check();
    expect(f.mail.mails).toHaveLength(2);
    expect(f.mail.mails[1]!.subject).toBe("[unit] Reconciliation succeeds again");
  });

  it("counts a run that left an appointment alone for a damaged link as failed, and says what to do", async () => {
    const f = await fixture((raw) => {
      raw.notify!.reconcile_failures = 2;
    });
    for (let i = 0; i < 2; i++) {
      await f.notifier.reconcileFinished({ report: report({ unreadableLinks: ["apt_1"], ok: false }) });
    }
    await f.notifier.check();
    expect(f.mail.mails[0]!.subject).toBe("[unit] Reconciliation failed 2 times in a row");
    expect(f.mail.mails[0]!.text).toContain(
      "Last error: 1 appointment was left alone: the store's link record cannot be read; restore it from a backup or remove it.",
    );
  });

  it("tells when the mass-deletion guard holds a run, and when a run is sane again", async () => {
    const f = await fixture();
    await f.notifier.reconcileFinished({
      report: report({ ok: false, guard: { tripped: true, destructive: 8, managed: 10, limit: 2 } }),
    });
    await f.notifier.check();
    expect(f.mail.mails[0]!.subject).toBe("[unit] The mass-deletion guard held a reconciliation");
    expect(f.mail.mails[0]!.text).toContain("It would have removed 8 of 10 managed events");
    await f.notifier.reconcileFinished({ report: report({}) });
    await f.clock.advance(60_000);
    await f.notifier.check();
    expect(f.mail.mails[1]!.subject).toBe("[unit] The mass-deletion guard is clear");
    expect(f.hook.posts).toHaveLength(2);
  });
});

describe("doctor's test message", () => {
  it("reaches every target at once, and reports a target that refuses it", async () => {
    const f = await fixture();
    f.hook.failNext(1, 404);
    const results = await f.notifier.sendTest();
    expect(results).toEqual([
      { target: "chat", ok: false, detail: "target chat: HTTP 404 invalid_payload" },
      { target: "mail", ok: true, detail: "test message accepted" },
    ]);
    expect(f.mail.mails[0]!.subject).toBe("[unit] Test notification");
  });
});
