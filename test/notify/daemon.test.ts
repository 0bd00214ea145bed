// Tests notifications end to end: the real daemon (production wiring) against the simulators, delivering to a real
// SMTP server and an HTTP receiver on 127.0.0.1. A revoked token, a paused or missing calendar and dead letters each produce
// exactly one message per target when they open and one when they clear; nothing is sent again while a condition
// stays open, after a restart, or by a replica that does not lead; no message carries a customer's name or e-mail.
import { afterEach, describe, expect, it, vi } from "vitest";
import { ManualClock } from "../../src/clock.ts";
import type { ConfigInput } from "../../src/config/schema.ts";
import { type App, createApp } from "../../src/daemon/app.ts";
import { silentLogger } from "../../src/log.ts";
import { type Harness, harness } from "../sync/support.ts";
import { type HookSink, type MailSink, SMTP_PASS, SMTP_USER, startHookSink, startMailSink } from "./support.ts";

const HOUR = 3_600_000;

interface Setup {
  h: Harness;
  clock: ManualClock;
  mail: MailSink;
  hook: HookSink;
  /** Every chat post and e-mail so far, as raw text. */
  delivered(): string[];
}

const cleanups: (() => Promise<void>)[] = [];
afterEach(async () => {
  for (const c of cleanups.splice(0).reverse()) await c().catch(() => {});
});

function notifyConfig(hook: HookSink, mail: MailSink, extra: Partial<NonNullable<ConfigInput["notify"]>> = {}) {
  return {
    label: "clinic-test",
    dead_letters_after_seconds: 0,
    targets: [
      { type: "webhook" as const, name: "chat", url: hook.url },
      {
        type: "email" as const,
        name: "ops-mail",
        smtp: { host: "127.0.0.1", port: mail.port, auth: { user: SMTP_USER, pass: SMTP_PASS } },
        from: "calbridge@clinic.test",
        to: ["ops@clinic.test"],
      },
    ],
    ...extra,
  };
}

async function setup(
  extra: Partial<NonNullable<ConfigInput["notify"]>> = {},
  configure: (raw: ConfigInput) => void = () => {},
): Promise<Setup> {
  const mail = await startMailSink();
  const hook = await startHookSink();
  const clock = new ManualClock(Date.now());
  const h = await harness({
    therapists: ["th_1", "th_2"],
    configure: (raw) => {
      raw.notify = notifyConfig(hook, mail, extra);
      raw.therapists[0]!.name = "Anna";
      configure(raw);
    },
    app: { clock },
  });
  cleanups.push(mail.close, hook.close, () => h.close());
  // Customers with names and addresses that must never appear in a message.
  for (const [i, t] of ["th_1", "th_1", "th_2"].entries()) {
    const start = new Date(Date.now() + (24 + i) * HOUR);
    start.setUTCMinutes(0, 0, 0);
    h.world.booking.create({
      therapist_id: t,
      start_time: start.toISOString(),
      customer: { name: `Zelda Privata${i}`, email: `zelda${i}@patients.example` },
      notes: "allergic to penicillin",
    });
  }
  await h.app.start();
  const report = await h.app.reconcile();
  expect(report.ok).toBe(true);
  return {
    h,
    clock,
    mail,
    hook,
    delivered: () => [...hook.posts.map((p) => p.raw), ...mail.mails.map((m) => m.raw)],
  };
}

/** No customer name or e-mail of the booking service, nor a note, in anything delivered. */
function expectNoCustomerDetails(s: Setup): void {
  const customers = s.h.world.booking.customers();
  expect(customers.length).toBeGreaterThan(0);
  const delivered = s.delivered();
  expect(delivered.length).toBeGreaterThan(0);
  for (const text of delivered) {
    for (const c of customers) {
      expect(text).not.toContain(c.name);
      expect(text).not.toContain(c.email);
    }
    expect(text).not.toContain("penicillin");
    expect(text).not.toContain(SMTP_PASS);
  }
}

/** One look at a calendar's changes, as the poller's timer makes it (a failure is logged and left to the next poll). */
const poll = (app: App, therapistId: string) => app.poller.poll(therapistId).catch(() => {});

const texts = (s: Setup) => s.hook.posts.map((p) => String(p.body.text));

describe("notifications from the daemon", () => {
  it("a revoked token: exactly one message per target; restored access: exactly one recovery message", async () => {
    const s = await setup();
    await s.h.app.notifier.check();
    expect(s.delivered()).toEqual([]);

    s.h.world.google.revokeTokens("th_1@clinic.test");
    await poll(s.h.app, "th_1");
    expect(s.h.app.calendars.get("th_1")!.health().credentials).toBe("broken");
    await s.h.app.notifier.check();
    expect(s.hook.posts).toHaveLength(1);
    expect(s.mail.mails).toHaveLength(1);
    expect(texts(s)[0]).toMatch(/^\*\[clinic-test\] Google credentials of Anna \(th_1\) stopped working\*/);
    expect(texts(s)[0]).toMatch(/domain-wide delegation for th_1@clinic.test/);
    expect(s.mail.mails[0]).toMatchObject({
      from: "calbridge@clinic.test",
      to: ["ops@clinic.test"],
      subject: "[clinic-test] Google credentials of Anna (th_1) stopped working",
    });
    expect(s.mail.logins).toEqual([SMTP_USER]);

    // Still broken: nothing more, however often it is looked at.
    for (let i = 0; i < 3; i++) {
      await s.clock.advance(60_000);
      await poll(s.h.app, "th_1");
      await s.h.app.notifier.check();
    }
    expect(s.hook.posts).toHaveLength(1);
    expect(s.mail.mails).toHaveLength(1);

    // Access restored; the gateway tries the credentials again at its next probe (every 10 minutes).
    s.h.world.google.restoreAccess("th_1@clinic.test");
    await s.clock.advance(10 * 60_000);
    // The probe may be another call's (a sync's retry due during the advance), still on its way: a poll meanwhile
    // fails fast, so the test waits for the probe's answer.
    await vi.waitFor(
      async () => {
        await poll(s.h.app, "th_1");
        expect(s.h.app.calendars.get("th_1")!.health().credentials).toBe("ok");
      },
      { timeout: 5000, interval: 50 },
    );
    await s.h.app.notifier.check();
    await s.h.app.notifier.check();
    expect(s.hook.posts).toHaveLength(2);
    expect(s.mail.mails).toHaveLength(2);
    expect(texts(s)[1]).toMatch(/Google credentials of Anna \(th_1\) work again/);
    expect(s.mail.mails[1]!.subject).toBe("[clinic-test] Google credentials of Anna (th_1) work again");
    expectNoCustomerDetails(s);
  });

  it("a calendar paused for quotaExceeded: one message when paused, one when a call succeeds again", async () => {
    const s = await setup();
    // Aimed at th_2's calendar: the daemon may have a call of th_1's in flight (enrichment after the first run).
    s.h.world.google.faults.next(1, { status: 403, reason: "quotaExceeded", match: /th_2/ });
    await poll(s.h.app, "th_2");
    await s.h.app.notifier.check();
    expect(s.hook.posts).toHaveLength(1);
    expect(s.mail.mails).toHaveLength(1);
    expect(s.mail.mails[0]!.subject).toBe("[clinic-test] Google paused the calendar of th_2 (quotaExceeded)");
    expect(s.mail.mails[0]!.text).toMatch(/leaves it alone until \d{4}-\d\d-\d\d \d\d:\d\d UTC/);

    // The pause runs out, but until a call succeeds nobody knows the quota is back: no message yet.
    await s.clock.advance(HOUR + 1);
    await s.h.app.notifier.check();
    expect(s.hook.posts).toHaveLength(1);
    await poll(s.h.app, "th_2");
    await s.h.app.notifier.check();
    await s.h.app.notifier.check();
    expect(s.hook.posts).toHaveLength(2);
    expect(s.mail.mails).toHaveLength(2);
    expect(s.mail.mails[1]!.subject).toBe("[clinic-test] Calendar of th_2 resumed");
    expectNoCustomerDetails(s);
  });

  it("a calendar deleted or unshared in Google: one message naming it, one when it is found again", async () => {
    const s = await setup();
    const cal = s.h.world.calendarOf("th_2");
    s.h.world.google.deleteCalendar(cal);
    // The runs that cannot list it fail, but as a calendar not listed, not as appointments failing: without this
    // condition nobody was told, however long it lasted.
    expect((await s.h.app.reconcile()).ok).toBe(false);
    await poll(s.h.app, "th_2");
    await s.h.app.notifier.check();
    await s.h.app.notifier.check();
    expect(s.mail.mails.map((m) => m.subject)).toEqual(["[clinic-test] The calendar of th_2 cannot be found"]);
    expect(s.mail.mails[0]!.text).toContain(`Google answers 404 for ${cal}: it was deleted, or it is no longer shared`);
    expect(s.hook.posts).toHaveLength(1);

    s.h.world.google.createCalendar(cal, cal, { timeZone: "Europe/Berlin" });
    await poll(s.h.app, "th_2");
    await s.h.app.notifier.check();
    await s.clock.advance(61_000); // past min_interval_seconds: the recovery goes out on its own
    await s.h.app.notifier.check();
    expect(s.mail.mails.map((m) => m.subject)).toEqual([
      "[clinic-test] The calendar of th_2 cannot be found",
      "[clinic-test] The calendar of th_2 is found again",
    ]);
    expectNoCustomerDetails(s);
  });

  it("a deleted calendar's alert stays open while its appointments change: a 404 for an event does not find it again", async () => {
    const s = await setup();
    const appt = String(s.h.world.booking.all().find((a) => a.therapist_id === "th_2")!.id);
    s.h.world.google.deleteCalendar(s.h.world.calendarOf("th_2"));
    await poll(s.h.app, "th_2");
    await s.h.app.notifier.check();
    expect(s.mail.mails.map((m) => m.subject)).toEqual(["[clinic-test] The calendar of th_2 cannot be found"]);

    // The booking changes: the sync patches the linked event (Google answers 404 for it), then tries to insert it. A
    // check while the insert is on its way saw the calendar as found again: "found again", then "cannot be found".
    let release!: () => void;
    const released = new Promise<void>((r) => {
      release = r;
    });
    let insertArrived!: () => void;
    const arrived = new Promise<void>((r) => {
      insertArrived = r;
    });
    s.h.world.google.faults.holdNext(/^POST .*\/events/, () => {
      insertArrived();
      return released;
    });
    s.h.world.booking.setNotes(appt, "changed");
    const sync = s.h.app.engine
      .syncAppointment(appt, { reason: "appointment.updated", priority: "webhook" })
      .catch(() => {});
    await arrived;
    expect(s.h.app.calendars.get("th_2")!.health()).toMatchObject({ credentials: "ok", calendarMissing: true });
    await s.clock.advance(61_000);
    await s.h.app.notifier.check();
    release();
    await sync;
    await poll(s.h.app, "th_2");
    await s.clock.advance(61_000);
    await s.h.app.notifier.check();
    expect(s.mail.mails.map((m) => m.subject)).toEqual(["[clinic-test] The calendar of th_2 cannot be found"]);
    expect(s.hook.posts).toHaveLength(1);
  });

  it("dead letters: one message once they stayed a while, one when they cleared", async () => {
    const s = await setup({ dead_letters_after_seconds: 120 });
    const start = new Date(Date.now() + 72 * HOUR);
    start.setUTCMinutes(0, 0, 0);
    const appt = s.h.world.booking.create({
      therapist_id: "th_2",
      start_time: start.toISOString(),
      customer: { name: "Yorick Geheim", email: "yorick@patients.example" },
    });
    const id = String(appt.id);
    s.h.world.google.faults.next(1, { status: 400, reason: "invalid", match: /^POST / });
    await s.h.app.engine.syncAppointment(id, { reason: "test", priority: "webhook" });
    expect(s.h.app.sync.dead.count).toBe(1);

    await s.h.app.notifier.check();
    expect(s.delivered()).toEqual([]); // not yet: retries clear most dead letters within minutes
    await s.clock.advance(121_000);
    await s.h.app.notifier.check();
    expect(s.hook.posts).toHaveLength(1);
    expect(s.mail.mails).toHaveLength(1);
    expect(s.mail.mails[0]!.subject).toBe("[clinic-test] 1 appointment failed to sync");

    await s.h.app.engine.syncAppointment(id, { reason: "test", priority: "webhook" });
    expect(s.h.app.sync.dead.count).toBe(0);
    await s.clock.advance(60_000);
    await s.h.app.notifier.check();
    expect(s.hook.posts).toHaveLength(2);
    expect(s.mail.mails).toHaveLength(2);
    expect(s.mail.mails[1]!.subject).toBe("[clinic-test] No appointments left in the dead letters");
    expectNoCustomerDetails(s);
  });

  it("reconciliations failing reconcile_failures times in a row: one message; the next success: one", async () => {
    const s = await setup({ reconcile_failures: 2 });
    // 401: the key refused (not retried), as after a rotated API key.
    s.h.world.booking.faults.failNext(2, 401, { path: "/v1/appointments" });
    await expect(s.h.app.reconcile()).rejects.toThrow();
    await s.h.app.notifier.check();
    expect(s.delivered()).toEqual([]);
    await expect(s.h.app.reconcile()).rejects.toThrow();
    await s.h.app.notifier.check();
    expect(s.hook.posts).toHaveLength(1);
    expect(s.mail.mails).toHaveLength(1);
    expect(s.mail.mails[0]!.subject).toBe("[clinic-test] Reconciliation failed 2 times in a row");
    expect(s.mail.mails[0]!.text).toMatch(/Last error: the booking API answered \w+ \(HTTP 401\)\./);
    expect((await s.h.app.reconcile({ dryRun: true })).dryRun).toBe(true); // a dry run counts for nothing
    await s.h.app.notifier.check();
    expect(s.hook.posts).toHaveLength(1);
    expect((await s.h.app.reconcile()).ok).toBe(true);
    await s.clock.advance(60_000);
    await s.h.app.notifier.check();
    expect(s.hook.posts).toHaveLength(2);
    expect(s.mail.mails[1]!.subject).toBe("[clinic-test] Reconciliation succeeds again");
    expectNoCustomerDetails(s);
  });

  it("asks GET /v1/webhooks every webhook_check_hours and tells when the endpoint is disabled and enabled again", async () => {
    const url = "https://sync.clinic.test/webhooks/booking";
    const s = await setup({ webhook_check_hours: 6 }, (raw) => {
      raw.webhooks.public_url = url;
    });
    const endpoint = s.h.world.booking.addWebhookEndpoint({
      url,
      secret: "whsec_other_0123456789",
      events: ["appointment.created", "appointment.updated", "appointment.cancelled"],
    });
    const asked = () => s.h.world.booking.requests.filter((r) => r.route === "GET /v1/webhooks").length;
    s.h.world.booking.setWebhookEndpointEnabled(endpoint.id, false);
    await s.h.app.notifier.check();
    expect(asked()).toBe(1);
    expect(s.mail.mails).toHaveLength(1);
    expect(s.mail.mails[0]!.subject).toBe("[clinic-test] The booking service's webhook endpoint is DISABLED");
    expect(s.mail.mails[0]!.text).toContain(`No webhooks reach ${url}`);

    s.h.world.booking.setWebhookEndpointEnabled(endpoint.id, true);
    await s.clock.advance(5 * HOUR);
    await s.h.app.notifier.check();
    expect(asked()).toBe(1); // rate budget is spent on it only every 6 hours
    expect(s.mail.mails).toHaveLength(1);
    await s.clock.advance(HOUR);
    await s.h.app.notifier.check();
    expect(asked()).toBe(2);
    expect(s.mail.mails).toHaveLength(2);
    expect(s.mail.mails[1]!.subject).toBe("[clinic-test] The booking webhook endpoint is enabled again");
    const gauge = await s.h.app.registry.getSingleMetric("calbridge_booking_webhook_endpoint_disabled")?.get();
    expect(gauge?.values[0]?.value).toBe(0);
  });

  it("reads every page of GET /v1/webhooks, and takes ours as enabled when it was added again beside a disabled one", async () => {
    const url = "https://sync.clinic.test/webhooks/booking";
    const s = await setup({}, (raw) => {
      raw.webhooks.public_url = url;
    });
    const events = ["appointment.created", "appointment.updated", "appointment.cancelled"];
    // Disabled after 7 failed deliveries; the admin then added the address again rather than re-enabling the old one.
    const old = s.h.world.booking.addWebhookEndpoint({ url, secret: "whsec_old_0123456789", events });
    s.h.world.booking.setWebhookEndpointEnabled(old.id, false);
    for (let i = 0; i < 100; i++) {
      s.h.world.booking.addWebhookEndpoint({
        url: `https://crm.example/hook/${i}`,
        secret: `whsec_crm_${i}_012345`,
        events: ["payment.succeeded"],
      });
    }
    s.h.world.booking.addWebhookEndpoint({ url, secret: "whsec_new_0123456789", events }); // on page 2
    await s.h.app.notifier.check();
    const asked = s.h.world.booking.requests.filter((r) => r.route === "GET /v1/webhooks");
    expect(asked.map((r) => new URLSearchParams(r.query).get("page") ?? "1")).toEqual(["1", "2"]);
    expect(await s.h.app.registry.getSingleMetric("calbridge_booking_webhook_endpoint_disabled")?.get()).toMatchObject({
      values: [{ value: 0 }],
    });
    expect(s.delivered()).toEqual([]);
  });

  it("a booking API that does not answer GET /v1/webhooks holds back no other message, nor the stop", async () => {
    const s = await setup({}, (raw) => {
      raw.webhooks.public_url = "https://sync.clinic.test/webhooks/booking";
    });
    s.h.world.google.revokeTokens("th_1@clinic.test");
    await poll(s.h.app, "th_1");
    s.h.world.booking.faults.latencyMs = 60_000; // takes the request, answers in a minute (each of 5 tries: 15 s)
    s.h.app.notifier.start(); // as a leader does: its first check at once
    for (let i = 0; i < 200 && s.mail.mails.length === 0; i++) await new Promise((r) => setTimeout(r, 50));
    // Told while the endpoint's answer is still awaited: the credentials alert has nothing to do with the booking API.
    expect(s.h.world.booking.requests.filter((r) => r.route === "GET /v1/webhooks")).toHaveLength(1);
    expect(s.mail.mails.map((m) => m.subject)).toEqual([
      "[clinic-test] Google credentials of Anna (th_1) stopped working",
    ]);
    await s.h.app.notifier.stop(); // gives the request up instead of waiting out its retries
    s.h.world.booking.faults.latencyMs = 0;
  });

  it("runs on its own timer in a running daemon, and stops with it", async () => {
    const mail = await startMailSink();
    const hook = await startHookSink();
    cleanups.push(mail.close, hook.close);
    const h = await harness({
      therapists: ["th_1"],
      configure: (raw) => {
        raw.notify = notifyConfig(hook, mail);
      },
    });
    cleanups.push(() => h.close());
    h.world.google.revokeTokens("th_1@clinic.test");
    // Not one-shot: the poller's first poll meets the revoked credentials, the notifier's timer tells.
    const app = await createApp(h.world.config, { logger: silentLogger, listen: "127.0.0.1:0", notifyIntervalMs: 20 });
    cleanups.push(() => app.stop(2000));
    await app.start();
    for (let i = 0; i < 500 && mail.mails.length === 0; i++) await new Promise((r) => setTimeout(r, 10));
    expect(mail.mails.map((m) => m.subject)).toEqual(["[clinic-test] Google credentials of th_1 stopped working"]);
    await app.stop(2000);
    h.world.google.restoreAccess("th_1@clinic.test");
    await new Promise((r) => setTimeout(r, 100));
    expect(hook.posts).toHaveLength(1);
    expect(mail.mails).toHaveLength(1);
  });

  it("sends nothing again after a restart, and nothing from a replica that does not lead", async () => {
    const s = await setup();
    s.h.world.google.revokeTokens("th_1@clinic.test");
    await poll(s.h.app, "th_1");
    await s.h.app.notifier.check();
    expect(s.delivered()).toHaveLength(2);
    await s.h.app.stop(2000);

    // A new process on the same store, still with revoked credentials: the condition is known to be open.
    const again = await createApp(s.h.world.config, { logger: silentLogger, oneShot: true, listen: "127.0.0.1:0" });
    cleanups.push(() => again.stop(2000));
    await again.notifier.check(); // not started: not the leader
    await again.start();
    await poll(again, "th_1");
    expect(again.calendars.get("th_1")!.health().credentials).toBe("broken");
    await again.notifier.check();
    expect(s.delivered()).toHaveLength(2);
  });
});
