// Owns the JSON Schema of the configuration, generated from the same zod schema that validates it.
import { isDeepStrictEqual } from "node:util";
import { z } from "zod";
import { ConfigSchema, jsonInputForm } from "./schema.ts";

/**
 * zod leaves out the default of a value with a transform (io: input), the default being the output's; it is the
 * input's too when it parses to itself (a colour id's "2"), so it is put back. A value registered in jsonInputForm
 * gets that form instead of the one zod derived from its input (which lacks a refine's limits).
 */
function override(ctx: { zodSchema: z.core.$ZodTypes; jsonSchema: z.core.JSONSchema.BaseSchema }): void {
  const { zodSchema, jsonSchema } = ctx;
  const form = jsonInputForm.get(zodSchema);
  if (form) {
    for (const key of Object.keys(jsonSchema)) if (key !== "description") delete jsonSchema[key];
    Object.assign(jsonSchema, form);
  }
  if (zodSchema._zod.def.type !== "default" || jsonSchema.default !== undefined) return;
  const { innerType, defaultValue } = (zodSchema as z.core.$ZodDefault)._zod.def;
  const parsed = z.safeParse(innerType, defaultValue);
  if (parsed.success && isDeepStrictEqual(parsed.data, defaultValue)) jsonSchema.default = defaultValue;
}

export function configJsonSchema(): Record<string, unknown> {
  const schema = z.toJSONSchema(ConfigSchema, { io: "input", unrepresentable: "any", override }) as Record<
    string,
    unknown
  >;
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
