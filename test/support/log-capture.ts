// Collects a logger's JSON lines in memory so tests can assert on what was logged.
import { Writable } from "node:stream";
import { createLogger, type Logger, type SecretRegistry, secrets } from "../../src/log.ts";

export interface CapturedLog {
  logger: Logger;
  lines: Record<string, unknown>[];
  raw: string[];
  find(predicate: (line: Record<string, unknown>) => boolean): Record<string, unknown> | undefined;
}

export function captureLog(level = "debug", registry: SecretRegistry = secrets): CapturedLog {
  const raw: string[] = [];
  const lines: Record<string, unknown>[] = [];
  const destination = new Writable({
    write(chunk, _enc, cb) {
      for (const l of String(chunk).split("\n")) {
        if (!l) continue;
        raw.push(l);
        lines.push(JSON.parse(l) as Record<string, unknown>);
      }
      cb();
    },
  });
  const logger = createLogger({ level, destination, registry });
  return { logger, lines, raw, find: (p) => lines.find(p) };
}
