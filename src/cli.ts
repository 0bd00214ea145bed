#!/usr/bin/env node
// The command line's entry (`calbridge`, dist/cli.js): it catches `calbridge run`'s signals first, then loads the
// commands (commands.ts), which takes seconds: a SIGHUP in that time no longer ends the daemon (early-signals.ts).
// First: how the heap grows is set before the rest loads.
import "./heap.ts";
import { catchEarlySignals } from "./cli/early-signals.ts";

/** Runs `calbridge` with argv (node, script, ...); answers the exit code. */
export async function main(argv: string[]): Promise<number> {
  const commands = await import("./commands.ts");
  return commands.main(argv);
}

const invoked = process.argv[1] ? new URL(`file://${process.argv[1]}`).pathname : "";
if (import.meta.filename === invoked || invoked.endsWith("/calbridge") || invoked.endsWith("/cli.js")) {
  catchEarlySignals(process.argv);
  main(process.argv).then((code) => {
    process.exitCode = code;
  });
}
