// Owns the signals `calbridge run` receives before its command takes them over. The command line's modules take
// seconds to load (hundreds of them, before any of their code runs): without a handler, Node's default for SIGHUP
// ended the daemon in that time (a config-management reload right after a restart), and SIGTERM or SIGINT ended it
// without an orderly stop. The entry (cli.ts) calls catchEarlySignals before it loads the rest; this module imports
// nothing.

type StopSignal = "SIGTERM" | "SIGINT";

export interface EarlySignals {
  /** A SIGHUP arrived: the daemon reloads its file once it has started. */
  hangup: boolean;
}

let caught: EarlySignals | undefined;
const onHangup = () => {
  if (caught) caught.hangup = true;
};
// Nothing is open yet (the store is opened by the command, after this hands over): stopping is exiting.
const onStop = (signal: StopSignal) => {
  process.stderr.write(`calbridge: ${signal} before the start: stopped\n`);
  process.exit(0);
};
const onTerm = () => onStop("SIGTERM");
const onInt = () => onStop("SIGINT");

/** The command in argv (node, script, ...): the first word that is neither an option nor --config's value. */
export function commandOf(argv: readonly string[]): string | undefined {
  const args = argv.slice(2);
  for (let i = 0; i < args.length; i++) {
    const arg = args[i]!;
    if (arg === "-c" || arg === "--config") i++;
    else if (!arg.startsWith("-")) return arg;
  }
  return undefined;
}

/** For `calbridge run` only (a one-shot command's SIGHUP, a closed terminal, still ends it): holds the signals. */
export function catchEarlySignals(argv: readonly string[]): void {
  if (caught || commandOf(argv) !== "run") return;
  caught = { hangup: false };
  process.on("SIGHUP", onHangup);
  process.on("SIGTERM", onTerm);
  process.on("SIGINT", onInt);
}

/**
 * Hands the signals over to the caller, who has installed its own handlers just before (the same tick: none is
 * lost): what arrived meanwhile. Nothing when they were not caught (main() called in process, by the tests).
 */
export function takeEarlySignals(): EarlySignals {
  const before = caught ?? { hangup: false };
  if (caught) {
    process.off("SIGHUP", onHangup);
    process.off("SIGTERM", onTerm);
    process.off("SIGINT", onInt);
  }
  caught = undefined;
  return before;
}
