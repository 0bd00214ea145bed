// Keeps the sync core in the shape issue #20 gave it: small files, no double casts (import circles are refused by the
// linter's noImportCycles rule, which `npm test` runs).
import { readdirSync, readFileSync } from "node:fs";
import { join } from "node:path";
import { describe, expect, it } from "vitest";

const dir = join(import.meta.dirname, "../../src/sync");
const files = readdirSync(dir).filter((f) => f.endsWith(".ts"));

describe("src/sync", () => {
  it.each(files)("%s stays under 300 lines", (f) => {
    expect(readFileSync(join(dir, f), "utf8").split("\n").length).toBeLessThanOrEqual(300);
  });

  it.each(files)("%s has no double cast", (f) => {
    expect(readFileSync(join(dir, f), "utf8")).not.toMatch(/as unknown as/);
  });
});
