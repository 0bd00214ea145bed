// Malformed configuration files: random mutations of config/example.yaml (the documented reference), with every
// variable it refers to set. Loading either succeeds or throws ConfigError (never another exception); the command
// line turns a ConfigError into exit code 2 and one line per problem, never a stack trace.
import { spawn } from "node:child_process";
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, describe, expect, it } from "vitest";
import { ConfigError, loadConfig } from "../../src/config/load.ts";
import { SecretRegistry } from "../../src/log.ts";
import { CLI, ROOT } from "./daemon.ts";
import { collectText, secret } from "./logs.ts";
import { type Random, random } from "./random.ts";

export const CONFIG_ENV = {
  BOOKING_API_KEY: "sk_live_fuzz_5b1d0c2e9a7f4e68",
  BOOKING_WEBHOOK_SECRET: "whsec_fuzz_83f1c0d9e2b7a645",
  GOOGLE_OAUTH_CLIENT_SECRET: "GOCSPX-fuzz-Zq81LmT0xR5vW2",
  GOOGLE_CHANNEL_TOKEN: "chan_fuzz_e4a9b7c1d6f3",
  BEN_REFRESH_TOKEN: "1//fuzz-refresh-token-9d8c7b6a5f4e",
  CALBRIDGE_ADMIN_TOKEN: "admin_fuzz_7c2e9f1a4b6d",
  NOTIFY_WEBHOOK_URL: "https://hooks.slack.com/services/T0FUZZ/B0FUZZ/fuzz-hook-token-7c2e",
  SMTP_PASSWORD: "smtp-fuzz-password-41d9",
  CALBRIDGE_STORE_KEY: "fuzz-store-key-Vb3nQ8xL2mR7tK9wZ4cJ6hP1",
  CALBRIDGE_CONNECT_SECRET: "fuzz-connect-secret-0123456789abcdefghij",
};

const EXAMPLE = readFileSync(join(ROOT, "config/example.yaml"), "utf8");

const VALUES = [
  "",
  "~",
  "null",
  "[]",
  "{}",
  "-1",
  "0",
  "1e309",
  "0x1F",
  "true",
  "yes",
  "NaN",
  ".inf",
  "2026-01-01",
  "'unterminated",
  '"bad \\q escape"',
  "*nowhere",
  "&anchor value",
  "!!binary aGVsbG8=",
  "!custom tag",
  "!!int forty",
  "${UNSET_VARIABLE}",
  "${file:/nonexistent/secret}",
  "${not a ref}",
  "${}",
  "$${literal}",
  "${BOOKING_API_KEY}",
  "${file:/etc/hostname}",
  "x".repeat(5000),
  "ünïcödé 😀",
  "@reserved",
  "`backtick",
  "[unclosed",
  "{a: 1",
  "- a\n- b",
  "|\n  block text",
  "? complex",
  "a: b: c",
  "http://",
  "https://x",
  "sqlite://",
  "redis://",
  "0.0.0.0:99999",
  "*/61 * * * *",
  "Mars/Olympus",
  "1.5",
  "-0",
  "__proto__",
];

const BOMB = ["a: &a [x,x,x,x,x,x,x,x,x]", "b: &b [*a,*a,*a,*a,*a,*a,*a,*a,*a]", "c: &c [*b,*b,*b,*b,*b,*b,*b,*b,*b]"]
  .concat([
    "d: &d [*c,*c,*c,*c,*c,*c,*c,*c,*c]",
    "e: &e [*d,*d,*d,*d,*d,*d,*d,*d,*d]",
    "f: [*e,*e,*e,*e,*e,*e,*e,*e,*e]",
  ])
  .join("\n");

type Mutation = (lines: string[], r: Random) => string[];

const MUTATIONS: Mutation[] = [
  (l, r) => l.filter((_, i) => i !== r.int(l.length)), // delete a line
  (l, r) => {
    const i = r.int(l.length);
    return [...l.slice(0, i), l[i]!, ...l.slice(i)]; // duplicate a line
  },
  (l, r) => {
    const [i, j] = [r.int(l.length), r.int(l.length)];
    const out = [...l];
    [out[i], out[j]] = [out[j]!, out[i]!];
    return out;
  },
  (l, r) => {
    const i = r.int(l.length);
    const line = l[i]!;
    const out = [...l];
    out[i] = r.chance(0.3) ? `\t${line}` : r.chance(0.5) ? " ".repeat(1 + r.int(4)) + line : line.trimStart();
    return out;
  },
  (l, r) => {
    // replace a value
    const candidates = l.map((line, i) => [line, i] as const).filter(([line]) => /:\s*\S/.test(line));
    if (candidates.length === 0) return l;
    const [line, i] = r.pick(candidates);
    const out = [...l];
    out[i] = `${line.slice(0, line.indexOf(":") + 1)} ${r.pick(VALUES)}`;
    return out;
  },
  (l, r) => {
    const i = r.int(l.length + 1);
    return [...l.slice(0, i), r.text(60), ...l.slice(i)];
  },
  (l, r) =>
    l
      .join("\n")
      .slice(0, r.int(l.join("\n").length))
      .split("\n"),
  (l, r) => {
    const text = l.join("\n");
    const at = r.int(text.length);
    const junk = r.pick(["\u0000", "\uFEFF", "\u0007", "\r", "\u2028", "\uFFFD", "\t", ": ", "#", "- ", "&", "*", "!"]);
    return (text.slice(0, at) + junk + text.slice(at)).split("\n");
  },
  (l, r) => {
    // rename a key
    const candidates = l.map((line, i) => [line, i] as const).filter(([line]) => /^\s*[a-z_]+:/.test(line));
    if (candidates.length === 0) return l;
    const [line, i] = r.pick(candidates);
    const out = [...l];
    out[i] = line.replace(/([a-z_]+):/, `$1${r.pick(["s", "_", "X", " ", "-x"])}:`);
    return out;
  },
  (l, r) => {
    const i = r.int(l.length + 1);
    return [...l.slice(0, i), r.pick(["---", "...", "%YAML 1.1", "%TAG ! tag:x,2000:", "<<: *nowhere"]), ...l.slice(i)];
  },
  (l) => [...l, ...BOMB.split("\n")],
  (l, r) => [...l, `deep: ${"[".repeat(200 + r.int(2000))}${"]".repeat(r.chance(0.5) ? 2200 : 0)}`],
  (_l, r) => r.text(400).split("\n"),
  (l, r) => {
    // a section or list turned into a scalar, or a scalar into a mapping
    const i = r.int(l.length);
    const out = [...l];
    out[i] = `${l[i]!.replace(/:.*$/, "")}: ${r.pick(["[1, 2]", "{x: 1}", "- y", "42"])}`;
    return out;
  },
];

function mutate(r: Random): string {
  let lines = EXAMPLE.split("\n");
  const n = 1 + r.int(3);
  for (let k = 0; k < n; k++) if (lines.length > 0) lines = r.pick(MUTATIONS)(lines, r);
  return lines.join("\n");
}

interface Outcome {
  text: string;
  result: "ok" | "config_error" | "other";
  detail: string;
}

function runCommand(
  args: string[],
  env: NodeJS.ProcessEnv,
): Promise<{ code: number | null; stdout: string; stderr: string }> {
  return new Promise((resolve) => {
    const child = spawn(process.execPath, args, { cwd: ROOT, env, stdio: ["ignore", "pipe", "pipe"] });
    let stdout = "";
    let stderr = "";
    child.stdout.on("data", (c) => (stdout += String(c)));
    child.stderr.on("data", (c) => (stderr += String(c)));
    const timer = setTimeout(() => child.kill("SIGKILL"), 30_000);
    child.on("exit", (code) => {
      clearTimeout(timer);
      resolve({ code, stdout, stderr });
    });
  });
}

export function configFuzzTests(seed: number): void {
  describe("malformed configuration files", () => {
    const dir = mkdtempSync(join(tmpdir(), "calbridge-config-fuzz-"));
    afterAll(() => rmSync(dir, { recursive: true, force: true }));
    const outcomes: Outcome[] = [];
    for (const [name, value] of Object.entries(CONFIG_ENV)) secret(`config fuzz ${name}`, value);

    it("2,000 random mutations of config/example.yaml: loadConfig returns a config or throws ConfigError, never anything else", () => {
      const r = random(seed + 5);
      // The unmutated reference loads.
      const file = join(dir, "example.yaml");
      writeFileSync(file, EXAMPLE);
      expect(loadConfig(file, { env: CONFIG_ENV, secrets: new SecretRegistry() }).therapists.length).toBeGreaterThan(0);
      for (let i = 0; i < 2000; i++) {
        const text = mutate(r);
        const path = join(dir, `m${i}.yaml`);
        writeFileSync(path, text);
        try {
          loadConfig(path, { env: CONFIG_ENV, secrets: new SecretRegistry() });
          outcomes.push({ text, result: "ok", detail: "" });
        } catch (err) {
          if (err instanceof ConfigError) outcomes.push({ text, result: "config_error", detail: err.message });
          else outcomes.push({ text, result: "other", detail: `${(err as Error).name}: ${(err as Error).message}` });
        }
      }
      const others = outcomes.filter((o) => o.result === "other");
      expect(others.map((o) => o.detail).slice(0, 5), `e.g. this file:\n${others[0]?.text.slice(0, 1500)}`).toEqual([]);
      // The mutations exercise both sides.
      expect(outcomes.filter((o) => o.result === "config_error").length).toBeGreaterThan(500);
      expect(outcomes.filter((o) => o.result === "ok").length).toBeGreaterThan(20);
      // A problem names where it is: a YAML path or a line.
      for (const o of outcomes.filter((x) => x.result === "config_error")) {
        expect(o.detail).toMatch(/problem/);
      }
    });

    it("via the CLI, a malformed file stops `calbridge run` with exit code 2 and one line per problem, no stack trace", async () => {
      const r = random(seed + 6);
      const rejected = outcomes.filter((o) => o.result === "config_error");
      const picked = Array.from({ length: 6 }, () => r.pick(rejected).text);
      const special = [
        `${EXAMPLE}\n${BOMB}\n`,
        EXAMPLE.replace("api_key: ${BOOKING_API_KEY}", "api_key: *undefined_alias"),
        EXAMPLE.replace("requests_per_minute: 60", "requests_per_minute: ${BOOKING_API_KEY}"),
        EXAMPLE.replace("listen: 0.0.0.0:8080", "listen: ${BOOKING_WEBHOOK_SECRET}"),
        "booking: [\n",
        "",
      ];
      const files = [...picked, ...special].map((text, i) => {
        const path = join(dir, `cli${i}.yaml`);
        writeFileSync(path, text);
        return path;
      });
      files.push(join(dir, "does-not-exist.yaml"));
      const env = { PATH: process.env.PATH, HOME: process.env.HOME, NODE_NO_WARNINGS: "1", ...CONFIG_ENV };
      const results: { file: string; code: number | null; stdout: string; stderr: string }[] = [];
      const queue = [...files];
      await Promise.all(
        Array.from({ length: 3 }, async () => {
          for (let f = queue.shift(); f !== undefined; f = queue.shift()) {
            const res = await runCommand([CLI, "run", "--config", f], env);
            collectText(`cli run --config ${f}`, res.stdout + res.stderr);
            results.push({ file: f, ...res });
          }
        }),
      );
      for (const res of results) {
        const what = `${res.file}: ${res.stderr.slice(0, 600)}`;
        expect(res.code, what).toBe(2);
        expect(res.stderr, what).toMatch(/^calbridge: invalid configuration /);
        expect(res.stderr, what).not.toMatch(/^\s+at /m);
        expect(res.stdout, what).toBe("");
      }
    });
  });
}
