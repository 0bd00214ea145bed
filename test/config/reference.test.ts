import { readFileSync } from "node:fs";
import { describe, expect, it } from "vitest";
import { generated, withReference } from "../../scripts/docs.ts";
import { configJsonSchema, schemaKeyPaths } from "../../src/config/json-schema.ts";
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

describe("values zod cannot describe from their input alone", () => {
  // A colour id is a union with a transform and a refine: zod's JSON Schema (io: input) dropped its default, as the
  // output's, and the refine's limit, so config-schema and the reference showed neither.
  it("event colours carry their default and the 1 to 11 limit, in the JSON Schema and the reference", () => {
    type Node = { properties: Record<string, Node> } & Record<string, unknown>;
    const colors = (configJsonSchema() as Node).properties.event!.properties.colors!.properties;
    for (const [key, def] of [
      ["completed", "2"],
      ["no_show", "11"],
    ] as const) {
      expect(colors[key]).toMatchObject({
        default: def,
        type: ["string", "integer"],
        pattern: "^(?:[1-9]|1[01])$",
        minimum: 1,
        maximum: 11,
      });
      expect(configReference()).toMatch(
        new RegExp(`^\\| \`event\\.colors\\.${key}\` \\| string or integer \\| \`"${def}"\` \\| .*1 to 11.*\\|$`, "m"),
      );
    }
  });
});
