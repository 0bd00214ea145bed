// Tests `calbridge doctor` through main(argv) against a simulated world: every check ok on a healthy setup (exit 0),
// and a loud failure with its fix-it hint (exit 1) for a disabled webhook endpoint, a missing one, a refused API key,
// a calendar without access and an unreachable store; --json is machine-readable. The store check is /readyz's (a
// store refusing writes, a folder short of store.min_free_mb fail it), a missing SQLite file is not created, and an
// OAuth token the configured key does not open is a key to fix, not a therapist to reconnect.
import { existsSync } from "node:fs";
import { join } from "node:path";
import { afterEach, describe, expect, it } from "vitest";
import type { Check } from "../../src/cli/doctor.ts";
import type { Config } from "../../src/config/schema.ts";
import { startWorld, WORLD_WEBHOOK_SECRET, type World } from "../../src/simulator/world.ts";
import { CredentialStore, SecretBox } from "../../src/store/secrets.ts";
import { openStore } from "../../src/store/store.ts";
import { SMTP_PASS, SMTP_USER, startHookSink, startMailSink } from "../notify/support.ts";
import { redisTestsEnabled, startRedis } from "../support/redis.ts";
import { runCli, writeConfig } from "./support.ts";

const DAY = 86_400_000;
const PUBLIC_URL = "https://sync.example/webhooks/booking";
const APPOINTMENT_EVENTS = ["appointment.created", "appointment.updated", "appointment.cancelled"];

const worlds: World[] = [];
afterEach(async () => {
  for (const w of worlds.splice(0)) await w.close();
});

/** A world whose booking service delivers to PUBLIC_URL, and the config file that says so. */
async function healthy(
  edit: (c: Config) => void = () => {},
): Promise<{ world: World; file: string; endpointId: string }> {
  const world = await startWorld({ therapists: ["th_anna", "th_ben"] });
  worlds.push(world);
  // Each mapped therapist has bookings (the therapist id check looks for them).
  const now = Date.now();
  for (const t of world.therapists)
    world.booking.seed({ therapists: [t], count: 2, from: now + DAY, to: now + 5 * DAY });
  const endpoint = world.booking.addWebhookEndpoint({
    url: PUBLIC_URL,
    secret: WORLD_WEBHOOK_SECRET,
    events: [...APPOINTMENT_EVENTS, "appointment.completed", "appointment.no_show"],
  });
  const file = writeConfig(world, (c) => {
    c.webhooks.public_url = PUBLIC_URL;
    edit(c);
  });
  // The daemon has run: its store is there (doctor does not create a missing one).
  await (await openStore(world.config.store.url)).close();
  return { world, file, endpointId: endpoint.id };
}

async function doctorJson(file: string): Promise<{ code: number; ok: boolean; checks: Check[] }> {
  const r = await runCli("doctor", "--json", "--config", file);
  const parsed = JSON.parse(r.stdout) as { ok: boolean; checks: Check[] };
  return { code: r.code, ...parsed };
}

const byName = (checks: Check[], prefix: string) => checks.filter((c) => c.name.startsWith(prefix));

describe("calbridge doctor", () => {
  it("passes every check on a healthy setup: one line per check, exit 0", async () => {
    const { file } = await healthy();
    const r = await runCli("doctor", "--config", file);
    expect(r.code, r.stdout + r.stderr).toBe(0);
    const lines = r.stdout.trimEnd().split("\n");
    expect(lines.map((l) => l.replace(/:.*$/, ""))).toEqual([
      "ok   booking API key",
      "ok   webhook endpoint",
      "ok   therapist ids",
      "ok   calendar of th_anna",
      "ok   calendar of th_ben",
      "ok   mapping",
      "ok   store",
      "ok   clock",
      "ok   write-backs",
    ]);
    expect(r.stdout).toContain(`${PUBLIC_URL} is registered and enabled`);
    expect(r.stdout).not.toMatch(/fix:|WARN|FAIL/);

    const json = await doctorJson(file);
    expect(json.code).toBe(0);
    expect(json.ok).toBe(true);
    expect(json.checks.map((c) => [c.name, c.status])).toEqual([
      ["booking API key", "ok"],
      ["webhook endpoint", "ok"],
      ["therapist ids", "ok"],
      ["calendar of th_anna", "ok"],
      ["calendar of th_ben", "ok"],
      ["mapping", "ok"],
      ["store", "ok"],
      ["clock", "ok"],
      ["write-backs", "ok"],
    ]);
  });

  it("fails loudly when the booking service disabled the endpoint after failed deliveries", async () => {
    const { world, file, endpointId } = await healthy();
    world.booking.setWebhookEndpointEnabled(endpointId, false);
    const r = await runCli("doctor", "--config", file);
    expect(r.code).toBe(1);
    expect(r.stdout).toMatch(
      /^FAIL webhook endpoint: the endpoint https:\/\/sync\.example\/webhooks\/booking is DISABLED/m,
    );
    expect(r.stdout).toMatch(/^ {5}fix: .*re-enable the endpoint in Settings > Webhooks$/m);

    const json = await doctorJson(file);
    expect(json).toMatchObject({ code: 1, ok: false });
    const [check] = byName(json.checks, "webhook endpoint");
    expect(check).toMatchObject({ status: "fail", detail: expect.stringContaining("DISABLED") });
    expect(check?.fix).toMatch(/re-enable/);
    // Everything else is still fine, and says so.
    expect(json.checks.filter((c) => c.status !== "ok").map((c) => c.name)).toEqual(["webhook endpoint"]);
  });

  it("fails when no endpoint delivers to webhooks.public_url, and warns when it misses appointment events", async () => {
    const missing = await healthy((c) => {
      c.webhooks.public_url = "https://elsewhere.example/webhooks/booking";
    });
    const none = await doctorJson(missing.file);
    expect(none.code).toBe(1);
    expect(byName(none.checks, "webhook endpoint")[0]).toMatchObject({
      status: "fail",
      detail: "no endpoint for https://elsewhere.example/webhooks/booking in GET /v1/webhooks",
      fix: expect.stringContaining("Settings > Webhooks"),
    });

    const partial = await healthy();
    partial.world.booking.removeWebhookEndpoint(partial.endpointId);
    partial.world.booking.addWebhookEndpoint({
      url: PUBLIC_URL,
      secret: WORLD_WEBHOOK_SECRET,
      events: ["appointment.created"],
    });
    const warned = await doctorJson(partial.file);
    expect(byName(warned.checks, "webhook endpoint")[0]).toMatchObject({
      status: "warn",
      detail: expect.stringContaining("not subscribed to appointment.updated, appointment.cancelled"),
    });
    expect(warned.code).toBe(0); // a warning is not a failure
  });

  it("names the API key as the problem when the booking service refuses it", async () => {
    const { file } = await healthy((c) => {
      c.booking.api_key = "sk_test_wrong_key_000000";
    });
    const r = await runCli("doctor", "--config", file);
    expect(r.code).toBe(1);
    expect(r.stdout).toMatch(/^FAIL booking API key: /m);
    expect(r.stdout).toMatch(
      /^ {5}fix: the key was refused: create one under Settings > API and set booking\.api_key/m,
    );
    expect(r.stdout).not.toContain("sk_test_wrong_key_000000");
    expect(r.stdout).toMatch(/^ {5}fix: the endpoints are listed with the same API key: fix booking\.api_key first$/m);
    const json = await doctorJson(file);
    expect(byName(json.checks, "booking API key")[0]?.status).toBe("fail");
    // The calendars do not depend on the booking key.
    expect(byName(json.checks, "calendar of").map((c) => c.status)).toEqual(["ok", "ok"]);
  });

  it("fails a calendar the credentials cannot reach, with the sharing hint", async () => {
    const { file } = await healthy((c) => {
      c.therapists[1]!.calendar_id = "nobody@clinic.test";
    });
    const json = await doctorJson(file);
    expect(json.code).toBe(1);
    const [anna, ben] = byName(json.checks, "calendar of");
    expect(anna?.status).toBe("ok");
    expect(ben).toMatchObject({ name: "calendar of th_ben", status: "fail" });
    expect(ben?.fix).toMatch(/^share nobody@clinic\.test with the service account/);
  });

  it("warns when the templates show customer details on a calendar that others see the details of (Google's ACL)", async () => {
    const { world, file } = await healthy();
    const anna = world.calendarOf("th_anna");
    // Anna's calendar is public with "See all event details" and shared with the whole domain as editors; Ben's is
    // public with "See only free/busy" (nobody sees details): only Anna's gets a line.
    world.google.shareCalendarWith(anna, { type: "default" }, "reader");
    world.google.shareCalendarWith(anna, { type: "domain", value: "clinic.test" }, "writer");
    world.google.shareCalendarWith(world.calendarOf("th_ben"), { type: "default" }, "freeBusyReader");
    const r = await runCli("doctor", "--config", file);
    expect(r.code, r.stdout).toBe(0); // a warning, not a failure
    const lines = r.stdout.trimEnd().split("\n");
    const at = lines.findIndex((l) => l.startsWith("WARN calendar sharing of th_anna: "));
    expect(at, r.stdout).toBeGreaterThan(lines.indexOf(lines.find((l) => l.startsWith("ok   calendar of th_ben"))!));
    expect(lines[at]).toContain("the event templates show customer details ({customer_name}, {notes})");
    expect(lines[at]).toContain("the public");
    expect(lines[at]).toContain("everyone in clinic.test (writer)");
    expect(lines[at + 1]).toMatch(/^ {5}fix: .*event\.preset initials or booking_only/);
    expect(r.stdout).not.toContain("sharing of th_ben");

    // A template without customer details: nothing to say, whoever sees the calendar.
    const quiet = writeConfig(world, (c) => {
      c.webhooks.public_url = PUBLIC_URL;
      c.event = { ...c.event, preset: "booking_only" };
    });
    const json = await doctorJson(quiet);
    expect(byName(json.checks, "calendar sharing")).toEqual([]);
  });

  it("counts an OAuth therapist's own account on a calendar of theirs as theirs, and a colleague as someone else", async () => {
    // Ben connected his own Google account and syncs into a second calendar he made, "Sessions". Its ACL names him as
    // owner: without an email in the mapping, that rule was counted as someone else ("1 person with writer or owner
    // access"), a false alarm about patients' details that only Ben sees.
    const { world } = await healthy();
    const ben = "ben@personal.test";
    const sessions = "sessions-ben@group.calendar.google.com";
    world.google.createCalendar(sessions, ben, { summary: "Sessions", timeZone: "Europe/Berlin" });
    const client = world.google.registerOAuthClient();
    const file = writeConfig(world, (c) => {
      c.webhooks.public_url = PUBLIC_URL;
      c.google.oauth = client;
      c.therapists[1] = {
        therapist_id: "th_ben",
        calendar_id: sessions,
        timezone: "Europe/Berlin",
        auth: { type: "oauth", refresh_token: world.google.issueRefreshToken(ben, client.client_id) },
      };
    });
    expect(byName((await doctorJson(file)).checks, "calendar sharing of th_ben")).toEqual([]);
    // A colleague with write access sees the details: that one is said.
    world.google.shareCalendar(sessions, "colleague@clinic.test", "writer");
    const [warning] = byName((await doctorJson(file)).checks, "calendar sharing of th_ben");
    expect(warning?.detail).toContain("1 person with writer or owner access");
  });

  it("says nothing of the sharing of a calendar it cannot reach (its failure says enough)", async () => {
    const { world, file } = await healthy((c) => {
      c.therapists[1]!.calendar_id = "nobody@clinic.test";
    });
    world.google.shareCalendarWith(world.calendarOf("th_anna"), { type: "default" }, "reader");
    const json = await doctorJson(file);
    expect(byName(json.checks, "calendar of").map((c) => c.status)).toEqual(["ok", "fail"]);
    expect(byName(json.checks, "calendar sharing").map((c) => c.name)).toEqual(["calendar sharing of th_anna"]);
  });

  it("fails an unreachable store with its hint, still runs the other checks, and hides Redis credentials", async () => {
    const { file } = await healthy((c) => {
      c.store.url = "redis://calbridge:hunter2secret@127.0.0.1:9"; // nothing listens on the discard port
    });
    const r = await runCli("doctor", "--config", file);
    expect(r.code).toBe(1);
    expect(r.stdout).toMatch(
      /^FAIL store: store: Redis at redis:\/\/\*\*\*@127\.0\.0\.1:9 did not answer within 5000 ms \(.*ECONNREFUSED.*\)$/m,
    );
    expect(r.stdout).toMatch(/^ {5}fix: check store\.url and that the folder or Redis is reachable and writable$/m);
    expect(r.stdout).toMatch(/^ok {3}booking API key: /m);
    expect(r.stdout).toMatch(/^ok {3}calendar of th_ben: /m);
    // What only the store can tell is not told from an empty stand-in ("all events in place", "none held").
    expect(r.stdout).toMatch(/^WARN mapping: not checked: the store could not be opened/m);
    expect(r.stdout).toMatch(/^WARN write-backs: not checked: the store could not be opened/m);
    expect(`${r.stdout}${r.stderr}`).not.toContain("hunter2secret");
  }, 20_000);

  it("--notify-test sends a test message to every notification target and fails one that refuses it", async () => {
    const mail = await startMailSink();
    const hook = await startHookSink();
    try {
      const { file } = await healthy((c) => {
        c.notify.targets = [
          { type: "webhook", name: "chat", url: hook.url, format: "slack" },
          {
            type: "email",
            name: "ops-mail",
            smtp: { host: "127.0.0.1", port: mail.port, secure: false, auth: { user: SMTP_USER, pass: SMTP_PASS } },
            from: "calbridge@clinic.test",
            to: ["ops@clinic.test"],
            therapists: false,
          },
        ];
      });
      const r = await runCli("doctor", "--notify-test", "--config", file);
      expect(r.code, r.stdout + r.stderr).toBe(0);
      expect(r.stdout).toMatch(/^ok {3}notify chat: test message sent; check that it arrived$/m);
      expect(r.stdout).toMatch(/^ok {3}notify ops-mail: test message sent; check that it arrived$/m);
      expect(hook.posts.map((p) => String(p.body.text))).toEqual([
        expect.stringMatching(/^\*\[calbridge\] Test notification\*\nThis is a test message from `calbridge doctor/),
      ]);
      expect(mail.mails.map((m) => m.subject)).toEqual(["[calbridge] Test notification"]);

      hook.failNext(1, 404);
      const json = await runCli("doctor", "--json", "--notify-test", "--config", file);
      expect(json.code).toBe(1);
      const checks = (JSON.parse(json.stdout) as { checks: Check[] }).checks;
      expect(byName(checks, "notify")).toEqual([
        {
          name: "notify chat",
          status: "fail",
          detail: "target chat: HTTP 404 invalid_payload",
          fix: "check the address, credentials and format of notify target chat",
        },
        { name: "notify ops-mail", status: "ok", detail: "test message sent; check that it arrived" },
      ]);
      // Without the flag nothing is sent.
      expect((await runCli("doctor", "--config", file)).code).toBe(0);
      expect(mail.mails).toHaveLength(2);
      expect(json.stdout).not.toContain("secret-token");
    } finally {
      await mail.close();
      await hook.close();
    }
  });
});

describe("calbridge doctor: the store, as /readyz sees it", () => {
  const storeCheck = (checks: Check[]) => checks.find((c) => c.name === "store");

  it("says how much room the store's folder has, and fails it below store.min_free_mb", async () => {
    const ok = await healthy();
    const good = storeCheck((await doctorJson(ok.file)).checks);
    expect(good?.status).toBe("ok");
    expect(good?.detail).toMatch(/^sqlite answers and takes a write \(sqlite:\/\/.*\); \d+ MiB free in \//);

    const { file } = await healthy((c) => {
      c.store.min_free_mb = 1_000_000_000; // a petabyte: more than any test machine has
    });
    const json = await doctorJson(file);
    expect(json.code).toBe(1);
    expect(storeCheck(json.checks)).toMatchObject({
      status: "fail",
      detail: expect.stringMatching(
        /MiB free in \/.*, below store\.min_free_mb \(1000000000 MiB\): writes will soon fail$/,
      ),
      fix: expect.stringMatching(
        /^free space on the volume of \/.* \(or grow it\), or lower store\.min_free_mb; .*503/,
      ),
    });
  });

  it.skipIf(!redisTestsEnabled("doctor"))(
    "fails a store that answers but refuses writes (Redis over its maxmemory), with the write probe's detail and a fix",
    async () => {
      const server = await startRedis(["--maxmemory", "1", "--maxmemory-policy", "noeviction"]);
      try {
        const { file } = await healthy((c) => {
          c.store.url = server.url;
        });
        const json = await doctorJson(file);
        expect(json.code).toBe(1);
        expect(storeCheck(json.checks)).toMatchObject({
          status: "fail",
          detail: expect.stringMatching(
            /^redis answers but store refuses writes: .*OOM.* \(redis:\/\/127\.0\.0\.1:\d+\)$/,
          ),
          fix: expect.stringMatching(/^Redis refuses writes: look at its maxmemory and maxmemory-policy/),
        });
      } finally {
        await server.stop();
      }
    },
    30_000,
  );

  it("does not create a missing SQLite store: a warning naming the path, and nothing read from an empty stand-in", async () => {
    const { world } = await healthy();
    const missing = join(world.dir, "elsewhere", "calbridge.sqlite");
    const elsewhere = writeConfig(
      world,
      (c) => {
        c.webhooks.public_url = PUBLIC_URL;
        c.store.url = `sqlite://${missing}`;
      },
      "elsewhere.yaml",
    );
    const json = await doctorJson(elsewhere);
    expect(storeCheck(json.checks)).toMatchObject({
      status: "warn",
      detail: expect.stringMatching(new RegExp(`^store: no SQLite store at ${missing}; nothing was created`)),
      fix: expect.stringMatching(
        /^if the daemon has not run yet, nothing to do: it creates the store at its first start/,
      ),
    });
    expect(byName(json.checks, "mapping")[0]?.detail).toMatch(/^not checked: the store could not be opened/);
    expect(byName(json.checks, "write-backs")[0]?.detail).toMatch(/^not checked: the store could not be opened/);
    expect(existsSync(join(world.dir, "elsewhere"))).toBe(false);
  });
});

describe("calbridge doctor: OAuth therapists without usable credentials", () => {
  const KEY = "doctor-test-key-0123456789abcdef0123";
  const OTHER_KEY = "doctor-other-key-fedcba9876543210fedc";

  it("a token the configured key does not open: the fix is store.encryption_key; no token: connect the calendar", async () => {
    const world = await startWorld({
      therapists: ["th_anna", "th_ben", "th_cleo"],
      configure: (c) => {
        c.google.oauth = { client_id: "placeholder", client_secret: "placeholder-secret" };
        c.store = { ...c.store, encryption_key: KEY };
        for (const t of c.therapists) if (t.therapist_id !== "th_anna") t.auth = { type: "oauth" };
      },
    });
    worlds.push(world);
    const client = world.google.registerOAuthClient();
    world.config.google.oauth = client;
    // th_ben connected under KEY; th_cleo never did.
    const store = await openStore(world.config.store.url);
    try {
      await new CredentialStore({ store, box: new SecretBox(KEY) }).saveRefreshToken(
        "th_ben",
        world.google.issueRefreshToken(world.calendarOf("th_ben"), client.client_id),
      );
    } finally {
      await store.close();
    }
    const right = await doctorJson(writeConfig(world, () => {}, "right.yaml"));
    expect(byName(right.checks, "calendar of th_ben")[0]?.status).toBe("ok");

    // A deploy carries another key.
    const wrong = await doctorJson(
      writeConfig(world, (c) => {
        c.store.encryption_key = OTHER_KEY;
      }),
    );
    const ben = byName(wrong.checks, "calendar of th_ben")[0];
    expect(ben?.status).toBe("fail");
    expect(ben?.detail).toMatch(/cannot be decrypted/);
    expect(ben?.fix).toBe(
      "the stored token was encrypted with another key: set store.encryption_key to the key it was stored with (after a rotation, list that key in store.previous_encryption_keys); only if that key is lost, have the therapist reconnect: run `calbridge authorize --therapist th_ben`",
    );
    expect(byName(wrong.checks, "calendar of th_cleo")[0]?.fix).toBe(
      "the therapist has not connected their calendar yet: run `calbridge authorize --therapist th_cleo`",
    );
  });
});
