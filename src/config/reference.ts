// Owns the configuration reference of README.md: one row per key, generated from the JSON Schema (types, defaults)
// and the comments of config/example.yaml (meaning), so the documentation cannot drift from the code.
import { readFileSync } from "node:fs";
import { isMap, isPair, isScalar, isSeq, type Node, parseDocument } from "yaml";
import { configJsonSchema } from "./json-schema.ts";

interface Row {
  key: string;
  type: string;
  def: string;
  what: string;
}

type SchemaNode = Record<string, unknown>;

function collectComments(node: Node | null | undefined, prefix: string, out: Map<string, string>): void {
  if (isSeq(node)) {
    for (const item of node.items) collectComments(item as Node, `${prefix}[]`, out);
    return;
  }
  if (!isMap(node)) return;
  for (const [i, pair] of node.items.entries()) {
    if (!isPair(pair) || !isScalar(pair.key)) continue;
    const key = prefix ? `${prefix}.${String(pair.key.value)}` : String(pair.key.value);
    // The comment above a mapping's first key belongs to the mapping node in the yaml library.
    const comment = (pair.key.commentBefore ?? (i === 0 ? node.commentBefore : undefined) ?? "").trim();
    if (comment && !out.has(key)) out.set(key, comment.replace(/\s*\n\s*/g, " "));
    collectComments(pair.value as Node, key, out);
  }
}

function typeOf(n: SchemaNode): string {
  if (Array.isArray(n.enum)) return n.enum.map((v) => `\`${String(v)}\``).join(" \\| ");
  if (n.const !== undefined) return `\`${String(n.const)}\``;
  if (Array.isArray(n.anyOf) || Array.isArray(n.oneOf)) return "one of the forms below";
  if (n.type === "array") return `list of ${typeOf((n.items ?? {}) as SchemaNode)}`;
  if (n.type === "integer") return "integer";
  if (Array.isArray(n.type)) return n.type.join(" or ");
  return String(n.type ?? "any");
}

function walk(n: SchemaNode, prefix: string, rows: Row[], comments: Map<string, string>, seen: Set<string>): void {
  for (const variant of [...((n.anyOf as SchemaNode[]) ?? []), ...((n.oneOf as SchemaNode[]) ?? [])]) {
    walk(variant, prefix, rows, comments, seen);
  }
  if (n.type === "array" && n.items) walk(n.items as SchemaNode, `${prefix}[]`, rows, comments, seen);
  const props = n.properties as Record<string, SchemaNode> | undefined;
  if (!props) return;
  const required = new Set((n.required as string[]) ?? []);
  for (const [key, child] of Object.entries(props)) {
    const path = prefix ? `${prefix}.${key}` : key;
    const earlier = rows.find((r) => r.key === path);
    if (earlier && child.const !== undefined && !earlier.type.includes(`\`${String(child.const)}\``)) {
      earlier.type += ` \\| \`${String(child.const)}\``;
    }
    if (!seen.has(path)) {
      seen.add(path);
      const fallback = path.replace("therapists[].writeback", "sync.writeback");
      const override = path.startsWith("therapists[].writeback.");
      const def = override
        ? `\`${fallback}\``
        : child.default !== undefined && typeof child.default !== "object"
          ? `\`${JSON.stringify(child.default)}\``
          : required.has(key) && child.default === undefined
            ? "required"
            : "";
      rows.push({
        key: path,
        type: child.properties ? "section" : typeOf(child),
        def,
        what: (child.description as string | undefined) ?? comments.get(path) ?? comments.get(fallback) ?? "",
      });
    }
    walk(child, path, rows, comments, seen);
  }
}

/**
 * The example with its commented-out optional keys (`#key: value`, no space after the #, where prose comments have
 * one) set, so every key is there to read and each comment stays with its own key.
 */
export function exampleWithOptionalKeys(text: string): string {
  return text.replace(/^([ \t]*)#(?=[^\s#])/gm, "$1");
}

/** The Markdown table of every configuration key. */
export function configReference(examplePath = "config/example.yaml"): string {
  const comments = new Map<string, string>();
  const example = exampleWithOptionalKeys(readFileSync(examplePath, "utf8"));
  collectComments(parseDocument(example).contents as Node, "", comments);
  const rows: Row[] = [];
  walk(configJsonSchema() as SchemaNode, "", rows, comments, new Set());
  const esc = (s: string) => s.replaceAll("|", "\\|");
  return [
    "| key | type | default | meaning |",
    "| --- | --- | --- | --- |",
    ...rows.map((r) => `| \`${r.key}\` | ${r.type} | ${r.def} | ${esc(r.what)} |`),
  ].join("\n");
}
