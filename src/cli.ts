#!/usr/bin/env node
// The command line's entry (`calbridge`, dist/cli.js): a few lines that load the commands (commands.ts), which takes
// seconds (hundreds of modules, all loaded before any of their code runs).
// First: how the heap grows is set before the rest loads.
import "./heap.ts";

/** Runs `calbridge` with argv (node, script, ...); answers the exit code. */
export async function main(argv: string[]): Promise<number> {
  const commands = await import("./commands.ts");
  return commands.main(argv);
}

const invoked = process.argv[1] ? new URL(`file://${process.argv[1]}`).pathname : "";
if (import.meta.filename === invoked || invoked.endsWith("/calbridge") || invoked.endsWith("/cli.js")) {
  main(process.argv).then((code) => {
    process.exitCode = code;
  });
}
