// Owns the reporting of YAML syntax errors: one line per distinct problem, with line and column, and none of the
// parser's follow-on errors (an unterminated quote swallows the rest of the file, and every error the parser then
// finds at the end of the file is a consequence of it, not a problem of its own).
import { type LineCounter, Parser, type YAMLError } from "yaml";

interface Opening {
  /** Offset of the opening quote or bracket. */
  start: number;
  /** The character that is never closed: ", ', [ or {. */
  open: string;
  close: string;
}

/**
 * What the CST shows left open: quoted scalars without their closing quote, keyed by the offset where the parser
 * gave up on them (their end), and flow collections without their closing bracket, in order of their start.
 */
function openings(text: string): { quotes: Map<number, Opening>; flows: Opening[] } {
  const quotes = new Map<number, Opening>();
  const flows: Opening[] = [];
  const walk = (node: unknown): void => {
    if (Array.isArray(node)) {
      for (const child of node) walk(child);
      return;
    }
    if (node === null || typeof node !== "object") return;
    const token = node as {
      type?: string;
      offset?: number;
      source?: string;
      start?: { source?: string };
      end?: { type?: string }[];
    };
    if (typeof token.offset === "number" && typeof token.source === "string") {
      const quote = token.type === "double-quoted-scalar" ? '"' : token.type === "single-quoted-scalar" ? "'" : "";
      if (quote) quotes.set(token.offset + token.source.length, { start: token.offset, open: quote, close: quote });
    }
    if (token.type === "flow-collection" && typeof token.offset === "number") {
      const open = token.start?.source === "{" ? "{" : "[";
      const closed = token.end?.some((t) => t.type === "flow-map-end" || t.type === "flow-seq-end");
      if (!closed) flows.push({ start: token.offset, open, close: open === "{" ? "}" : "]" });
    }
    for (const value of Object.values(node)) if (value !== null && typeof value === "object") walk(value);
  };
  for (const token of new Parser().parse(text)) walk(token);
  flows.sort((a, b) => a.start - b.start);
  return { quotes, flows };
}

/** The opening a parser error is about, when it is one the parser reports far from where it starts. */
function openingOf(error: YAMLError, found: ReturnType<typeof openings>): Opening | undefined {
  const at = error.pos[0];
  if (error.code === "MISSING_CHAR" && /quote/.test(error.message)) return found.quotes.get(at);
  if (/^Flow (sequence|map)\b/.test(error.message)) return found.flows.findLast((f) => f.start < at);
  return undefined;
}

/**
 * The parser's errors as admins want them: `line L, column C: what`, one per distinct problem. A missing closing
 * quote or bracket is reported where it was opened (the parser reports it where it gave up, often the end of the
 * file), and errors found at the same place as an earlier one, or on a line already reported, are left out as its
 * consequences. Lines come in file order.
 */
export function syntaxProblems(text: string, errors: readonly YAMLError[], lineCounter: LineCounter): string[] {
  const found = openings(text);
  // Per line, the first error, unless an unclosed quote or bracket opened on it explains the line better.
  const byLine = new Map<number, { col: number; what: string; opening: boolean }>();
  const seenOffsets = new Set<number>();
  for (const error of errors) {
    const at = error.pos[0];
    if (seenOffsets.has(at)) continue;
    seenOffsets.add(at);
    const opening = openingOf(error, found);
    const { line, col } = lineCounter.linePos(opening ? opening.start : at);
    const held = byLine.get(line);
    if (held && (held.opening || !opening)) continue;
    const what = opening
      ? `the ${opening.open} opened here is never closed (a missing ${opening.close}?)`
      : error.message.split("\n")[0]!.replace(/:$/, "");
    byLine.set(line, { col, what, opening: opening !== undefined });
  }
  return [...byLine].sort(([a], [b]) => a - b).map(([line, p]) => `line ${line}, column ${p.col}: ${p.what}`);
}
