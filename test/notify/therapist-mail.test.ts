// Tests who the therapists' own e-mails reach, against real SMTP servers: the mapping as it is now, after a reload
// (SIGHUP applies it in place, as src/daemon/reload.ts does) changed an address, added a therapist or removed one,
// with each therapist's queue and rate limit carried over; and one message per therapist however many e-mail targets
// have `therapists: true` (each message carries a single-use reconnect link of its own); and what they and the admins
// are told again when credentials stay refused but whether reconnecting helps changes.
import { Registry } from "prom-client";
import { afterEach, describe, expect, it } from "vitest";
import { ManualClock } from "../../src/clock.ts";
import { appliedConfig } from "../../src/config/changes.ts";
import { type Config, type ConfigInput, ConfigSchema } from "../../src/config/schema.ts";
import { SecretRegistry } from "../../src/log.ts";
import { VARIANT_HOLD_MS } from "../../src/notify/conditions.ts";
import { Notifier } from "../../src/notify/notifier.ts";
import type { LiveView, TherapistView } from "../../src/notify/view.ts";
import { openStore } from "../../src/store/store.ts";
import { captureLog } from "../support/log-capture.ts";
import { type MailSink, SMTP_PASS, SMTP_USER, startMailSink } from "./support.ts";

const cleanups: (() => Promise<void>)[] = [];
afterEach(async () => {
  for (const c of cleanups.splice(0).reverse()) await c().catch(() => {});
});

interface Mapped {
  id: string;
  email?: string;
}

function emailTarget(name: string, sink: MailSink, to: string, therapists: boolean) {
  return {
    type: "email" as const,
    name,
    smtp: { host: "127.0.0.1", port: sink.port, auth: { user: SMTP_USER, pass: SMTP_PASS } },
    from: "calbridge@clinic.test",
    to: [to],
    therapists,
  };
}

function rawConfig(therapists: Mapped[], targets: ReturnType<typeof emailTarget>[]): ConfigInput {
  return {
    booking: { base_url: "http://127.0.0.1:9", api_key: "bk_test_0123456789" },
    webhooks: { signing_secrets: ["whsec_test_0123456789"] },
    google: { auth: { type: "oauth" }, oauth: { client_id: "client", client_secret: "oauth-secret-0123" } },
    therapists: therapists.map((t) => ({
      therapist_id: t.id,
      calendar_id: `${t.id}@clinic.test`,
      ...(t.email ? { email: t.email } : {}),
    })),
    notify: { label: "unit", targets },
  };
}

async function fixture(therapists: Mapped[], targets: (sinks: MailSink[]) => ReturnType<typeof emailTarget>[]) {
  const sinks = [await startMailSink(), await startMailSink()];
  const config: Config = ConfigSchema.parse(rawConfig(therapists, targets(sinks)));
  const store = await openStore("memory://");
  const clock = new ManualClock(Date.UTC(2026, 10, 23, 8, 0, 0));
  const registry = new Registry();
  /** Credentials by therapist; the live view has the therapists the shared config maps now (as the daemon's). */
  const credentials = new Map<string, Pick<TherapistView, "credentials" | "reason" | "fix">>();
  const links: string[] = [];
  const log = captureLog("debug", new SecretRegistry());
  const notifier = new Notifier({
    config,
    store,
    registry,
    clock,
    logger: log.logger,
    isLeader: () => true,
    live: (): LiveView => ({
      deadLetters: 0,
      therapists: config.therapists.map((t) => ({
        id: t.therapist_id,
        auth: "oauth",
        calendarId: t.calendar_id,
        ...(credentials.get(t.therapist_id) ?? { credentials: "ok" }),
      })),
    }),
    listWebhooks: async () => [],
    reconnectLink: async (id) => {
      const link = `https://sync.clinic.example/connect?invite=${links.length + 1}-for-${id}`;
      links.push(link);
      return link;
    },
    random: () => 1,
  });
  cleanups.push(
    ...sinks.map((s) => s.close),
    () => store.close(),
    async () => notifier.close(),
  );
  return {
    sinks,
    mails: () => sinks.flatMap((s) => s.mails),
    to: (address: string) => sinks.flatMap((s) => s.mails).filter((m) => m.to.includes(address)),
    notifier,
    clock,
    registry,
    log,
    links,
    store,
    broken(id: string, reason = "invalid_grant") {
      credentials.set(id, { credentials: "broken", reason });
    },
    /** Broken by a refusal reconnecting cannot fix (a Workspace admin's block): the gateway's hint as `fix`. */
    blocked(id: string, fix: string) {
      credentials.set(id, { credentials: "broken", reason: "admin_policy_enforced", fix });
    },
    neverConnected(id: string) {
      credentials.set(id, { credentials: "setup", reason: "not_connected" });
    },
    fixed(id: string) {
      credentials.delete(id);
    },
    /** SIGHUP with this mapping: the shared config's sections replaced in place, as src/daemon/reload.ts does. */
    reload(next: Mapped[]) {
      Object.assign(config, appliedConfig(config, ConfigSchema.parse(rawConfig(next, targets(sinks)))));
    },
  };
}

const oneTarget = (sinks: MailSink[]) => [emailTarget("mail", sinks[0]!, "ops@clinic.test", true)];

describe("a therapist's address the mail server refuses for good (a typo in therapists[].email)", () => {
  it("is dropped with an error naming the therapist, under its own label, not retried every 30 minutes", async () => {
    const f = await fixture([{ id: "th_a", email: "anna@typo.example" }], oneTarget);
    f.sinks[0]!.unknown.add("anna@typo.example");
    f.broken("th_a");
    await f.notifier.check();
    expect(f.mails().map((m) => m.to)).toEqual([["ops@clinic.test"]]); // the admins hear
    for (let i = 0; i < 3; i++) {
      await f.clock.advance(31 * 60_000);
      await f.notifier.check();
    }
    expect(f.links).toHaveLength(2); // the admins' and the one refused: not one more per retry
    const metric = (await f.registry.getSingleMetric("calbridge_notifications_total")?.get())?.values ?? [];
    expect(metric.map((v) => [v.labels.target, v.labels.result, v.value]).sort()).toEqual([
      ["mail", "sent", 1],
      ["mail/therapists", "refused", 1],
    ]);
  });
});

describe("a refusal that is not about the therapist's address (calbridge's own login, its sender, the message)", () => {
  const failures: [string, (sink: MailSink) => void, (sink: MailSink) => void][] = [
    [
      "535 to calbridge's SMTP login",
      (s) => {
        s.loginDown = true;
      },
      (s) => {
        s.loginDown = false;
      },
    ],
    ["550 to MAIL FROM", (s) => s.refuseNext(2, 550, "MAIL FROM"), () => {}],
    ["554 to the message (DATA)", (s) => s.refuseNext(2, 554), () => {}],
  ];
  it.each(failures)("%s: the therapist's e-mail is retried as the admins' is, and arrives", async (_, fail, heal) => {
    const f = await fixture([{ id: "th_a", email: "anna@clinic.example" }], oneTarget);
    const sink = f.sinks[0]!;
    fail(sink);
    f.broken("th_a");
    await f.notifier.check(); // both deliveries meet the refusal
    expect(f.mails()).toHaveLength(0);
    heal(sink);
    await f.clock.advance(31_000);
    await f.notifier.check();
    expect(f.mails().map((m) => m.to)).toEqual(expect.arrayContaining([["ops@clinic.test"], ["anna@clinic.example"]]));
    expect(f.to("anna@clinic.example")).toHaveLength(1);
    expect(f.to("anna@clinic.example")[0]!.text).toContain("https://sync.clinic.example/connect?invite=");
    const metric = (await f.registry.getSingleMetric("calbridge_notifications_total")?.get())?.values ?? [];
    expect(metric.map((v) => [v.labels.target, v.labels.result, v.value]).sort()).toEqual([
      ["mail", "failed", 1],
      ["mail", "sent", 1],
      ["mail/therapists", "failed", 1],
      ["mail/therapists", "sent", 1],
    ]);
    expect(f.log.lines.filter((l) => String(l.msg).includes("refused for good"))).toEqual([]);
    expect(f.log.lines.filter((l) => l.msg === "notification not delivered; retried with backoff")).toHaveLength(2);
  });
});

describe("a therapist who never connected", () => {
  it("is asked to connect, with the link, not told that Google refused an access that never was", async () => {
    const f = await fixture([{ id: "th_a", email: "anna@clinic.example" }], oneTarget);
    f.neverConnected("th_a");
    await f.notifier.check();
    const [mail] = f.to("anna@clinic.example");
    expect(mail?.subject).toBe("[unit] Connect your Google Calendar");
    expect(mail?.text).toContain("your appointments appear in your Google Calendar once it is connected");
    expect(mail?.text).toMatch(/invite=\d+-for-th_a/);
    expect(mail?.text).not.toMatch(/no longer|refused/);
    // The admins are told what it is.
    expect(f.to("ops@clinic.test")[0]?.text).toContain("their calendar was never connected");
  });
});

describe("credentials refused in a way reconnecting cannot fix (a Workspace admin's block of the app)", () => {
  it("the therapist is told it is being fixed, with no reconnect link; the admins get the fix, not 'reconnect'", async () => {
    const f = await fixture([{ id: "th_a", email: "anna@clinic.example" }], oneTarget);
    const hint = "A Google Workspace admin's policy blocks calbridge's access for anna@clinic.example: allow the app.";
    f.blocked("th_a", hint);
    await f.notifier.check();
    expect(f.links).toEqual([]); // no single-use link made that could not help
    const [mail] = f.to("anna@clinic.example");
    expect(mail?.subject).toBe("[unit] Your Google Calendar is no longer updated");
    expect(mail?.text).toContain("reconnecting does not help");
    expect(mail?.text).not.toMatch(/invite=|Open the link/);
    const [admins] = f.to("ops@clinic.test");
    expect(admins?.text).toContain(hint);
    expect(admins?.text).not.toMatch(/reconnect link|invite=/);
  });
});

describe("credentials that stay refused while whether reconnecting helps changes", () => {
  const hint = "A Google Workspace admin's policy blocks calbridge's access for anna@clinic.example: allow the app.";

  it("the admin lifts the block but the grant stays revoked: the therapist gets the link, the admins new advice", async () => {
    const f = await fixture([{ id: "th_a", email: "anna@clinic.example" }], oneTarget);
    f.blocked("th_a", hint);
    await f.notifier.check();
    expect(f.links).toEqual([]);
    expect(f.to("anna@clinic.example")[0]?.text).toContain("reconnecting does not help");
    // The admin allows the app; the probe now gets invalid_grant (the block revoked the token): reconnecting fixes it.
    f.broken("th_a");
    await f.clock.advance(10_000);
    await f.notifier.check();
    // Told once it has lasted VARIANT_HOLD_MS without a break (a probe flipping between the two would never be).
    await f.clock.advance(VARIANT_HOLD_MS - 1_000);
    await f.notifier.check();
    expect(f.mails()).toHaveLength(2);
    await f.clock.advance(1_000);
    await f.notifier.check();
    const anna = f.to("anna@clinic.example");
    expect(anna.map((m) => m.subject)).toEqual([
      "[unit] Your Google Calendar is no longer updated",
      "[unit] Your Google Calendar is still not updated: reconnecting now helps",
    ]);
    expect(f.links).toHaveLength(2); // one each for the admins and for her
    expect(anna[1]?.text).toMatch(/Open the link below to reconnect it\.[\s\S]*invite=\d-for-th_a/);
    const ops = f.to("ops@clinic.test");
    expect(ops.map((m) => m.subject)).toEqual([
      "[unit] Google credentials of th_a stopped working",
      "[unit] Google credentials of th_a still not working: reconnecting now helps",
    ]);
    expect(ops[1]?.text).toContain("(invalid_grant)");
    expect(ops[1]?.text).toContain("Send them the reconnect link below.");
    expect(ops[1]?.text).not.toContain(hint);
    // It stays so: nothing more until it clears.
    for (let i = 0; i < 3; i++) {
      await f.clock.advance(31 * 60_000);
      await f.notifier.check();
    }
    expect(f.mails()).toHaveLength(4);
    f.fixed("th_a");
    await f.notifier.check();
    expect(f.to("ops@clinic.test").at(-1)?.subject).toBe("[unit] Google credentials of th_a work again");
  });

  it("a refusal reconnecting fixes becomes one it cannot: the admins get the fix, the therapist no second link", async () => {
    const f = await fixture([{ id: "th_a", email: "anna@clinic.example" }], oneTarget);
    f.broken("th_a");
    await f.notifier.check();
    expect(f.links).toHaveLength(2); // one each for the admins and for her
    expect(f.to("ops@clinic.test")[0]?.text).toContain("Send them the reconnect link below.");
    // A Workspace admin blocks the app meanwhile: the link sent cannot help any more (told after the hold).
    f.blocked("th_a", hint);
    await f.clock.advance(61_000);
    await f.notifier.check();
    expect(f.mails()).toHaveLength(2);
    await f.clock.advance(VARIANT_HOLD_MS);
    await f.notifier.check();
    const ops = f.to("ops@clinic.test");
    expect(ops.map((m) => m.subject)).toEqual([
      "[unit] Google credentials of th_a stopped working",
      "[unit] Google credentials of th_a still not working: reconnecting does not help",
    ]);
    expect(ops[1]?.text).toContain(hint);
    expect(ops[1]?.text).not.toMatch(/reconnect link|invite=/);
    const anna = f.to("anna@clinic.example");
    expect(anna[1]?.subject).toBe("[unit] Your Google Calendar is still not updated: reconnecting does not help");
    expect(anna[1]?.text).not.toMatch(/invite=|Open the link/);
    expect(f.links).toHaveLength(2);
  });

  it("another reason that does not change whether reconnecting helps sends nothing", async () => {
    const f = await fixture([{ id: "th_a", email: "anna@clinic.example" }], oneTarget);
    f.broken("th_a");
    await f.notifier.check();
    for (const reason of ["unauthorized_client", "invalid_grant", "401"]) {
      f.broken("th_a", reason);
      await f.clock.advance(61_000);
      await f.notifier.check();
    }
    f.blocked("th_b", hint); // not mapped: nothing
    expect(f.mails()).toHaveLength(2);
  });

  it("within the rate limit an update goes out in the summary, counted as changed", async () => {
    const f = await fixture([{ id: "th_a", email: "anna@clinic.example" }, { id: "th_b" }], oneTarget);
    f.broken("th_a");
    f.broken("th_b");
    await f.notifier.check();
    f.blocked("th_a", hint);
    await f.clock.advance(5_000);
    await f.notifier.check();
    await f.clock.advance(VARIANT_HOLD_MS - 15_000);
    // th_b recovers (sent at once: the last message was long ago), then breaks and recovers again; th_a's change is
    // due meanwhile: all three wait for the rate limit.
    for (const next of [() => f.fixed("th_b"), () => f.broken("th_b"), () => f.fixed("th_b"), () => {}]) {
      next();
      await f.clock.advance(5_000);
      await f.notifier.check();
    }
    expect(f.to("ops@clinic.test")).toHaveLength(2);
    await f.clock.advance(60_000);
    await f.notifier.check();
    expect(f.to("ops@clinic.test").at(-1)?.subject).toBe("[unit] 3 changes: 1 new, 1 changed, 1 recovered");
    expect(f.to("anna@clinic.example").at(-1)?.text).toContain("reconnecting does not help");
  });

  it("a state stored by an older build (no variant) is taken as unchanged: nobody is told at the upgrade", async () => {
    const f = await fixture([{ id: "th_a", email: "anna@clinic.example" }], oneTarget);
    f.blocked("th_a", hint);
    await f.notifier.check();
    expect(f.mails()).toHaveLength(2);
    // As an older build stored it.
    const opened = Date.UTC(2026, 10, 23, 8, 0, 0);
    await f.store.table("notify").set("cond:credentials:th_a", { open: true, since: opened });
    f.broken("th_a");
    await f.clock.advance(61_000);
    await f.notifier.check();
    expect(f.mails()).toHaveLength(2);
    expect(await f.store.table("notify").get("cond:credentials:th_a")).toEqual({
      open: true,
      since: opened,
      variant: "reconnect",
    });
    // Recorded: a change after the upgrade is told (once it has lasted the hold).
    f.blocked("th_a", hint);
    await f.clock.advance(61_000);
    await f.notifier.check();
    await f.clock.advance(VARIANT_HOLD_MS);
    await f.notifier.check();
    expect(f.to("ops@clinic.test").at(-1)?.subject).toBe(
      "[unit] Google credentials of th_a still not working: reconnecting does not help",
    );
  });
});

describe("a therapist who leaves the mapping with an alert open", () => {
  it("mapped again, still broken, is told about again (the alert never cleared, and the return was silent)", async () => {
    const f = await fixture(
      [
        { id: "th_a", email: "anna@clinic.example" },
        { id: "th_b", email: "ben@clinic.example" },
      ],
      oneTarget,
    );
    f.broken("th_b");
    await f.notifier.check();
    expect(f.to("ben@clinic.example")).toHaveLength(1);
    expect(f.to("ops@clinic.test")).toHaveLength(1);
    f.reload([{ id: "th_a", email: "anna@clinic.example" }]); // Ben leaves
    await f.clock.advance(120_000);
    await f.notifier.check();
    await f.clock.advance(3 * 86_400_000);
    f.reload([
      { id: "th_a", email: "anna@clinic.example" },
      { id: "th_b", email: "ben@clinic.example" },
    ]); // back, his token still refused
    await f.notifier.check();
    await f.clock.advance(120_000);
    await f.notifier.check();
    expect(f.to("ops@clinic.test").map((m) => m.subject)).toEqual([
      "[unit] Google credentials of th_b stopped working",
      "[unit] Google credentials of th_b stopped working",
    ]);
    expect(f.to("ben@clinic.example")).toHaveLength(2);
  });
});

describe("therapists' own e-mail after a reload", () => {
  it("goes to the address the mapping has now, with the therapist's queue and rate limit carried over", async () => {
    const f = await fixture([{ id: "th_a", email: "anna-old@former.example" }], oneTarget);
    f.broken("th_a");
    await f.notifier.check();
    expect(f.to("anna-old@former.example")).toHaveLength(1); // hers at the time

    // Her address changes; she is fixed 10 s later: the notice waits out her rate limit, then reaches the new address.
    f.reload([{ id: "th_a", email: "anna@clinic.example" }]);
    await f.clock.advance(10_000);
    f.fixed("th_a");
    await f.notifier.check();
    expect(f.to("anna@clinic.example")).toHaveLength(0);
    await f.clock.advance(50_000);
    await f.notifier.check();
    expect(f.to("anna@clinic.example")).toHaveLength(1);
    expect(f.to("anna@clinic.example")[0]!.subject).toBe("[unit] Your Google Calendar is connected again");

    // Broken again: the single-use link goes to the new address only.
    await f.clock.advance(60_000);
    f.broken("th_a");
    await f.notifier.check();
    expect(f.to("anna@clinic.example")).toHaveLength(2);
    expect(f.to("anna@clinic.example")[1]!.text).toMatch(/invite=\d+-for-th_a/);
    expect(f.to("anna-old@former.example")).toHaveLength(1); // the first message only
  });

  it("reaches a therapist the reload added, and not one it removed or whose address it removed", async () => {
    const f = await fixture(
      [
        { id: "th_a", email: "anna@clinic.example" },
        { id: "th_b", email: "ben@clinic.example" },
      ],
      oneTarget,
    );
    f.broken("th_b");
    f.broken("th_a");
    await f.notifier.check();
    expect(f.to("ben@clinic.example")).toHaveLength(1);
    expect(f.to("anna@clinic.example")).toHaveLength(1);

    // Within their rate limit both are fixed (notices queued for them), then the reload removes Ben and Anna's
    // address, and adds Cleo, whose credentials are broken.
    await f.clock.advance(10_000);
    f.fixed("th_b");
    f.fixed("th_a");
    await f.notifier.check();
    f.reload([{ id: "th_a" }, { id: "th_c", email: "cleo@clinic.example" }]);
    f.broken("th_c");
    await f.clock.advance(60_000);
    await f.notifier.check();
    expect(f.to("cleo@clinic.example")).toHaveLength(1);
    expect(f.to("cleo@clinic.example")[0]!.text).toContain("invite=");
    expect(f.to("ben@clinic.example")).toHaveLength(1);
    expect(f.to("anna@clinic.example")).toHaveLength(1);
  });
});

describe("two e-mail targets with therapists: true", () => {
  it("write to a therapist once, through the first of them, with one link; each target's admins still hear", async () => {
    const f = await fixture([{ id: "th_a", email: "anna@clinic.example" }], (sinks) => [
      emailTarget("ops", sinks[0]!, "ops@clinic.test", true),
      emailTarget("owners", sinks[1]!, "owner@clinic.test", true),
    ]);
    f.broken("th_a");
    await f.notifier.check();
    const anna = f.to("anna@clinic.example");
    expect(anna).toHaveLength(1);
    expect(f.sinks[0]!.mails.filter((m) => m.to.includes("anna@clinic.example"))).toHaveLength(1);
    expect(f.to("ops@clinic.test")).toHaveLength(1);
    expect(f.to("owner@clinic.test")).toHaveLength(1);
    // Three messages, three links: no live link sits in a message nobody reads.
    expect(f.links).toHaveLength(3);

    // Her rate limit is one: fixed within it, she hears once it is over, once.
    await f.clock.advance(10_000);
    f.fixed("th_a");
    await f.notifier.check();
    expect(f.to("anna@clinic.example")).toHaveLength(1);
    await f.clock.advance(60_000);
    await f.notifier.check();
    expect(f.to("anna@clinic.example")).toHaveLength(2);
  });
});
