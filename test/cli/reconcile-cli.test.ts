// `calbridge reconcile` and `writeback held` as an ops person runs them (real processes): a dry run refuses a SQLite
// store that is not there (it would create an empty one and plan to adopt every event) while a real first run creates
// it and says where; a calendar that could not be listed fails a dry run as it fails the real run, and the output never
// says calendars and bookings agree when one was not listed; `writeback held --therapist` with an id that is neither
// configured nor held is a usage error. The read-only commands (doctor, the dry runs) run with a rotated key
// never seal the stored tokens again under it: the running daemon may not have that key yet.
import { existsSync } from "node:fs";
import { join } from "node:path";
import { afterEach, describe, expect, it } from "vitest";
import { startWorld, type World, type WorldOptions } from "../../src/simulator/world.ts";
import { CredentialStore, SecretBox } from "../../src/store/secrets.ts";
import { openStore } from "../../src/store/store.ts";
import type { HeldWriteback } from "../../src/sync/writeback-guard.ts";
import { runCliProcess as cli, writeConfig } from "./support.ts";

const DAY = 86_400_000;
const worlds: World[] = [];
afterEach(async () => {
  for (const w of worlds.splice(0)) await w.close();
});

async function world(configure?: WorldOptions["configure"]): Promise<World> {
  const w = await startWorld({ therapists: ["th_anna", "th_ben"], ...(configure ? { configure } : {}) });
  worlds.push(w);
  const now = Date.now();
  w.booking.seed({ therapists: w.therapists, count: 8, from: now + DAY, to: now + 20 * DAY });
  return w;
}

describe("reconcile and a missing SQLite store", () => {
  it("a dry run from another folder refuses (exit 2) and creates nothing; a real first run creates the store and says where", async () => {
    const w = await world();
    const file = writeConfig(w, (c) => {
      c.store.url = "sqlite://./data/calbridge.sqlite"; // the default: relative to the working folder
    });
    for (const args of [
      ["reconcile", "--dry-run"],
      ["reconcile", "--dry-run", "--json"],
    ]) {
      const r = await cli([...args, "--config", file], { cwd: w.dir });
      expect(r.code, args.join(" ")).toBe(2);
      expect(r.stdout).toBe("");
      expect(r.stderr.trimEnd()).toBe(
        `calbridge: store: no SQLite store at ${join(w.dir, "data/calbridge.sqlite")} (store.url sqlite://./data/calbridge.sqlite is relative: resolved against the working folder ${w.dir}); nothing was created. Run the command from the daemon's working folder, or set store.url to the absolute path of the daemon's store (sqlite:///ABSOLUTE/PATH)`,
      );
      expect(existsSync(join(w.dir, "data"))).toBe(false);
    }
    expect(w.google.writes).toBe(0);

    const first = await cli(["reconcile", "--config", file], { cwd: w.dir });
    expect(first.code, first.stderr).toBe(0);
    expect(first.stderr).toContain("a new, empty store is created");
    expect(first.stderr).toContain(join(w.dir, "data/calbridge.sqlite"));
    expect(existsSync(join(w.dir, "data/calbridge.sqlite"))).toBe(true);
    const dry = await cli(["reconcile", "--dry-run", "--config", file], { cwd: w.dir });
    expect(dry.code, dry.stderr).toBe(0);
    expect(dry.stdout).toContain("nothing to do: calendars and bookings agree");
    const again = await cli(["reconcile", "--config", file], { cwd: w.dir });
    expect(again.stderr).not.toContain("a new, empty store is created");
  });
});

describe("reconcile when a calendar could not be listed", () => {
  it("a dry run exits 1 as the real run does", async () => {
    const w = await world();
    const file = writeConfig(w);
    expect((await cli(["reconcile", "--config", file])).code).toBe(0);
    w.google.revokeTokens(w.calendarOf("th_anna"));
    for (const args of [["reconcile"], ["reconcile", "--dry-run"], ["reconcile", "--dry-run", "--json"]]) {
      const r = await cli([...args, "--config", file]);
      expect(r.code, `${args.join(" ")}\n${r.stdout}`).toBe(1);
      expect(r.stdout).toMatch(args.includes("--json") ? /"th_anna": / : /calendar of th_anna not listed/);
    }
  });

  it("no calendar listed: the output does not say calendars and bookings agree", async () => {
    const w = await world();
    const file = writeConfig(w);
    expect((await cli(["reconcile", "--config", file])).code).toBe(0);
    for (const t of w.therapists) w.google.revokeTokens(w.calendarOf(t));
    for (const args of [["reconcile"], ["reconcile", "--dry-run"]]) {
      const r = await cli([...args, "--config", file]);
      expect(r.code).toBe(1);
      expect(r.stdout, args.join(" ")).not.toContain("calendars and bookings agree");
      expect(r.stdout).toContain(
        "  nothing planned for the calendars listed; 2 calendar(s) could not be listed (below)",
      );
      expect(r.stdout).toMatch(/calendar of th_anna not listed/);
      expect(r.stdout).toMatch(/calendar of th_ben not listed/);
    }
  });
});

describe("writeback held --therapist", () => {
  it("an id neither configured nor held is a usage error; a removed therapist's holds are still listed", async () => {
    const w = await world();
    const store = await openStore(w.config.store.url); // the daemon's store is there
    const hold: HeldWriteback = {
      appointmentId: "apt_gone_1",
      therapistId: "th_gone",
      kind: "cancel",
      heldAt: Date.now(),
      reason: "test hold",
    };
    try {
      await store.table<HeldWriteback>("holds").set(hold.appointmentId, hold);
    } finally {
      await store.close();
    }
    const file = writeConfig(w);
    for (const args of [["--apply"], ["--restore"], []]) {
      const r = await cli(["writeback", "held", ...args, "--therapist", "th_anan", "--config", file]);
      expect(r, args.join(" ")).toEqual({
        code: 2,
        stdout: "",
        stderr: "calbridge: --therapist th_anan: not in the configuration and nothing held for it\n",
      });
    }
    // th_gone was removed from the mapping with a write-back still held: it is listed, not refused.
    const gone = await cli(["writeback", "held", "--json", "--therapist", "th_gone", "--config", file]);
    expect(gone.code, gone.stderr).toBe(0);
    expect((JSON.parse(gone.stdout) as { held: HeldWriteback[] }).held.map((h) => h.appointmentId)).toEqual([
      "apt_gone_1",
    ]);
    // A configured therapist with nothing held: none, exit 0.
    const ben = await cli(["writeback", "held", "--apply", "--therapist", "th_ben", "--config", file]);
    expect(ben.code, ben.stderr).toBe(0);
  });
});

describe("read-only commands and a rotated encryption key", () => {
  const OLD_KEY = "old-key-0123456789abcdef0123456789abcdef";
  const NEW_KEY = "new-key-fedcba9876543210fedcba9876543210";

  it("doctor, reconcile --dry-run and purge --dry-run with the new key leave the stored tokens under the old one; a real run reseals", async () => {
    const w = await world((c) => {
      c.google.oauth = { client_id: "placeholder", client_secret: "placeholder-secret" };
      c.store = { ...c.store, encryption_key: OLD_KEY, previous_encryption_keys: [] };
      for (const t of c.therapists) if (t.therapist_id === "th_ben") t.auth = { type: "oauth" };
    });
    const client = w.google.registerOAuthClient();
    w.config.google.oauth = client;
    const sealedUnder = async (): Promise<string | undefined> => {
      const store = await openStore(w.config.store.url);
      try {
        const row = await store.table<{ refresh_token: string }>("credentials").get("oauth:th_ben");
        return row && SecretBox.keyIdOf(row.refresh_token);
      } finally {
        await store.close();
      }
    };
    const store = await openStore(w.config.store.url);
    try {
      await new CredentialStore({ store, box: new SecretBox(OLD_KEY) }).saveRefreshToken(
        "th_ben",
        w.google.issueRefreshToken(w.calendarOf("th_ben"), client.client_id),
      );
    } finally {
      await store.close();
    }
    const oldId = new SecretBox(OLD_KEY).keyId;
    expect(await sealedUnder()).toBe(oldId);
    // The new configuration, checked before the daemon (which has only the old key) is reloaded with it.
    const rotated = writeConfig(
      w,
      (c) => {
        c.store.encryption_key = NEW_KEY;
        c.store.previous_encryption_keys = [OLD_KEY];
      },
      "new.yaml",
    );
    const doctor = await cli(["doctor", "--json", "--config", rotated]);
    const checks = (JSON.parse(doctor.stdout) as { checks: { name: string; status: string }[] }).checks;
    expect(checks.find((c) => c.name.startsWith("calendar of th_ben"))?.status).toBe("ok");
    expect(await sealedUnder()).toBe(oldId);
    const dry = await cli(["reconcile", "--dry-run", "--config", rotated]);
    expect(dry.code, dry.stdout + dry.stderr).toBe(0);
    expect(dry.stdout).toMatch(/^ {2}create +\S+ +th_ben /m); // th_ben's calendar was read with the old key
    expect(await sealedUnder()).toBe(oldId);
    // th_ben removed from the mapping as well: purge --dry-run signs in with the stored token.
    const unmapped = writeConfig(
      w,
      (c) => {
        c.store.encryption_key = NEW_KEY;
        c.store.previous_encryption_keys = [OLD_KEY];
        c.therapists = c.therapists.filter((t) => t.therapist_id !== "th_ben");
      },
      "new-unmapped.yaml",
    );
    const calendar = w.calendarOf("th_ben");
    const purge = await cli([
      "purge",
      "--therapist",
      "th_ben",
      "--dry-run",
      "--calendar",
      calendar,
      "--config",
      unmapped,
    ]);
    expect(purge.code, purge.stdout + purge.stderr).toBe(0);
    expect(await sealedUnder()).toBe(oldId);
    // The daemon's own configuration still opens it.
    const daemonSide = await cli(["reconcile", "--dry-run", "--config", writeConfig(w)]);
    expect(daemonSide.code, daemonSide.stdout).toBe(0);
    // A run that writes (what the start of the reloaded daemon does) seals it under the new key.
    const real = await cli(["reconcile", "--config", rotated]);
    expect(real.code, real.stdout + real.stderr).toBe(0);
    expect(await sealedUnder()).toBe(new SecretBox(NEW_KEY).keyId);
  });
});
