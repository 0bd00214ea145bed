// Regenerates the generated parts of README.md: the configuration reference (from the schema and
// config/example.yaml) and the table of template placeholders (from src/calendar/placeholders.ts).
import { readFileSync, writeFileSync } from "node:fs";
import { placeholderReference } from "../src/calendar/placeholder-reference.ts";
import { configReference } from "../src/config/reference.ts";

export const START = "<!-- config-reference:start -->";
export const END = "<!-- config-reference:end -->";
export const PLACEHOLDERS_START = "<!-- placeholders:start -->";
export const PLACEHOLDERS_END = "<!-- placeholders:end -->";

/** `readme` with the text between the markers `start` and `end` replaced by `table`. */
export function withSection(readme: string, start: string, end: string, table: string): string {
  const a = readme.indexOf(start);
  const b = readme.indexOf(end);
  if (a < 0 || b < a) throw new Error(`README.md has no ${start} ... ${end} markers`);
  return `${readme.slice(0, a + start.length)}\n${table}\n${readme.slice(b)}`;
}

export function withReference(readme: string, table: string): string {
  return withSection(readme, START, END, table);
}

/** README with every generated part as the code makes it. */
export function generated(readme: string): string {
  const withConfig = withReference(readme, configReference());
  return withSection(withConfig, PLACEHOLDERS_START, PLACEHOLDERS_END, placeholderReference());
}

if (import.meta.filename === process.argv[1]) {
  writeFileSync("README.md", generated(readFileSync("README.md", "utf8")));
  console.log("README.md: configuration reference and placeholder table regenerated");
}
