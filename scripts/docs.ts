// Regenerates the configuration reference inside README.md from the schema and config/example.yaml.
import { readFileSync, writeFileSync } from "node:fs";
import { configReference } from "../src/config/reference.ts";

export const START = "<!-- config-reference:start -->";
export const END = "<!-- config-reference:end -->";

export function withReference(readme: string, table: string): string {
  const a = readme.indexOf(START);
  const b = readme.indexOf(END);
  if (a < 0 || b < a) throw new Error("README.md has no config-reference markers");
  return `${readme.slice(0, a + START.length)}\n${table}\n${readme.slice(b)}`;
}

if (import.meta.filename === process.argv[1]) {
  const readme = readFileSync("README.md", "utf8");
  writeFileSync("README.md", withReference(readme, configReference()));
  console.log("README.md: configuration reference regenerated");
}
