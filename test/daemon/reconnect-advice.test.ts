// The advice for an OAuth therapist whose token Google refuses follows the configuration, in /status (reconnect and
// hint) and in the admins' notification alike: a token given in the file (therapists[].auth.refresh_token) wins over a
// connected one, so `calbridge invite` refuses that therapist and `calbridge authorize` would store a token never used:
// the fix is a new token in the file (no reconnect command). Without `connect`, the hint names `calbridge authorize`,
// not `calbridge invite` (which exits 2 then). The real daemon against the simulators, mail to a real SMTP server.
import { afterEach, describe, expect, it } from "vitest";
import { ManualClock } from "../../src/clock.ts";
import type { ConfigInput } from "../../src/config/schema.ts";
import { createApp } from "../../src/daemon/app.ts";
import { renderStatusHtml } from "../../src/daemon/status-page.ts";
import { silentLogger } from "../../src/log.ts";
import { startWorld } from "../../src/simulator/world.ts";
import { CredentialStore, SecretBox } from "../../src/store/secrets.ts";
import { openStore } from "../../src/store/store.ts";
import { type MailSink, SMTP_PASS, SMTP_USER, startMailSink } from "../notify/support.ts";

const KEY = "key-a-0123456789abcdef0123456789abcdef";
/** A refresh token Google does not know (any more): its token endpoint answers invalid_grant, as for a revoked one. */
const DEAD_TOKEN = "1//revoked-refresh-token";

const cleanups: (() => Promise<void>)[] = [];
afterEach(async () => {
  for (const c of cleanups.splice(0).reverse()) await c().catch(() => {});
});

/** The daemon with Ben on OAuth and a token Google refuses (in the file or in the store); his status and the mail. */
async function refused(options: { inFile: boolean; connect: boolean }) {
  const mail: MailSink = await startMailSink();
  cleanups.push(mail.close);
  const world = await startWorld({
    therapists: ["th_anna", "th_ben"],
    configure: (c: ConfigInput) => {
      c.google.oauth = { client_id: "placeholder", client_secret: "placeholder-secret" };
      c.store = { ...c.store, encryption_key: KEY };
      if (options.connect) {
        c.connect = {
          public_url: "https://sync.clinic.example",
          secret: "connect-secret-for-tests-0123456789abcdef",
          clinic_name: "Praxis",
        };
      }
      const ben = c.therapists.find((t) => t.therapist_id === "th_ben")!;
      ben.auth = options.inFile ? { type: "oauth", refresh_token: DEAD_TOKEN } : { type: "oauth" };
      ben.name = "Ben";
      c.notify = {
        label: "clinic",
        targets: [
          {
            type: "email",
            name: "mail",
            smtp: { host: "127.0.0.1", port: mail.port, auth: { user: SMTP_USER, pass: SMTP_PASS } },
            from: "calbridge@clinic.test",
            to: ["ops@clinic.test"],
          },
        ],
      };
    },
  });
  cleanups.push(() => world.close());
  world.config.google.oauth = world.google.registerOAuthClient();
  if (!options.inFile) {
    const store = await openStore(world.config.store.url);
    await new CredentialStore({ store, box: new SecretBox(KEY) }).saveRefreshToken("th_ben", DEAD_TOKEN);
    await store.close();
  }
  const clock = new ManualClock(Date.now());
  const app = await createApp(world.config, { clock, logger: silentLogger, oneShot: true, listen: "127.0.0.1:0" });
  cleanups.push(() => app.stop(1000));
  await app.start();
  await app.calendars
    .get("th_ben")
    ?.checkAccess()
    .catch(() => {});
  const snapshot = await app.status();
  const ben = snapshot.therapists.find((t) => t.therapistId === "th_ben")!;
  await app.notifier.check();
  await clock.advance(120_000);
  await app.notifier.check();
  const told = mail.mails.filter((m) => /Google credentials of Ben \(th_ben\) stopped working/.test(m.subject));
  return { credentials: ben.credentials, html: renderStatusHtml(snapshot), told };
}

describe("the reconnect advice for an OAuth therapist whose token Google refuses", () => {
  it("with the token given in the file: no reconnect command; the hint and the message say to replace it there", async () => {
    const { credentials, html, told } = await refused({ inFile: true, connect: true });
    expect(credentials).toMatchObject({ ok: false, reason: "invalid_grant" });
    // `calbridge invite --therapist th_ben` exits 2 for him ("has auth.refresh_token in the configuration").
    expect(credentials.reconnect).toBeUndefined();
    expect(html).not.toContain("Needs a reconnect link");
    expect(credentials.hint).toContain(
      "Their refresh token is given in the configuration file, and it wins over a connected one: replace " +
        "therapists[].auth.refresh_token of th_ben there with a new token and reload (SIGHUP), or remove it from the " +
        "file, reload, and send them a new link from `calbridge invite`",
    );
    expect(credentials.hint).not.toContain("calbridge invite --therapist");
    expect(told).toHaveLength(1);
    expect(told[0]!.text).toContain("replace therapists[].auth.refresh_token of th_ben there with a new token");
    // `calbridge authorize` alone would store a token that the one in the file overrides.
    expect(told[0]!.text).not.toMatch(/Reconnect their calendar|calbridge authorize --therapist th_ben`\)/);
    expect(told[0]!.text).not.toContain("https://sync.clinic.example/connect");
  });

  it("with the token given in the file and no connect: the way back after removing it is `calbridge authorize`", async () => {
    const { credentials, told } = await refused({ inFile: true, connect: false });
    expect(credentials.reconnect).toBeUndefined();
    expect(credentials.hint).toContain("replace therapists[].auth.refresh_token of th_ben there with a new token");
    expect(credentials.hint).toContain("run `calbridge authorize --therapist th_ben` on a machine with a browser");
    expect(credentials.hint).not.toContain("calbridge invite");
    expect(told[0]!.text).toContain("replace therapists[].auth.refresh_token of th_ben there with a new token");
  });

  it("with a stored token and no connect: the reconnect command and the hint name `calbridge authorize`", async () => {
    const { credentials, told } = await refused({ inFile: false, connect: false });
    expect(credentials).toMatchObject({ ok: false, reason: "invalid_grant" });
    expect(credentials.reconnect).toBe("calbridge authorize --therapist th_ben");
    // `calbridge invite` exits 2 without connect ("connect ... is not configured").
    expect(credentials.hint).toContain(
      "Reconnect the therapist's Google account: run `calbridge authorize --therapist th_ben` on a machine with a browser",
    );
    expect(credentials.hint).not.toContain("calbridge invite");
    expect(told[0]!.text).toContain("run `calbridge authorize --therapist th_ben` on a machine with a browser");
  });

  it("with a stored token and connect: the reconnect command is `calbridge invite`, the message carries a link", async () => {
    const { credentials, told } = await refused({ inFile: false, connect: true });
    expect(credentials.reconnect).toBe("calbridge invite --therapist th_ben");
    expect(credentials.hint).toContain("`calbridge invite --therapist th_ben` prints a link to send them");
    expect(told[0]!.text).toContain("Send them the reconnect link below.");
    expect(told[0]!.text).toContain("https://sync.clinic.example/connect?invite=");
  });
});
