// Owns the tolerant readings of shapes the spec leaves open: list bodies of services and webhooks, and whether an
// appointment already shows a requested change.
import { bookingInstant } from "./instant.ts";
import type { Appointment } from "./schemas.ts";
import type { PatchBody } from "./types.ts";

function sameInstant(a: string | undefined, b: string): boolean {
  if (a === undefined) return false;
  return a === b || bookingInstant(a) === bookingInstant(b);
}

export function patchApplied(now: Appointment, wanted: PatchBody): boolean {
  if (wanted.start_time !== undefined && !sameInstant(now.start_time, wanted.start_time)) return false;
  if (wanted.therapist_id !== undefined && now.therapist_id !== wanted.therapist_id) return false;
  if (wanted.notes !== undefined && (now.notes ?? "") !== wanted.notes) return false;
  if (wanted.status !== undefined && now.status !== wanted.status) return false;
  return true;
}

/**
 * Whether an answer to a PATCH shows a value other than the one asked for. A field the answer leaves out says nothing
 * (the spec does not show the PATCH answer's fields).
 */
export function patchContradicted(answer: Appointment, wanted: PatchBody): boolean {
  // The fields the answer shows, notes aside (a service may format them): those must be as asked.
  const shown = Object.fromEntries(
    Object.entries(wanted).filter(([key]) => key !== "notes" && answer[key as keyof Appointment] !== undefined),
  ) as PatchBody;
  return !patchApplied(answer, shown);
}

export function asList(body: unknown): unknown[] {
  if (Array.isArray(body)) return body;
  if (body && typeof body === "object" && "data" in body) {
    const data = (body as { data: unknown }).data;
    if (Array.isArray(data)) return data;
    if (data && typeof data === "object") {
      const arrays = Object.values(data).filter(Array.isArray);
      if (arrays.length === 1) return arrays[0] as unknown[];
      return [data];
    }
    return data === undefined || data === null ? [] : [data];
  }
  return body === undefined || body === null ? [] : [body];
}

function isRecord(v: unknown): v is Record<string, unknown> {
  return typeof v === "object" && v !== null && !Array.isArray(v);
}

/** The pages a list answer says there are (its `meta.total_pages`); 1 when it says nothing usable. */
export function totalPages(body: unknown): number {
  const meta = isRecord(body) && isRecord(body.meta) ? body.meta : undefined;
  const total = meta?.total_pages;
  return typeof total === "number" && Number.isInteger(total) && total > 0 ? total : 1;
}

export function asRecords(body: unknown): Record<string, unknown>[] {
  const list = asList(body);
  if (list.length === 1 && isRecord(list[0])) {
    const only = list[0];
    const values = Object.values(only);
    // A map keyed by endpoint id ({ "we_1": {url,...} }) rather than one endpoint.
    if (!("url" in only) && values.length > 0 && values.every(isRecord)) {
      return Object.entries(only).map(([id, v]) => ({ id, ...(v as Record<string, unknown>) }));
    }
  }
  return list.filter(isRecord);
}
