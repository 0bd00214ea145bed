// Owns how `calbridge reconcile` shows its result: a readable table of the plan, or the report as JSON.
import type { ReconcileReport } from "../sync/reconcile.ts";
import type { PlanEntry } from "../sync/types.ts";

function target(a: PlanEntry): string {
  if (a.kind === "move") return `${a.from.therapistId} → ${a.to.therapistId}`;
  if ("therapistId" in a) return a.therapistId;
  return "";
}

function detail(a: PlanEntry): string {
  if (a.kind === "writeback_reschedule") return `PATCH start_time=${a.startTime}; ${a.reason}`;
  if (a.kind === "writeback_cancel") return `POST cancel; ${a.reason}`;
  return a.reason;
}

export function formatPlan(report: ReconcileReport): string {
  const lines: string[] = [];
  const head = report.dryRun ? "Plan (dry run: nothing was written)" : "Reconciliation";
  lines.push(`${head}: window ${report.window.from} .. ${report.window.to}`);
  lines.push(
    `  appointments listed: ${report.appointments}, managed events: ${report.managedEvents}, unmapped skipped: ${report.skippedUnmapped}`,
  );
  const unlisted = Object.keys(report.calendarErrors).length;
  const held = report.heldWritebacks;
  if (report.plan.length === 0) {
    // They agree only where both sides were seen (a calendar that could not be listed was not compared), and where
    // no calendar change waits for a person's decision.
    lines.push(
      unlisted > 0
        ? `  nothing planned for the calendars listed; ${unlisted} calendar(s) could not be listed (below)`
        : held > 0
          ? "  nothing planned besides the calendar changes held (below)"
          : "  nothing to do: calendars and bookings agree",
    );
  } else {
    const rows = report.plan.map((a) => [a.kind, a.appointmentId, target(a), detail(a)]);
    const header = ["ACTION", "APPOINTMENT", "THERAPIST", "WHY"];
    const widths = header.map((h, i) => Math.min(40, Math.max(h.length, ...rows.map((r) => r[i]!.length))));
    const fmt = (r: string[]) => r.map((c, i) => (i < 3 ? c.padEnd(widths[i]!) : c)).join("  ");
    lines.push("", `  ${fmt(header)}`, ...rows.map((r) => `  ${fmt(r)}`));
    lines.push(
      "",
      `  totals: ${Object.entries(report.counts)
        .map(([k, n]) => `${k} ${n}`)
        .join(", ")}`,
    );
  }
  const e = report.enrichment;
  if (e && e.pending > 0) {
    lines.push(
      "",
      `  enrichments pending: ${e.pending} event(s) lack fields only GET /v1/appointments/:id gives (notes, phone, add-ons, ...);`,
      `  one read each with leftover rate budget (at most ${e.perMinute} a minute): at least ${e.minutes} minute(s)${report.dryRun ? "" : ", while the daemon runs"}`,
    );
  }
  if (held > 0) {
    lines.push(
      "",
      `  HELD: ${held} calendar change(s) held by the write-back guard; nothing was sent for them. \`calbridge writeback held\` lists them, to --apply or --restore.`,
    );
  }
  if (report.guard.tripped) {
    lines.push(
      "",
      `  MASS-DELETION GUARD: ${report.guard.destructive} removals planned, over the limit of ${report.guard.limit} (of ${report.guard.managed} managed events).`,
      "  Nothing was deleted or cancelled. If this is intended, run `calbridge reconcile --force`.",
    );
  }
  for (const [t, err] of Object.entries(report.calendarErrors)) lines.push(`  calendar of ${t} not listed: ${err}`);
  if (report.failed > 0) lines.push(`  ${report.failed} appointment(s) failed; see the log and the dead letters`);
  const unreadable = report.unreadableLinks;
  if (unreadable.length > 0) {
    lines.push(
      `  ${unreadable.length} appointment(s) left alone, their link in the store cannot be read: ${unreadable.slice(0, 10).join(", ")}${unreadable.length > 10 ? ", ..." : ""}`,
      "  restore those records (table links) from a backup or remove them; the next reconciliation adopts their events",
    );
  }
  return lines.join("\n");
}

/** Text written to the output at once: large enough that a report takes few writes, small beside the report itself. */
const PIECE_CHARS = 64 * 1024;

/**
 * Writes `JSON.stringify(value, null, 2)` followed by a newline, byte for byte, without building it as one string:
 * the members of a top-level object that are arrays are written one element at a time, in pieces of about 64 KB,
 * waiting for the output to drain. A cold reconciliation's report (a plan entry per appointment) made a ~10 MB
 * string and its intermediate copies, which were the largest thing the `reconcile --json` process held.
 */
export async function writeJsonInPieces(out: NodeJS.WritableStream, value: unknown): Promise<void> {
  let piece = "";
  const push = async (text: string) => {
    piece += text;
    if (piece.length < PIECE_CHARS) return;
    const full = piece;
    piece = "";
    if (!out.write(full)) await new Promise<void>((resolve) => out.once("drain", () => resolve()));
  };
  const plain = value !== null && typeof value === "object" && !Array.isArray(value) && !("toJSON" in value);
  if (!plain) {
    await push(`${JSON.stringify(value, null, 2)}\n`);
  } else {
    let first = true;
    const open = async (key: string) => {
      await push(`${first ? "{" : ","}\n  ${JSON.stringify(key)}: `);
      first = false;
    };
    for (const [key, member] of Object.entries(value as Record<string, unknown>)) {
      if (Array.isArray(member) && member.length > 0) {
        await open(key);
        for (const [j, element] of member.entries()) {
          // As in an array: what JSON cannot show (undefined, a function) is written as null.
          const text = JSON.stringify(element, null, 2) ?? "null";
          await push(`${j === 0 ? "[" : ","}\n    ${text.replaceAll("\n", "\n    ")}`);
        }
        await push("\n  ]");
        continue;
      }
      // Undefined, a function or a symbol: left out, as JSON.stringify leaves them out of an object.
      const text = JSON.stringify(member, null, 2) as string | undefined;
      if (text === undefined) continue;
      await open(key);
      await push(text.replaceAll("\n", "\n  "));
    }
    await push(first ? "{}" : "\n}");
    await push("\n");
  }
  if (piece.length > 0 && !out.write(piece)) await new Promise<void>((resolve) => out.once("drain", () => resolve()));
}
