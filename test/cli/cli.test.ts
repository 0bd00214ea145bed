// Tests the command line through main(argv): exit codes, configuration errors as one line per problem,
// config-schema, `reconcile` (dry-run plan as JSON that writes nothing, the applied table, --therapist checks), and
// the commands that read the daemon's store refusing a SQLite store that is not there instead of creating an empty one.
import { existsSync, writeFileSync } from "node:fs";
import { join, resolve } from "node:path";
import { afterEach, describe, expect, it } from "vitest";
import { eventIdFor } from "../../src/calendar/ids.ts";
import { startWorld, type World } from "../../src/simulator/world.ts";
import { openStore } from "../../src/store/store.ts";
import { runCli, writeConfig } from "./support.ts";

const DAY = 86_400_000;
const worlds: World[] = [];
afterEach(async () => {
  for (const w of worlds.splice(0)) await w.close();
});

async function world(): Promise<World> {
  const w = await startWorld({ therapists: ["th_anna", "th_ben"] });
  worlds.push(w);
  const now = Date.now();
  w.booking.seed({ therapists: w.therapists, count: 12, from: now + DAY, to: now + 20 * DAY });
  return w;
}

const STACK_LINE = /^\s+at .+(:\d+:\d+\)?|\(native\))$/m;
const writeRequests = (w: World) => w.booking.requests.filter((r) => r.method !== "GET").length;

describe("configuration errors", () => {
  it("exit 2 with one line per problem, each naming the YAML path, and no stack trace", async () => {
    const w = await world();
    const file = join(w.dir, "bad.yaml");
    writeFileSync(
      file,
      [
        "booking:",
        "  base_url: not a url",
        "  api_key: ${CALBRIDGE_TEST_SURELY_UNSET}",
        "webhooks:",
        "  signing_secrets: [whsec_0123456789]",
        "  tolerance_seconds: soon",
        "google:",
        "  auth: { type: service_account, key_file: /tmp/sa.json }",
        "therapists:",
        "  - therapist_id: th_anna",
        "    calendar: anna@clinic.example",
        "",
      ].join("\n"),
    );
    for (const command of [["run"], ["reconcile", "--dry-run"], ["doctor"]]) {
      const r = await runCli(...command, "--config", file);
      expect(r.code, command.join(" ")).toBe(2);
      expect(r.stdout).toBe("");
      expect(r.stderr).not.toMatch(STACK_LINE);
      const lines = r.stderr.trimEnd().split("\n");
      expect(lines[0]).toBe(`calbridge: invalid configuration ${file}: ${lines.length - 1} problems`);
      const problems = lines.slice(1).map((l) => l.trim());
      expect(problems).toEqual(
        expect.arrayContaining([
          expect.stringMatching(/^booking\.api_key: environment variable CALBRIDGE_TEST_SURELY_UNSET is not set/),
          expect.stringMatching(/^booking\.base_url: .*\(line 2\)$/),
          expect.stringMatching(/^webhooks\.tolerance_seconds: .*\(line 6\)$/),
          expect.stringMatching(/^therapists\[0\]: unknown key "calendar" \(a typo\?\) \(line 11\)$/),
          expect.stringMatching(/^therapists\[0\]\.calendar_id: required/),
        ]),
      );
      // One line each: every problem line starts with a YAML path.
      for (const p of problems) expect(p).toMatch(/^[a-z_]+(\.[a-z_]+|\[\d+\])*: /);
    }
  });

  it("a missing file is a configuration error too, and CALBRIDGE_CONFIG names the default", async () => {
    const r = await runCli("doctor", "--config", "/nonexistent/calbridge.yaml");
    expect(r).toMatchObject({ code: 2, stdout: "" });
    expect(r.stderr).toBe(
      "calbridge: invalid configuration /nonexistent/calbridge.yaml: 1 problem\n  file not found (pass --config FILE or set CALBRIDGE_CONFIG)\n",
    );
    const saved = process.env.CALBRIDGE_CONFIG;
    process.env.CALBRIDGE_CONFIG = "/nonexistent/from-env.yaml";
    try {
      const fromEnv = await runCli("reconcile");
      expect(fromEnv.code).toBe(2);
      expect(fromEnv.stderr).toContain("/nonexistent/from-env.yaml: 1 problem");
      // Set empty (`CALBRIDGE_CONFIG=` in a compose file): unset, so the default, not a file named "".
      process.env.CALBRIDGE_CONFIG = "";
      expect((await runCli("reconcile")).stderr).toContain("config/calbridge.yaml: 1 problem");
    } finally {
      if (saved === undefined) delete process.env.CALBRIDGE_CONFIG;
      else process.env.CALBRIDGE_CONFIG = saved;
    }
  });

  it("usage errors exit 2; --help and --version exit 0", async () => {
    const unknown = await runCli("frobnicate");
    expect(unknown.code).toBe(2);
    expect(unknown.stderr).toMatch(/unknown command 'frobnicate'/);
    const badOption = await runCli("reconcile", "--dryrun");
    expect(badOption.code).toBe(2);
    expect(badOption.stderr).toMatch(/unknown option '--dryrun'/);
    const help = await runCli("--help");
    expect(help.code).toBe(0);
    for (const c of ["run", "reconcile", "doctor", "demo", "authorize", "config-schema"])
      expect(help.stdout).toContain(c);
    const version = await runCli("--version");
    expect(version).toMatchObject({ code: 0, stdout: "0.1.0\n" });
  });

  it("a subcommand's --help says each default once and lists the global --config", async () => {
    for (const [command, said] of [
      ["authorize", "(default: any free port)"],
      ["demo", "(default: run until Ctrl-C)"],
    ] as const) {
      const help = await runCli(command, "--help");
      expect(help.code).toBe(0);
      expect(help.stdout).toContain(said);
      expect(help.stdout).not.toMatch(/\(default: "0"\)/);
      expect(help.stdout).toMatch(/Global Options:[\s\S]*-c, --config <file>/);
    }
  });

  it("a number option that is not a number exits 2 naming it, instead of being read as 'none' (run forever, any port)", async () => {
    const duration = await runCli("demo", "--duration", "abc");
    expect(duration.code).toBe(2);
    expect(duration.stderr).toMatch(/--duration abc: expected a whole number/);
    const port = await runCli("authorize", "--therapist", "th_anna", "--port", "80x");
    expect(port.code).toBe(2);
    expect(port.stderr).toMatch(/--port 80x: expected a whole number from 0 to 65535/);
  });
});

describe("config-schema", () => {
  it("prints a JSON Schema with every top-level section", async () => {
    const r = await runCli("config-schema");
    expect(r.code).toBe(0);
    const schema = JSON.parse(r.stdout) as { $schema?: string; type: string; properties: Record<string, unknown> };
    expect(schema.$schema).toMatch(/json-schema\.org/);
    expect(schema.type).toBe("object");
    expect(Object.keys(schema.properties)).toEqual(
      expect.arrayContaining(["booking", "webhooks", "google", "sync", "event", "store", "therapists"]),
    );
  });
});

describe("reconcile", () => {
  it("--dry-run --json prints the plan and writes nothing anywhere", async () => {
    const w = await world();
    await (await openStore(w.config.store.url)).close(); // the daemon's store is there (a dry run creates none)
    const file = writeConfig(w);
    const r = await runCli("reconcile", "--dry-run", "--json", "--config", file);
    expect(r.code, r.stderr).toBe(0);
    const report = JSON.parse(r.stdout) as {
      dryRun: boolean;
      ok: boolean;
      appointments: number;
      plan: { kind: string; appointmentId: string; therapistId?: string; [field: string]: unknown }[];
      counts: Record<string, number>;
    };
    const confirmed = w.booking.all().filter((a) => a.status === "confirmed");
    expect(report.dryRun).toBe(true);
    expect(report.appointments).toBe(12);
    expect(report.plan.filter((a) => a.kind === "create").map((a) => a.appointmentId)).toEqual(
      expect.arrayContaining(confirmed.map((a) => String(a.id))),
    );
    // Each create says where and when, not the whole event body (no customer details in the report).
    const first = confirmed[0]!;
    expect(report.plan.find((a) => a.appointmentId === String(first.id))).toEqual({
      kind: "create",
      appointmentId: String(first.id),
      therapistId: first.therapist_id,
      eventId: eventIdFor(String(first.id)),
      start: new Date(String(first.start_time)).toISOString().replace(".000Z", "Z"),
      end: new Date(String(first.end_time)).toISOString().replace(".000Z", "Z"),
      reason: expect.any(String),
    });
    expect(r.stdout).not.toContain('"body"');
    expect(report.counts.create).toBe(confirmed.length);
    // Nothing written: no calendar write, no booking write, no link in the store.
    expect(w.google.writes).toBe(0);
    expect(writeRequests(w)).toBe(0);
    const store = await openStore(w.config.store.url);
    try {
      const links: string[] = [];
      for await (const [key] of store.table("links").entries()) links.push(key);
      expect(links).toEqual([]);
    } finally {
      await store.close();
    }
  });

  it("applies the plan and prints it as a table; a second run has nothing to do", async () => {
    const w = await world();
    const file = writeConfig(w);
    const r = await runCli("reconcile", "--config", file);
    expect(r.code, r.stderr).toBe(0);
    const lines = r.stdout.split("\n");
    expect(lines[0]).toMatch(/^Reconciliation: window \S+ \.\. \S+$/);
    expect(r.stdout).toMatch(/^ {2}ACTION +APPOINTMENT +THERAPIST +WHY$/m);
    const confirmed = w.booking.all().filter((a) => a.status === "confirmed");
    for (const a of confirmed) {
      expect(r.stdout).toMatch(new RegExp(`^  create +${a.id} +${a.therapist_id} +\\S`, "m"));
    }
    expect(r.stdout).toMatch(new RegExp(`^  totals: .*create ${confirmed.length}`, "m"));
    const live = w.therapists.flatMap((t) => w.google.events(w.calendarOf(t)).filter((e) => e.status !== "cancelled"));
    expect(live).toHaveLength(confirmed.length);

    const again = await runCli("reconcile", "--config", file);
    expect(again.code, again.stderr).toBe(0);
    expect(again.stdout).toContain("nothing to do: calendars and bookings agree");

    // A one-shot run writes from list items (no notes in them): the dry run says what enriching them needs.
    const dry = await runCli("reconcile", "--dry-run", "--config", file);
    expect(dry.code, dry.stderr).toBe(0);
    expect(dry.stdout).toMatch(
      new RegExp(
        `^ {2}enrichments pending: ${confirmed.length} event\\(s\\) lack fields only GET /v1/appointments/:id gives`,
        "m",
      ),
    );
    expect(dry.stdout).toMatch(
      /^ {2}one read each with leftover rate budget \(at most \d+ a minute\): at least 1 minute\(s\)$/m,
    );
  });

  it("--therapist limits the run to one calendar; an unknown one is a usage error", async () => {
    const w = await world();
    await (await openStore(w.config.store.url)).close();
    const file = writeConfig(w);
    const r = await runCli("reconcile", "--dry-run", "--json", "--therapist", "th_ben", "--config", file);
    expect(r.code, r.stderr).toBe(0);
    const report = JSON.parse(r.stdout) as { plan: { therapistId?: string }[] };
    expect(report.plan.length).toBeGreaterThan(0);
    expect(new Set(report.plan.map((a) => a.therapistId))).toEqual(new Set(["th_ben"]));

    const unknown = await runCli("reconcile", "--therapist", "th_nobody", "--config", file);
    expect(unknown).toEqual({
      code: 2,
      stdout: "",
      stderr: "calbridge: --therapist th_nobody: not in the configuration\n",
    });
    expect(w.google.writes).toBe(0);
  });

  it("a failed run exits 1 with a one-line reason and no stack trace", async () => {
    const w = await world();
    const file = writeConfig(w, (c) => {
      c.booking.base_url = "http://127.0.0.1:9"; // nothing listens on the discard port
      c.booking.timeout_ms = 2000;
    });
    const r = await runCli("reconcile", "--config", file);
    expect(r.code).toBe(1);
    expect(r.stderr).not.toMatch(STACK_LINE);
    expect(r.stderr.trimEnd().split("\n").at(-1)).toMatch(/^calbridge: .*ECONNREFUSED/);
  });
});

describe("commands that read the daemon's store", () => {
  it("history, writeback held, purge and reconcile --dry-run refuse a missing SQLite store (exit 2, the path and how it was resolved) and create nothing", async () => {
    const w = await world();
    // The default store.url is relative: run from another folder than the daemon's, it names a file that is not there.
    const folder = `no-store-here-${process.pid}-${Date.now()}`;
    const url = `sqlite://./${folder}/calbridge.sqlite`;
    const file = writeConfig(w, (c) => {
      c.store.url = url;
    });
    const path = resolve(process.cwd(), folder, "calbridge.sqlite");
    for (const command of [
      ["history", "apt_123"],
      ["history", "apt_123", "--json"],
      ["writeback", "held"],
      ["writeback", "held", "--apply"],
      ["purge", "--therapist", "th_anna", "--dry-run"],
      ["reconcile", "--dry-run"],
    ]) {
      const r = await runCli(...command, "--config", file);
      const said = command.join(" ");
      expect(r.code, `${said}: ${r.stderr}`).toBe(2);
      expect(r.stdout, said).toBe("");
      expect(r.stderr, said).not.toMatch(STACK_LINE);
      expect(r.stderr.trimEnd().split("\n"), said).toEqual([
        `calbridge: store: no SQLite store at ${path} (store.url ${url} is relative: resolved against the working folder ${process.cwd()}); nothing was created. Run the command from the daemon's working folder, or set store.url to the absolute path of the daemon's store (sqlite:///ABSOLUTE/PATH)`,
      ]);
      expect(existsSync(join(process.cwd(), folder)), said).toBe(false);
    }
    // The daemon's store, where it is: found, and read.
    await (await openStore(w.config.store.url)).close();
    const found = await runCli("history", "apt_123", "--config", writeConfig(w));
    expect(found.code).toBe(1);
    expect(found.stderr).toMatch(/^No history of appointment apt_123: calbridge has decided nothing about it/);
  });
});
