#!/usr/bin/env node
// The command line's entry (`calbridge`, dist/cli.js): it catches `calbridge run`'s signals first, then loads the
// commands (commands.ts), which takes seconds: a SIGHUP in that time no longer ends the daemon (early-signals.ts).
// First: how the heap grows is set before the rest loads.
import "./heap.ts";
import { realpathSync } from "node:fs";
import { catchEarlySignals } from "./cli/early-signals.ts";

/** Runs `calbridge` with argv (node, script, ...); answers the exit code. */
export async function main(argv: string[]): Promise<number> {
  const commands = await import("./commands.ts");
  return commands.main(argv);
}

/**
 * Whether this file is the script node was started with (directly, or through the `calbridge` bin's link), compared
 * as real paths: a path read as a URL lost a folder with a space, a non-ASCII letter, `#` or `?` in its name, and the
 * command then did nothing and exited 0.
 */
function invokedAsScript(): boolean {
  const script = process.argv[1];
  if (!script) return false;
  try {
    return realpathSync(script) === realpathSync(import.meta.filename);
  } catch {
    return false; // not a file (node -e, a REPL): imported, not run
  }
}

if (invokedAsScript()) {
  catchEarlySignals(process.argv);
  main(process.argv).then((code) => {
    process.exitCode = code;
  });
}
