import { readFileSync } from "node:fs";
import { describe, expect, it } from "vitest";
import { generated, withReference } from "../../scripts/docs.ts";
import { schemaKeyPaths } from "../../src/config/json-schema.ts";
import { configReference } from "../../src/config/reference.ts";

describe("README configuration reference", () => {
  it("is the table generated from the schema (run `npm run docs` when this fails)", () => {
    const readme = readFileSync("README.md", "utf8");
    expect(withReference(readme, configReference())).toBe(readme);
  });

  it("has the placeholder table generated from src/calendar/placeholders.ts (run `npm run docs` when this fails)", () => {
    const readme = readFileSync("README.md", "utf8");
    expect(generated(readme)).toBe(readme);
    expect(readme).toContain("| `{notes}` | the booking notes | full form | one enrichment read per new event | yes |");
  });

  it("has one row for every key of the schema, and no row for a key the schema lacks", () => {
    const rows = [...configReference().matchAll(/^\| `([^`]+)` \|/gm)].map((m) => m[1]);
    expect(new Set(rows)).toEqual(new Set(schemaKeyPaths()));
  });
});
