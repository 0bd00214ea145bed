// The command line runs when its file is the script node was started with, also from a folder whose name a file: URL
// would encode or cut (a space, a non-ASCII letter, '#'): compared as a URL, `calbridge doctor` there did nothing and
// exited 0, so a check "passed" without checking anything. Through a link (the `calbridge` bin) it runs too.
import { spawnSync } from "node:child_process";
import { cpSync, mkdirSync, mkdtempSync, readFileSync, rmSync, symlinkSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, expect, it } from "vitest";

const repo = join(import.meta.dirname, "../..");
const root = mkdtempSync(join(tmpdir(), "cb-entry-"));
afterAll(() => rmSync(root, { recursive: true, force: true }));
const version = (JSON.parse(readFileSync(join(repo, "package.json"), "utf8")) as { version: string }).version;

it("prints its version from a folder named 'Mein Büro #2', and through a link to it", () => {
  const dir = join(root, "Mein Büro #2");
  mkdirSync(dir, { recursive: true });
  cpSync(join(repo, "src"), join(dir, "src"), { recursive: true });
  cpSync(join(repo, "package.json"), join(dir, "package.json"));
  symlinkSync(join(repo, "node_modules"), join(dir, "node_modules"));
  symlinkSync(join(dir, "src", "cli.ts"), join(root, "calbridge"));
  for (const script of [join(dir, "src", "cli.ts"), join(root, "calbridge")]) {
    const r = spawnSync(process.execPath, [script, "--version"], { cwd: dir, encoding: "utf8" });
    expect({ status: r.status, stdout: r.stdout.trim() }).toEqual({ status: 0, stdout: version });
  }
});
