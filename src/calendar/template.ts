// Owns the `{field}` templates of event titles and descriptions: substitution, the sanitising of the values put in
// (HTML escaping, control characters), whitespace clean-up, and cutting text to a limit with a visible ellipsis.

const PLACEHOLDER = /\{([a-z_]+)\}/g;

/**
 * Replaces each `{name}` with `values[name]` (passed through `transform`, e.g. escaping); unknown or missing names
 * become empty. Single pass: values are not re-expanded, and the template's own text is not transformed.
 */
export function fillTemplate(
  template: string,
  values: Readonly<Record<string, string | null | undefined>>,
  transform: (value: string) => string = (v) => v,
): string {
  return template.replace(PLACEHOLDER, (_match, name: string) => transform(values[name] ?? ""));
}

const HTML_ESCAPES: Record<string, string> = { "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;" };

/**
 * Text made inert as HTML: Google renders a subset of HTML in event descriptions (a customer's `<a href>` would
 * become a live link in the therapist's calendar), so values from the booking service are escaped there.
 */
export function escapeHtml(text: string): string {
  return text.replace(/[&<>"']/g, (c) => HTML_ESCAPES[c]!);
}

const HTML_UNESCAPES = new Map([...Object.entries(HTML_ESCAPES).map(([c, e]) => [e, c] as const), ["&nbsp;", " "]]);

/** escapeHtml undone (and Google's UI's &nbsp;), for comparing a description's text with what calbridge wrote. */
export function unescapeHtml(text: string): string {
  return text.replace(/&(?:amp|lt|gt|quot|#39|nbsp);/g, (e) => HTML_UNESCAPES.get(e)!);
}

/**
 * Control characters removed (C0 but tab and newline, DEL, C1), line breaks made "\n", and unpaired surrogates
 * (not valid Unicode, not sendable as UTF-8) replaced with U+FFFD.
 */
export function dropControls(text: string): string {
  return text.toWellFormed().replace(/\r\n?/g, "\n").replace(CONTROLS, "");
}

// biome-ignore lint/suspicious/noControlCharactersInRegex: finding control characters is the point
const CONTROLS = /[\u0000-\u0008\u000B\u000C\u000E-\u001F\u007F-\u009F]/g;

export const ELLIPSIS = "…";

/**
 * `text` cut to at most `maxBytes` bytes of UTF-8, with a visible ellipsis at the end when it was cut; never in the
 * middle of a character (surrogate pair) nor of an HTML character reference such as `&amp;`.
 */
export function cutToBytes(text: string, maxBytes: number): string {
  if (Buffer.byteLength(text, "utf8") <= maxBytes) return text;
  const budget = maxBytes - Buffer.byteLength(ELLIPSIS, "utf8");
  let bytes = 0;
  let end = 0;
  for (const ch of text) {
    const size = Buffer.byteLength(ch, "utf8");
    if (bytes + size > budget) break;
    bytes += size;
    end += ch.length;
  }
  let cut = text.slice(0, end);
  const amp = cut.lastIndexOf("&");
  if (amp !== -1 && /^&#?[a-zA-Z0-9]*$/.test(cut.slice(amp))) cut = cut.slice(0, amp);
  return `${cut.trimEnd()}${ELLIPSIS}`;
}

/**
 * Everything a template writes in braces, as written: `{service_name}`, but also `{Service_Name}`, `{ customer_name }`,
 * `{customer-name}` and `{{service_name}}`, which are no placeholders and were printed as written (or in braces).
 */
export function bracedOf(template: string): string[] {
  return [...template.matchAll(/\{+[^{}\n]*\}+/g)].map((m) => m[0]);
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
