// Owns reading links an earlier build stored: the whole booking snapshot (customer names, e-mails, notes) in
// `booking`, and nothing about what the event shows. Such a link becomes what links keep now: the snapshot's times,
// status and therapist, and digests of the template inputs it held, the ones it lacked pending an enrichment.
import { judge } from "./inputs.ts";
import type { LinkUpgrade } from "./links.ts";
import type { Mapping } from "./mapping.ts";
import type { Planner } from "./planner.ts";
import { coreOf } from "./snapshot.ts";
import type { Link, Snapshot } from "./types.ts";

const CORE_KEYS = new Set(["id", "start_time", "end_time", "status", "therapist_id"]);

/** A link of an earlier build: its booking holds more than the core, and nothing says what its event shows. */
export function isOldLink(link: Link): boolean {
  return link.rendered === undefined && Object.keys(link.booking ?? {}).some((k) => !CORE_KEYS.has(k));
}

export function linkUpgrade(mapping: Mapping, planner: Planner): LinkUpgrade {
  return (link) => {
    if (!isOldLink(link)) return undefined;
    const snapshot = link.booking as Snapshot;
    const { enrich: _, rendered: __, ...rest } = link;
    const upgraded: Link = { ...rest, booking: coreOf(snapshot) };
    const therapist = mapping.therapist(link.therapistId);
    if (link.present && therapist) {
      // The event was rendered from this snapshot: what it held is what the event shows, what it lacked it never did.
      const verdict = judge(planner.settings(therapist), snapshot, false, undefined, true);
      if (verdict.kind === "complete" || verdict.kind === "partial") {
        upgraded.rendered = verdict.rendered;
        if (verdict.rendered.pending?.length) upgraded.enrich = true;
      }
    }
    return upgraded;
  };
}
