// Owns `calbridge history APPOINTMENT_ID [--json]`: reads one appointment's history from the store the daemon writes
// it to, and prints it as a timeline (or as JSON for machines).
import { systemClock } from "../clock.ts";
import type { Config } from "../config/schema.ts";
import { openStore } from "../store/store.ts";
import { historyLog } from "../sync/core.ts";
import { formatHistory } from "./history-output.ts";

/** What the command prints, and whether anything was found. */
export interface HistoryCommandResult {
  found: boolean;
  output: string;
}

export async function historyCommand(
  config: Config,
  appointmentId: string,
  json: boolean,
): Promise<HistoryCommandResult> {
  // The daemon's store or none: a new empty one (run from another folder than the daemon's, a relative store.url
  // points elsewhere) would answer "decided nothing about it", the wrong answer in a customer's dispute.
  const store = await openStore(config.store.url, { connectTimeoutMs: 5000, mustExist: true });
  try {
    const history = await historyLog(store, config, systemClock).read(appointmentId);
    const retentionDays = config.history.retention_days;
    const found = history.entries.length > 0;
    if (json) return { found, output: JSON.stringify({ appointmentId, retentionDays, ...history }, null, 2) };
    return {
      found,
      output: found
        ? formatHistory(appointmentId, history, retentionDays)
        : `No history of appointment ${appointmentId}: calbridge has decided nothing about it in the last ${retentionDays} days (history.retention_days), or the id is not the booking service's.`,
    };
  } finally {
    await store.close();
  }
}
