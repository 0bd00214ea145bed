// Owns the `{field}` templates of event titles and descriptions: substitution and whitespace clean-up.

const PLACEHOLDER = /\{([a-z_]+)\}/g;

/** Replaces each `{name}` with `values[name]`; unknown or missing names become empty. Single pass: values are not re-expanded. */
export function fillTemplate(template: string, values: Readonly<Record<string, string | null | undefined>>): string {
  return template.replace(PLACEHOLDER, (_match, name: string) => values[name] ?? "");
}

/** The placeholder names a template uses (for configuration checks). */
export function placeholdersOf(template: string): string[] {
  return [...template.matchAll(PLACEHOLDER)].map((m) => m[1] as string);
}

/** One line: newlines and runs of whitespace become one space; separators left dangling by empty fields are dropped. */
export function cleanTitle(text: string): string {
  return text
    .replace(/\s+/g, " ")
    .replace(/^[\s:;,|/\-–—]+/, "")
    .replace(/[\s:;,|/\-–—]+$/, "")
    .replace(/\(\s*\)/g, "")
    .replace(/ {2,}/g, " ")
    .trim();
}

/** Trailing spaces removed from each line, runs of blank lines collapsed to one, blank lines at both ends dropped. */
export function cleanText(text: string): string {
  const lines = text
    .replace(/\r\n?/g, "\n")
    .split("\n")
    .map((l) => l.trimEnd());
  const out: string[] = [];
  for (const line of lines) {
    if (line === "" && (out.length === 0 || out[out.length - 1] === "")) continue;
    out.push(line);
  }
  while (out.length > 0 && out[out.length - 1] === "") out.pop();
  return out.join("\n");
}
