// Owns what an appointment's event should be, as decide() takes it: a body to write, none, or the event "as written"
// (known by its fingerprint only), and how a decision gets at a body or a fingerprint from it.
import { fingerprint, type Ownership, ownershipOf } from "../calendar/fingerprint.ts";
import type { RenderedEvent } from "../calendar/render.ts";
import { NeedsFullRead } from "./inputs.ts";

/**
 * The event as calbridge last wrote it is still what it should be, as far as the booking state at hand tells (it
 * lacks full-form fields the event shows): known by its fingerprint only. An action that must write a body then
 * needs the full form (NeedsFullRead).
 */
export interface AsWritten {
  asWritten: true;
  fingerprint: string;
  ownership: Ownership;
}

export type Desired = RenderedEvent | AsWritten | null;

const isAsWritten = (d: Desired): d is AsWritten => d !== null && "asWritten" in d;

/** The body to write; NeedsFullRead when only the fingerprint is known. */
export function bodyOf(id: string, d: RenderedEvent | AsWritten): RenderedEvent {
  if (isAsWritten(d))
    throw new NeedsFullRead(id, "the event must be written, and the booking state lacks fields it shows");
  return d;
}

export function printOf(d: RenderedEvent | AsWritten): string {
  return isAsWritten(d) ? d.fingerprint : fingerprint(d, ownershipOf(d));
}

/** The fields owned beyond the usual ones (reminders, where configured). */
export function ownedBy(d: Desired): Ownership {
  return d === null ? { reminders: false } : isAsWritten(d) ? d.ownership : ownershipOf(d);
}
