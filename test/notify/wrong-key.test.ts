// A deploy with a wrong store.encryption_key (mistyped, or the old key dropped too early during a rotation): an OAuth
// therapist's stored refresh token no longer decrypts. Google refused nothing, and the fix is the key (README "A lost
// or wrong key"). The real daemon against the simulators, delivering to a real SMTP server on 127.0.0.1: the admins
// are told the key (credentials_key), the therapist is told nothing and no reconnect link is made, /status offers no
// reconnect link but says the key; once the daemon runs with the right key, the admins hear it is readable again and
// the therapist still hears nothing.
import { afterEach, describe, expect, it } from "vitest";
import { ManualClock } from "../../src/clock.ts";
import { type App, createApp } from "../../src/daemon/app.ts";
import { renderStatusHtml } from "../../src/daemon/status-page.ts";
import { silentLogger } from "../../src/log.ts";
import { daemonView } from "../../src/notify/view.ts";
import { startWorld, type World } from "../../src/simulator/world.ts";
import { CredentialDecryptError, CredentialStore, SecretBox, SecretDecryptError } from "../../src/store/secrets.ts";
import { openStore } from "../../src/store/store.ts";
import { type MailSink, SMTP_PASS, SMTP_USER, startMailSink } from "./support.ts";

const KEY_A = "key-a-0123456789abcdef0123456789abcdef";
const KEY_WRONG = "key-w-fedcba9876543210fedcba9876543210";

const cleanups: (() => Promise<void>)[] = [];
afterEach(async () => {
  for (const c of cleanups.splice(0).reverse()) await c().catch(() => {});
});

describe("a stored token that store.encryption_key does not open", () => {
  it("is the admins' to fix: the key is named, the therapist is not told, no reconnect link is made", async () => {
    const mail: MailSink = await startMailSink();
    cleanups.push(mail.close);
    const world: World = await startWorld({
      therapists: ["th_anna", "th_ben"],
      configure: (c) => {
        c.google.oauth = { client_id: "placeholder", client_secret: "placeholder-secret" };
        c.store = { ...c.store, encryption_key: KEY_A, previous_encryption_keys: [] };
        const ben = c.therapists.find((t) => t.therapist_id === "th_ben")!;
        ben.auth = { type: "oauth" };
        ben.name = "Ben";
        ben.email = "ben@clinic.example";
        c.notify = {
          label: "clinic",
          targets: [
            {
              type: "email",
              name: "mail",
              smtp: { host: "127.0.0.1", port: mail.port, auth: { user: SMTP_USER, pass: SMTP_PASS } },
              from: "calbridge@clinic.test",
              to: ["ops@clinic.test"],
              therapists: true,
            },
          ],
        };
      },
    });
    cleanups.push(() => world.close());
    const client = world.google.registerOAuthClient();
    world.config.google.oauth = client;
    const store = await openStore(world.config.store.url);
    await new CredentialStore({ store, box: new SecretBox(KEY_A) }).saveRefreshToken(
      "th_ben",
      world.google.issueRefreshToken(world.calendarOf("th_ben"), client.client_id),
    );
    await store.close();
    world.booking.create(
      { therapist_id: "th_ben", start_time: new Date(Date.now() + 86_400_000).toISOString() },
      { force: true },
    );

    const links: string[] = [];
    const daemon = async (key: string, now: number): Promise<{ app: App; clock: ManualClock }> => {
      world.config.store.encryption_key = key;
      const clock = new ManualClock(now);
      const app = await createApp(world.config, {
        clock,
        logger: silentLogger,
        oneShot: true,
        listen: "127.0.0.1:0",
        reconnectLink: async (id) => {
          const link = `https://sync.clinic.example/connect?invite=${links.length + 1}-for-${id}`;
          links.push(link);
          return link;
        },
      });
      cleanups.push(() => app.stop(1000));
      await app.start();
      return { app, clock };
    };
    const toBen = () => mail.mails.filter((m) => m.to.includes("ben@clinic.example"));
    const toOps = () => mail.mails.filter((m) => m.to.includes("ops@clinic.test"));

    // The deploy carries a mistyped key.
    const wrong = await daemon(KEY_WRONG, Date.now());
    const ben = (await wrong.app.status()).therapists.find((t) => t.therapistId === "th_ben")!;
    expect(ben.credentials.ok).toBe(false);
    expect(ben.credentials.detail).toMatch(/cannot be decrypted/);
    expect(ben.credentials.reconnect).toBeUndefined();
    expect(ben.credentials.hint).toMatch(/^set store\.encryption_key to the key .*store\.previous_encryption_keys/);
    const html = renderStatusHtml(await wrong.app.status());
    expect(html).not.toContain("Needs a reconnect link");
    expect(html).toContain("<b>Fix:</b> set store.encryption_key");

    await wrong.app.notifier.check();
    await wrong.clock.advance(120_000);
    await wrong.app.notifier.check();
    expect(toOps()).toHaveLength(1);
    expect(toOps()[0]!.subject).toBe("[clinic] The stored Google credentials of Ben (th_ben) cannot be decrypted");
    expect(toOps()[0]!.text).toContain("Google refused nothing, and the therapist is not told.");
    expect(toOps()[0]!.text).toContain(
      "Set store.encryption_key to the key it was stored with (after a rotation, list the old key in " +
        "store.previous_encryption_keys) and restart calbridge; only if that key is lost, have them reconnect " +
        "(`calbridge authorize --therapist th_ben`).",
    );
    expect(toOps()[0]!.text).not.toMatch(/Google refused calbridge|reconnect link/);
    expect(toBen()).toEqual([]);
    expect(links).toEqual([]);
    await wrong.app.stop(1000);

    // Restarted with the key the token was stored with: it opens, Ben's calendar is mirrored, the admins hear it.
    const right = await daemon(KEY_A, Date.now() + 600_000);
    await right.app.reconcile();
    expect(world.google.events(world.calendarOf("th_ben")).filter((e) => e.status === "confirmed")).toHaveLength(1);
    await right.app.notifier.check();
    expect(toOps()).toHaveLength(2);
    expect(toOps()[1]!.subject).toBe("[clinic] The stored Google credentials of Ben (th_ben) can be read again");
    // Ben was told nothing broke, so nothing recovered either.
    expect(toBen()).toEqual([]);
    expect(links).toEqual([]);
  }, 60_000);
});

describe("the reason a therapist's credentials could not be loaded", () => {
  it("is the key for a token sealed under another key or with no key set; a damaged one stays unusable", async () => {
    const world = await startWorld({ therapists: ["th_a", "th_b", "th_c", "th_d"] });
    cleanups.push(() => world.close());
    const decrypt = (id: string, reason: "no_key" | "unknown_key" | "damaged") =>
      new CredentialDecryptError(id, new SecretDecryptError(reason, "does not open", "k1")).message;
    const view = daemonView({
      config: world.config,
      calendars: new Map(),
      credentialErrors: new Map([
        ["th_a", decrypt("th_a", "no_key")],
        ["th_b", decrypt("th_b", "unknown_key")],
        ["th_c", decrypt("th_c", "damaged")],
        ["th_d", "not connected yet: no OAuth refresh token; run `calbridge authorize --therapist th_d`"],
      ]),
      deadLetters: () => 0,
    })();
    expect(view.therapists.map((t) => [t.id, t.credentials, t.reason])).toEqual([
      ["th_a", "setup", "key"],
      ["th_b", "setup", "key"],
      ["th_c", "setup", "unusable"],
      ["th_d", "setup", "not_connected"],
    ]);
  });
});
