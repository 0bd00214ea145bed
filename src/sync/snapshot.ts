// Owns what calbridge knows of the booking side of one appointment: a hint or a read over what the link keeps (times,
// status, therapist; a cancellation's payload has none of them), what the link may keep of it (never a customer
// detail), and whether a hint is fresh enough to act on without a read.
import { bookingInstant } from "../booking/instant.ts";
import type { Appointment } from "../booking/schemas.ts";
import type { BookingCore, BookingHint, Link, Snapshot } from "./types.ts";

/** The newer fields over the older state: a payload without times takes them from what the link keeps. */
export function merge(prev: Snapshot | BookingCore | undefined, next: Appointment): Snapshot {
  const out: Record<string, unknown> = { ...(prev ?? {}) };
  // Keys, not entries: a reconciliation merges every listed appointment, and a [key, value] pair per field was most
  // of what merging allocated.
  const fields = next as Record<string, unknown>;
  for (const k of Object.keys(fields)) {
    const v = fields[k];
    if (v !== undefined) out[k] = v;
  }
  return out as Snapshot;
}

/** What a link keeps of a booking state: id, times, status and therapist, nothing about the customer. */
export function coreOf(appt: Snapshot | BookingCore): BookingCore {
  const core: BookingCore = { id: appt.id };
  if (appt.start_time != null) core.start_time = appt.start_time;
  if (appt.end_time != null) core.end_time = appt.end_time;
  if (appt.status != null) core.status = appt.status;
  if (appt.therapist_id != null) core.therapist_id = appt.therapist_id;
  return core;
}

/** Epoch ms of the appointment's `updated_at`, or 0. */
export function updatedAt(appt: Appointment): number {
  const ms = bookingInstant(appt.updated_at);
  return Number.isNaN(ms) ? 0 : ms;
}

/**
 * The booking state a hint or read gives, merged over the link's: the state to act on, the time of its newest fact,
 * and whether it is the full form (a field it lacks is then empty, not unknown).
 */
export interface BookingState {
  appt: Snapshot;
  sourceAt: number;
  full: boolean;
  /** Our clock when the state was read (a GET, or a listing's hint); absent for a webhook's payload. */
  readAt?: number;
}

/**
 * The booking state the hint gives, when it is complete and newer than what was applied; undefined when the booking
 * must be read instead. A payload whose times cannot be rendered is no hint at all: reading the booking beats failing
 * on it (a webhook would be retried with the same payload, holding up every later event of the appointment).
 */
export function hintState(link: Link | undefined, hint: BookingHint | undefined): BookingState | undefined {
  if (!hint?.appt) return undefined;
  const applied = link?.sourceAt ?? 0;
  const merged = merge(link?.booking, hint.appt);
  const start = bookingInstant(merged.start_time);
  const end = bookingInstant(merged.end_time);
  const usable = end > start && merged.therapist_id && merged.status;
  // A webhook no newer than what was applied, or a listing read before the link was last written, may be older
  // than what calbridge already did: read instead. So is a creation's payload once there is a link at all: whatever
  // the link holds came later, whatever the clocks say (a listing's items carry no updated_at, so its link keeps
  // sourceAt 0), also with the same times and status (a customer renamed since: the old name came back).
  // A cancellation removes the event: checked with a read first when the link holds a live state. A delivery retried
  // for hours arrives after staff restored the appointment and a listing synced it (list items carry no updated_at,
  // so its clock still looks newer than what was applied), and the event of a confirmed appointment went.
  const removes = merged.status === "cancelled" && link !== undefined && link.booking?.status !== "cancelled";
  const fresh =
    !removes &&
    (hint.at === undefined || !link || hint.at > applied) &&
    (hint.readAt === undefined || !link || link.syncedAt <= hint.readAt) &&
    !(hint.first && link);
  return usable && fresh
    ? {
        appt: merged,
        sourceAt: Math.max(applied, hint.at ?? 0, updatedAt(hint.appt)),
        full: hint.full === true,
        ...(hint.readAt !== undefined ? { readAt: hint.readAt } : {}),
      }
    : undefined;
}

/**
 * Two hints about the same appointment as one. The state is kept only when one of the two is clearly the newer: a
 * creation's payload is older than any other state of the appointment; otherwise hints from one source compare by
 * their own clock (a webhook's created_at, our clock at a listing), and the same clock orders nothing (a booking
 * created and cancelled in one go stamps both webhooks with the same millisecond, delivered in either order); hints
 * from different sources cannot be ordered, and a request that carries no state at all asks for a read, which beats
 * both.
 */
export function mergeHints(a: BookingHint | undefined, b: BookingHint | undefined): BookingHint | undefined {
  if (!a && !b) return undefined;
  const at = Math.max(a?.at ?? Number.NEGATIVE_INFINITY, b?.at ?? Number.NEGATIVE_INFINITY);
  const out: BookingHint = Number.isFinite(at) ? { at } : {};
  if (a?.appt && b?.appt) {
    const later = (x: number, y: number) => (y > x ? b : x > y ? a : undefined);
    const newer =
      a.first !== b.first
        ? a.first
          ? b
          : a
        : a.at !== undefined && b.at !== undefined
          ? later(a.at, b.at)
          : a.readAt !== undefined && b.readAt !== undefined
            ? later(a.readAt, b.readAt)
            : undefined;
    if (newer?.appt) {
      out.appt = newer.appt;
      if (newer.readAt !== undefined) out.readAt = newer.readAt;
      if (newer.full) out.full = true;
      if (newer.first) out.first = true;
    }
  }
  return out;
}
