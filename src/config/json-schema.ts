// Owns the JSON Schema of the configuration, generated from the same zod schema that validates it.
import { z } from "zod";
import { ConfigSchema } from "./schema.ts";

export function configJsonSchema(): Record<string, unknown> {
  const schema = z.toJSONSchema(ConfigSchema, { io: "input", unrepresentable: "any" }) as Record<string, unknown>;
  return {
    ...schema,
    $id: "https://github.com/calbridge/calbridge/config.schema.json",
    title: "calbridge configuration",
  };
}

/** Every key path the schema knows (`a.b`, lists as `a[]`), for documentation checks. */
export function schemaKeyPaths(node: unknown = configJsonSchema(), prefix = ""): string[] {
  const out: string[] = [];
  const n = node as Record<string, unknown>;
  for (const variant of [...((n.anyOf as unknown[]) ?? []), ...((n.oneOf as unknown[]) ?? [])]) {
    out.push(...schemaKeyPaths(variant, prefix));
  }
  if (n.type === "array" && n.items) out.push(...schemaKeyPaths(n.items, `${prefix}[]`));
  const props = n.properties as Record<string, unknown> | undefined;
  if (props) {
    for (const [key, child] of Object.entries(props)) {
      const path = prefix ? `${prefix}.${key}` : key;
      out.push(path, ...schemaKeyPaths(child, path));
    }
  }
  return [...new Set(out)];
}
