// Owns reading the configuration: YAML text → `${ENV}` / `${file:/path}` references resolved → validated Config,
// or a ConfigError whose problems each name the YAML path (and line) of what is wrong.
import { readFileSync } from "node:fs";
import { isMap, isSeq, LineCounter, parseDocument } from "yaml";
import type { z } from "zod";
import { secrets as defaultSecrets, type SecretRegistry } from "../log.ts";
import { type Config, ConfigSchema } from "./schema.ts";
import { syntaxProblems } from "./syntax.ts";

export class ConfigError extends Error {
  readonly problems: string[];
  constructor(source: string, problems: string[]) {
    super(`${source}: ${problems.length} problem${problems.length === 1 ? "" : "s"}\n  ${problems.join("\n  ")}`);
    this.name = "ConfigError";
    this.problems = problems;
  }
}

export interface LoadOptions {
  env?: NodeJS.ProcessEnv;
  /** Reads `${file:...}` references; injectable for tests. */
  readFile?: (path: string) => string;
  /** Where resolved secret values are registered so that logs never show them. */
  secrets?: SecretRegistry;
  /** Name used in messages (the file path). */
  source?: string;
}

type PathKey = string | number;

export function formatPath(path: readonly PropertyKey[]): string {
  let out = "";
  for (const key of path) {
    if (typeof key === "number") out += `[${key}]`;
    else out += out ? `.${String(key)}` : String(key);
  }
  return out || "(top level)";
}

const REF = /\$\{([^}]*)\}/g;

/** Replaces `${VAR}` and `${file:/path}` in every string of the parsed document; `$${` stays a literal `${`. */
function resolveRefs(
  value: unknown,
  path: PathKey[],
  opts: Required<Pick<LoadOptions, "env" | "readFile">> & { at: (path: PathKey[], problem: string) => string },
  problems: string[],
  resolved: string[],
): unknown {
  if (typeof value === "string") {
    const escaped = value.replaceAll("$${", "\u0000");
    // A `${` left once every reference is read was never closed: taken as written, a typo of `${BOOKING_API_KEY}`
    // was sent as the API key, or made every webhook fail its signature check.
    if (escaped.replace(REF, "").includes("${")) {
      problems.push(opts.at(path, `a "\${" reference is never closed (a missing "}"?; write $\${ for a literal \${)`));
    }
    const out = escaped.replace(REF, (whole, ref: string) => {
      const name = ref.trim();
      if (name.startsWith("file:")) {
        const file = name.slice(5);
        try {
          const content = opts.readFile(file).replace(/\r?\n$/, "");
          resolved.push(content);
          return content;
        } catch (err) {
          const code = (err as NodeJS.ErrnoException).code ?? "unreadable";
          problems.push(opts.at(path, `cannot read ${file} (${code})`));
          return whole;
        }
      }
      if (!/^[A-Za-z_][A-Za-z0-9_]*$/.test(name)) {
        problems.push(opts.at(path, `"${whole}" is not a valid reference (use \${NAME} or \${file:/path})`));
        return whole;
      }
      const v = opts.env[name];
      if (v === undefined || v === "") {
        problems.push(opts.at(path, `environment variable ${name} is not set`));
        return whole;
      }
      resolved.push(v);
      return v;
    });
    return out.replaceAll("\u0000", "${");
  }
  if (value && typeof value === "object") {
    // YAML anchors can make a value contain itself, and nothing in a configuration nests this deep.
    if (path.length > MAX_DEPTH) {
      const at = formatPath(path.slice(0, 2));
      throw new ConfigError("config", [
        `${at}: nested deeper than ${MAX_DEPTH} levels (a YAML anchor used inside itself?)`,
      ]);
    }
    if (Array.isArray(value)) return value.map((v, i) => resolveRefs(v, [...path, i], opts, problems, resolved));
    return Object.fromEntries(
      Object.entries(value).map(([k, v]) => [k, resolveRefs(v, [...path, k], opts, problems, resolved)]),
    );
  }
  return value;
}

/** Deepest nesting a configuration may have (the schema needs four levels). */
const MAX_DEPTH = 32;

function issueMessage(issue: z.core.$ZodIssue): string {
  if (issue.code === "unrecognized_keys") {
    return `unknown key${issue.keys.length > 1 ? "s" : ""} ${issue.keys.map((k) => `"${k}"`).join(", ")} (a typo?)`;
  }
  // A wrong type's message is the parse's (typeProblem), or the schema's own: a secret's names the type, not the value.
  if (issue.code === "invalid_type") return issue.message;
  if (issue.code === "invalid_value") return `expected one of ${issue.values.map((v) => JSON.stringify(v)).join(", ")}`;
  if (issue.code === "invalid_union" && "discriminator" in issue) {
    const given = (issue.input as Record<string, unknown> | undefined)?.[String(issue.discriminator)];
    return given === undefined ? "required" : `unknown ${String(issue.discriminator)}`;
  }
  return issue.message;
}

/**
 * A wrong type's message, unless the schema words its own (a secret's, which must not show the value): "required"
 * when the key is missing, else what was expected and the value found.
 */
function typeProblem(iss: z.core.$ZodRawIssue): string | undefined {
  if (iss.code !== "invalid_type") return undefined;
  return iss.input === undefined ? "required" : `expected ${iss.expected}, found ${describe(iss.input)}`;
}

function describe(v: unknown): string {
  if (v === null) return "null";
  if (Array.isArray(v)) return "a list";
  if (typeof v === "object") return "a mapping";
  if (typeof v === "string") return `"${v.length > 40 ? `${v.slice(0, 40)}…` : v}"`;
  return `${typeof v} ${String(v)}`;
}

/** Parses and validates configuration text. Throws ConfigError listing every problem found. */
export function parseConfig(text: string, options: LoadOptions = {}): Config {
  try {
    return parseUnguarded(text, options);
  } catch (err) {
    // Whatever a malformed file makes a parser do, the answer is a configuration error, never a crash.
    if (err instanceof RangeError) {
      throw new ConfigError(options.source ?? "config", [`(top level): the file cannot be read (${err.message})`]);
    }
    throw err;
  }
}

function parseUnguarded(text: string, options: LoadOptions): Config {
  const source = options.source ?? "config";
  const lineCounter = new LineCounter();
  // Merge keys (`<<: *defaults`) as most YAML examples use them: keys written beside one win over the merged ones.
  const doc = parseDocument(text, { lineCounter, prettyErrors: false, uniqueKeys: true, merge: true });
  // The library's warnings are problems too: an unknown tag (`!secret name`, as Home Assistant writes it) would
  // otherwise be read as the plain string after it, and that string used as the key.
  const unread = [...doc.errors, ...doc.warnings];
  for (const w of unread) {
    if (w.code === "TAG_RESOLVE_FAILED") w.message += " (tags are not read here; a secret is ${NAME} or ${file:/path})";
  }
  if (unread.length > 0) throw new ConfigError(source, syntaxProblems(text, unread, lineCounter));
  let raw: unknown;
  try {
    raw = doc.toJS() ?? {};
  } catch (err) {
    // The yaml library throws on an alias with no anchor and on too many alias expansions (a "billion laughs" file).
    throw new ConfigError(source, [`(top level): ${(err as Error).message}`]);
  }
  if (typeof raw !== "object" || Array.isArray(raw)) {
    throw new ConfigError(source, ["(top level): expected a mapping of sections (booking, webhooks, ...)"]);
  }
  const problems: string[] = [];
  const resolvedSecrets: string[] = [];
  let resolved: unknown;
  try {
    resolved = resolveRefs(
      raw,
      [],
      {
        env: options.env ?? process.env,
        readFile: options.readFile ?? ((p) => readFileSync(p, "utf8")),
        // Named with its line, as every other problem is.
        at: (path, problem) => {
          const line = lineOf(doc, lineCounter, path);
          return `${formatPath(path)}: ${problem}${line ? ` (line ${line})` : ""}`;
        },
      },
      problems,
      resolvedSecrets,
    );
  } catch (err) {
    if (err instanceof ConfigError) throw new ConfigError(source, err.problems);
    throw err;
  }
  const result = ConfigSchema.safeParse(resolved, {
    // With the input reported, an unknown discriminator is told from a missing one (issueMessage).
    reportInput: true,
    error: typeProblem,
  });
  if (!result.success) {
    for (const issue of result.error.issues) {
      const at = issue.code === "unrecognized_keys" ? [...issue.path, issue.keys[0] ?? ""] : issue.path;
      const line = lineOf(doc, lineCounter, at as PathKey[]);
      problems.push(`${formatPath(issue.path)}: ${issueMessage(issue)}${line ? ` (line ${line})` : ""}`);
    }
  }
  if (problems.length > 0) {
    throw new ConfigError(
      source,
      problems.map((p) => hideResolved(p, resolvedSecrets)),
    );
  }
  const cfg = result.data as Config;
  registerSecrets(cfg, resolvedSecrets, options.secrets ?? defaultSecrets);
  return cfg;
}

/**
 * Values that came from `${ENV}` or `${file:...}` references may be secrets (an API key put where a number belongs):
 * a problem names their place, never them, whole or cut short as `describe` shows long values.
 */
function hideResolved(problem: string, values: string[]): string {
  let out = problem;
  for (const v of [...values].sort((a, b) => b.length - a.length)) {
    if (v.length < 4) continue;
    out = out.split(v).join("[a value from a ${...} reference]");
    if (v.length > 40) out = out.split(v.slice(0, 40)).join("[a value from a ${...} reference]");
  }
  return out;
}

/** Reads, parses and validates the configuration file at `path`. */
export function loadConfig(path: string, options: LoadOptions = {}): Config {
  let text: string;
  try {
    text = readFileSync(path, "utf8");
  } catch (err) {
    const code = (err as NodeJS.ErrnoException).code;
    throw new ConfigError(path, [
      code === "ENOENT"
        ? "file not found (pass --config FILE or set CALBRIDGE_CONFIG)"
        : `cannot read the file (${code ?? String(err)})`,
    ]);
  }
  return parseConfig(text, { ...options, source: path });
}

function lineOf(doc: ReturnType<typeof parseDocument>, lc: LineCounter, path: PathKey[]): number | undefined {
  // The deepest node that exists on the path: for a missing key that is its parent mapping.
  for (let n = path.length; n >= 0; n--) {
    const node = doc.getIn(path.slice(0, n), true) as { range?: [number, number, number] } | undefined;
    if (node && (isMap(node) || isSeq(node) || node.range)) {
      const offset = node.range?.[0];
      if (offset !== undefined) return lc.linePos(offset).line;
    }
  }
  return undefined;
}

/**
 * The parts of a webhook address that may quote its credential on their own: the whole address, its path and query (a
 * receiver's error page echoes them: Express answers "Cannot POST /hooks/.../TOKEN") when they carry a token, each path
 * segment or query value long enough to be one, and the password of the user info.
 */
function urlCredentials(address: string): string[] {
  const parts = [address];
  let url: URL;
  try {
    url = new URL(address);
  } catch {
    return parts;
  }
  if (url.password) parts.push(decodeURIComponent(url.password));
  const tokens = [
    ...url.pathname.split("/").filter((segment) => segment.length >= TOKEN_LENGTH),
    ...[...url.searchParams.values()].filter((value) => value.length >= TOKEN_LENGTH),
  ];
  // A path without a token (/alerts) is no secret: scrubbing it would garble every line that names it.
  if (tokens.length > 0) parts.push(`${url.pathname}${url.search}`, url.pathname, ...tokens);
  return parts;
}

/** Shortest path segment or query value taken for a token (Slack's are 24 characters, hookshot's longer). */
const TOKEN_LENGTH = 16;

function registerSecrets(cfg: Config, resolved: string[], registry: SecretRegistry): void {
  registry.add(cfg.booking.api_key);
  for (const s of cfg.webhooks.signing_secrets) registry.add(s);
  registry.add(cfg.google.oauth?.client_secret);
  registry.add(cfg.google.push?.token);
  registry.add(cfg.store.encryption_key);
  for (const k of cfg.store.previous_encryption_keys) registry.add(k);
  for (const t of cfg.therapists) if (t.auth?.type === "oauth") registry.add(t.auth.refresh_token);
  // A chat's incoming-webhook address is its credential (Slack's, Teams' and hookshot's carry the token in the path).
  for (const target of cfg.notify.targets) {
    if (target.type === "webhook") for (const part of urlCredentials(target.url)) registry.add(part);
    else registry.add(target.smtp.auth?.pass);
  }
  for (const s of resolved) registry.add(s);
}
