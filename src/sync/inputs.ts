// Owns what an event's text is made of, as the sync side tracks it: which template inputs a therapist's event
// settings use, which of them a booking state carries (payloads and list items lack the full form's fields), keyed
// digests of the values an event shows (never the values), and the verdict whether a state renders the event without
// showing less than it does.
import { hash } from "node:crypto";
import { canonicalJson } from "../calendar/fingerprint.ts";
import { PLACEHOLDERS, type Placeholder } from "../calendar/placeholders.ts";
import type { EventConfig } from "../calendar/render.ts";
import { placeholdersOf } from "../calendar/template.ts";
import type { Link, Rendered, Snapshot } from "./types.ts";

/**
 * Thrown while planning when the state at hand (a payload, a list item) cannot render the event without showing less
 * than it does now, and the change cannot wait for an enrichment: the caller reads the full form and plans again.
 */
export class NeedsFullRead extends Error {
  constructor(appointmentId: string, why: string) {
    super(`appointment ${appointmentId}: ${why}; the full form is read`);
    this.name = "NeedsFullRead";
  }
}

/** A therapist's event settings as the sync side uses them: the renderer's config, its inputs and its digest. */
export interface RenderSettings {
  event: EventConfig;
  /** Template inputs read from the appointment (core ones excluded: the link keeps what they derive from). */
  needed: readonly Placeholder[];
  /** Digest of everything besides the inputs that shapes the event: templates, colours, time zone, reminders. */
  digest: string;
}

export function renderSettings(event: EventConfig, timezone: string): RenderSettings {
  const used = new Set([...placeholdersOf(event.title), ...placeholdersOf(event.description)]);
  const needed = PLACEHOLDERS.filter((p) => p.read && (p.contact ? event.include_customer_contact : used.has(p.name)));
  return { event, needed, digest: short(canonicalJson({ event, timezone })) };
}

// crypto.hash: one call, no Hash object per digest (planning takes several digests per appointment).
const short = (text: string) => hash("sha256", text, "base64url").slice(0, 16);

/**
 * A digest of one input's value, keyed by the appointment and the input's name: it shows whether a value changed, and
 * differs between appointments for the same value. Someone holding the store who guesses a value can test the guess,
 * as with any hash; the value itself is never stored.
 */
export function inputDigest(appointmentId: string, name: string, value: string): string {
  return short(`${appointmentId}\u0000${name}\u0000${value}`);
}

/** The value of a needed input; undefined where the state's form lacks it (the full form lacks nothing). */
function inputValue(p: Placeholder, appt: Snapshot, full: boolean): string | undefined {
  const v = p.read!(appt);
  return v === undefined ? (full ? "" : undefined) : (v ?? "");
}

/**
 * How a booking state relates to what the linked event shows:
 * - complete: every input is known; the event is rendered from it.
 * - partial: some inputs are unknown, and the event never showed them (no event yet, or written without them): it is
 *   rendered from what is known, and an enrichment fills them in later.
 * - unchanged: as far as the state tells, the event shows what it would render (the unknown inputs are taken to be
 *   unchanged: a change of them arrives as appointment.updated, which is read in full).
 * - stale: something changed, and rendering it would drop unknown inputs the event shows; `core` when the time,
 *   status or therapist changed.
 */
export type Verdict =
  | { kind: "complete" | "partial"; rendered: Rendered }
  | { kind: "unchanged" }
  | { kind: "stale"; core: boolean };

export function judge(
  settings: RenderSettings,
  appt: Snapshot,
  full: boolean,
  link: Link | undefined,
  coreChanged: boolean,
): Verdict {
  const inputs: Record<string, string> = {};
  const missing: string[] = [];
  for (const p of settings.needed) {
    const value = inputValue(p, appt, full);
    if (value === undefined) missing.push(p.name);
    else inputs[p.name] = inputDigest(appt.id, p.name, value);
  }
  if (missing.length === 0) return { kind: "complete", rendered: { config: settings.digest, inputs } };
  const partial: Verdict = { kind: "partial", rendered: { config: settings.digest, inputs, pending: missing } };
  // No event of this link in a calendar (none yet, or removed on purpose): nothing shown that could be dropped. An
  // event the booking service refused to change is still there, showing what it did.
  if (!link || !(link.present || link.removedBy === "refused")) return partial;
  const before = link.rendered;
  // An event written before links said what it showed: its text cannot be compared, so nothing is dropped from it.
  if (!before) return { kind: "stale", core: true };
  if (missing.every((name) => before.pending?.includes(name))) return partial;
  const changed =
    coreChanged ||
    before.config !== settings.digest ||
    Object.entries(inputs).some(([name, digest]) => before.inputs[name] !== digest);
  return changed ? { kind: "stale", core: coreChanged } : { kind: "unchanged" };
}

/** What the event's text stands for when it is rendered from a full read of `appt`. */
export function renderedFrom(settings: RenderSettings, appt: Snapshot): Rendered {
  const verdict = judge(settings, appt, true, undefined, true);
  return (verdict as { rendered: Rendered }).rendered;
}

/** The two records of an event's text say the same. */
export function sameRendered(a: Rendered | undefined, b: Rendered | undefined): boolean {
  return canonicalJson(a ?? null) === canonicalJson(b ?? null);
}
