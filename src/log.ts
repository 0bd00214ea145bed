// Owns logging: pino JSON lines, secrets removed twice (known field paths by `redact`, and every registered secret
// value scrubbed from the finished line, wherever it appears: in a message, an error, a URL).
import { type DestinationStream, type Logger, pino } from "pino";

export type { Logger } from "pino";

const REDACT_PATHS = [
  "api_key",
  "apiKey",
  "authorization",
  "Authorization",
  "headers.authorization",
  "req.headers.authorization",
  "*.api_key",
  "*.signing_secrets",
  "*.client_secret",
  "*.refresh_token",
  "*.access_token",
  "*.private_key",
  "secret",
  "token",
];

/** Values that must never reach a log line. Filled from the configuration at load time. */
export class SecretRegistry {
  #secrets = new Set<string>();
  /** Each secret as written and JSON-escaped, longest first (a secret containing another is scrubbed whole). */
  #forms: string[] | undefined;

  add(value: string | undefined | null): void {
    if (!value) return;
    const v = value.trim();
    // Very short values would scrub ordinary words; config validation demands real secrets anyway.
    if (v.length < 6 || this.#secrets.has(v)) return;
    this.#secrets.add(v);
    this.#forms = undefined;
  }

  #ephemeral: string[] = [];

  /**
   * A short-lived secret (an access token): only the newest 256 are kept, so a long-running daemon that refreshes
   * tokens all day does not grow the list (older tokens have expired and are worthless).
   */
  addEphemeral(value: string | undefined | null): void {
    if (!value || value.trim().length < 6 || this.#secrets.has(value.trim())) return;
    this.add(value);
    this.#ephemeral.push(value.trim());
    while (this.#ephemeral.length > 256) {
      this.#secrets.delete(this.#ephemeral.shift()!);
      this.#forms = undefined;
    }
  }

  get size(): number {
    return this.#secrets.size;
  }

  /**
   * Each form is searched for in turn (String#includes), not as one alternation of every secret in a RegExp: the
   * ephemeral ones change all day (a channel token per calendar, an access token per therapist an hour), and V8
   * compiled each new alternation of hundreds of secrets to native code anew (~25 ms and megabytes each), so a start
   * that opens 1,000 push channels held ~80 MB of compiled patterns at its peak. Searching is ~3 times faster too.
   */
  scrub(line: string): string {
    if (this.#secrets.size === 0) return line;
    this.#forms ??= [...new Set([...this.#secrets].flatMap((s) => [s, JSON.stringify(s).slice(1, -1)]))].sort(
      (a, b) => b.length - a.length,
    );
    let out = line;
    for (const form of this.#forms) if (out.includes(form)) out = out.replaceAll(form, "[REDACTED]");
    return out;
  }
}

/** The process-wide registry; tests and the config loader add to it. */
export const secrets = new SecretRegistry();

export interface LogOptions {
  level?: string;
  /** Pretty, human-readable output; defaults to on when stdout is a terminal. */
  pretty?: boolean;
  /** Where lines go; defaults to stdout. Tests pass a Writable to collect lines. */
  destination?: DestinationStream;
  registry?: SecretRegistry;
}

/** The levels LOG_LEVEL takes: pino's, most to least verbose, and `silent`. */
export const LOG_LEVELS: readonly string[] = [
  ...Object.entries(pino.levels.values)
    .sort(([, a], [, b]) => a - b)
    .map(([name]) => name),
  "silent",
];

/** A LOG_LEVEL that is none of LOG_LEVELS: a configuration error of the environment (the CLI exits 2). */
export class LogLevelError extends Error {
  constructor(value: string) {
    super(`LOG_LEVEL ${JSON.stringify(value)}: expected one of ${LOG_LEVELS.join(", ")}`);
    this.name = "LogLevelError";
  }
}

/**
 * The level to log at: `value` (else LOG_LEVEL, else `fallback`), in any case; empty counts as unset. One pino does not
 * know throws a LogLevelError naming LOG_LEVEL and the levels it takes (pino's own "default level:warning must be
 * included in custom levels" names neither).
 */
export function logLevel(value: string | undefined = process.env.LOG_LEVEL, fallback = "info"): string {
  const level = value?.trim().toLowerCase() || fallback;
  if (!LOG_LEVELS.includes(level)) throw new LogLevelError(value ?? level);
  return level;
}

export function createLogger(options: LogOptions = {}): Logger {
  const registry = options.registry ?? secrets;
  const level = logLevel(options.level ?? process.env.LOG_LEVEL);
  const pretty = options.pretty ?? (options.destination === undefined && process.stdout.isTTY === true);
  const base = {
    level,
    base: { name: "calbridge" },
    redact: { paths: REDACT_PATHS, censor: "[REDACTED]" },
    hooks: { streamWrite: (line: string) => registry.scrub(line) },
    timestamp: pino.stdTimeFunctions.isoTime,
  };
  if (options.destination) return pino(base, options.destination);
  if (pretty) {
    return pino({
      ...base,
      transport: { target: "pino-pretty", options: { colorize: true, translateTime: "SYS:HH:MM:ss.l" } },
    });
  }
  return pino(base);
}

/** A logger that drops everything, for code paths that were given none. */
export const silentLogger: Logger = pino({ level: "silent" });
