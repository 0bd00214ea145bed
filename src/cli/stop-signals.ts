// Owns what a stop signal does to `calbridge run` and `calbridge demo` once they are running: the first SIGTERM or
// SIGINT starts the orderly stop; a later one must not end it partway (Node's default once no handler is left: the
// process killed, the store not closed). Supervisors send a second SIGTERM routinely: tini (`docker run --init`,
// compose `init: true`) forwards each one it gets, a systemd unit's ExecStop= sends one before systemd's own, an
// operator types `kill` twice. So a repeated SIGTERM is ignored. A second Ctrl-C is a person asking to end now (the
// usual convention): a SIGINT at least SAME_CTRL_C_MS after the stop began ends the process at once with exit code 130;
// one sooner is the same Ctrl-C delivered twice (the terminal sends it to the whole foreground group, and a wrapper such
// as `npm start` passes its own on too) and is ignored.

export type StopSignal = "SIGTERM" | "SIGINT";

/** The exit code of a second Ctrl-C: 128 + SIGINT, as a shell reports a process ended by it. */
export const FORCED_EXIT_CODE = 130;
/** A SIGINT this soon after the stop began is taken as the same Ctrl-C, delivered twice. */
export const SAME_CTRL_C_MS = 1_000;

export interface StopSignalHandlers {
  /** The first SIGTERM or SIGINT: start the orderly stop. */
  stop: (signal: StopSignal) => void;
  /** A later signal that is ignored: the stop goes on. */
  repeated: (signal: StopSignal) => void;
  /** A second Ctrl-C: say so; the process then exits with FORCED_EXIT_CODE. */
  forced: () => void;
}

/** Takes SIGTERM and SIGINT (process.on: every one of them, not only the first); answers the function that lets go. */
export function takeStopSignals(handlers: StopSignalHandlers): () => void {
  let stopAt: number | undefined;
  const on = (signal: StopSignal) => {
    if (stopAt === undefined) {
      stopAt = Date.now();
      handlers.stop(signal);
    } else if (signal === "SIGINT" && Date.now() - stopAt >= SAME_CTRL_C_MS) {
      handlers.forced();
      process.exit(FORCED_EXIT_CODE);
    } else {
      handlers.repeated(signal);
    }
  };
  const onTerm = () => on("SIGTERM");
  const onInt = () => on("SIGINT");
  process.on("SIGTERM", onTerm);
  process.on("SIGINT", onInt);
  return () => {
    process.off("SIGTERM", onTerm);
    process.off("SIGINT", onInt);
  };
}
