// Owns doctor's check of the mapped therapist ids against the booking service's appointments in the sync window. A
// therapist_id the booking service does not use (a typo, an id from another account) maps nobody: the daemon lists
// nothing for it, mirrors nothing, and cannot tell it from a therapist without bookings, so it says nothing. Doctor is
// where an admin looks: an id with no appointment in the window is named, with the ids that do have appointments
// and are not mapped (and the one whose name matches the entry's, or whose id is a slip or two away from it). The booking service's therapist endpoints are not in
// the spec, so appointments are the only evidence; a therapist with no bookings yet is a warning, not a failure.
import { distance } from "fastest-levenshtein";
import type { BookingClient } from "../booking/client.ts";
import { PER_PAGE } from "../booking/constants.ts";
import type { Config } from "../config/schema.ts";
import { describeError } from "../sync/errors.ts";

/** One line of doctor (its Check). */
interface Check {
  name: string;
  status: "ok" | "warn";
  detail: string;
  fix?: string;
}

const DAY_MS = 86_400_000;
/** Pages of the unfiltered listing read (PER_PAGE appointments each): a clinic's therapists nearly all show in them. */
const SAMPLE_PAGES = 3;
/** Mapped ids not in the sample looked up one by one (a filtered first page each), at most. */
const LOOKUPS = 20;
/** Unmapped ids named in a line, at most. */
const NAMED = 5;

type Lister = Pick<BookingClient, "listAppointmentPages">;

export async function therapistIdChecks(booking: Lister, config: Config, now: number): Promise<Check[]> {
  const from = new Date(now - config.sync.window.past_days * DAY_MS).toISOString();
  const to = new Date(now + config.sync.window.future_days * DAY_MS).toISOString();
  const span = `between ${from.slice(0, 10)} and ${to.slice(0, 10)}`;
  // A doctor beside a running daemon shares the booking service's rate budget: it asks at the webhooks' priority,
  // like its other booking calls, a few requests in all.
  const opts = { priority: "webhook" as const };
  /** Therapist ids with appointments in the window, with the name the booking service gives them. */
  const seen = new Map<string, string | undefined>();
  /** Whether the sample holds the whole window (every therapist with appointments is in `seen`). */
  let complete = true;
  try {
    const sample = booking.listAppointmentPages({ dateFrom: from, dateTo: to }, { ...opts, stopAfter: SAMPLE_PAGES });
    let pages = 0;
    for await (const page of sample) {
      for (const a of page.items) {
        if (a.therapist_id !== undefined) seen.set(a.therapist_id, a.therapist_name ?? seen.get(a.therapist_id));
      }
      // The last page read is the list's last when it says so, or (without meta) when it is not full.
      const totalPages = page.meta?.total_pages;
      complete = totalPages !== undefined ? totalPages <= ++pages : page.items.length < PER_PAGE;
    }
  } catch (err) {
    return [notChecked(`the appointments could not be listed: ${describeError(err)}`)];
  }
  const mapped = config.therapists;
  let unseen = mapped.filter((t) => !seen.has(t.therapist_id));
  const notLookedUp = complete ? [] : unseen.slice(LOOKUPS).map((t) => t.therapist_id);
  if (!complete) {
    // Not in the first pages: asked for by id. Only appointments that carry the id count (a service that ignored the
    // filter would answer everyone's).
    for (const t of unseen.slice(0, LOOKUPS)) {
      try {
        const query = { dateFrom: from, dateTo: to, therapistId: t.therapist_id };
        for await (const page of booking.listAppointmentPages(query, { ...opts, stopAfter: 1 })) {
          const own = page.items.find((a) => a.therapist_id === t.therapist_id);
          if (own) seen.set(t.therapist_id, own.therapist_name);
        }
      } catch (err) {
        return [notChecked(`the appointments of ${t.therapist_id} could not be listed: ${describeError(err)}`)];
      }
    }
    unseen = unseen.slice(0, LOOKUPS).filter((t) => !seen.has(t.therapist_id));
  }
  if (seen.size === 0) {
    return [
      {
        name: "therapist ids",
        status: "warn",
        detail: `the booking service has no appointments ${span}: the mapped therapist ids cannot be checked against bookings yet`,
        fix: "nothing to do before the first bookings; run doctor again once there are some",
      },
    ];
  }
  const mappedIds = new Set(mapped.map((t) => t.therapist_id));
  const unmapped = [...seen].filter(([id]) => !mappedIds.has(id));
  const others =
    unmapped.length === 0 ? "" : `; the therapists with appointments ${span} that are not mapped: ${named(unmapped)}`;
  const checks = unseen.map((t): Check => {
    const id = t.therapist_id;
    const wanted = t.name?.trim().toLowerCase();
    const match =
      (wanted ? unmapped.find(([, name]) => name?.trim().toLowerCase() === wanted) : undefined) ??
      spelledLike(id, unmapped);
    return {
      name: `therapist id ${id}`,
      status: "warn",
      detail: `no appointment under ${id} ${span}: calbridge has nothing to mirror for it${others}`,
      fix: `${match ? `did you mean ${match[1] ? `${match[0]} (${match[1]})` : match[0]}? ` : ""}check therapist_id against the booking service: an id it does not use maps nobody, and nothing else says so; nothing to do if ${id} has no bookings in the window yet`,
    };
  });
  if (checks.length > 0) return checks;
  const skipped =
    notLookedUp.length === 0
      ? ""
      : `; ${notLookedUp.length} not among the first ${SAMPLE_PAGES * PER_PAGE} appointments and not looked up (${notLookedUp.slice(0, NAMED).join(", ")}${notLookedUp.length > NAMED ? ", ..." : ""})`;
  const checked = mapped.length - notLookedUp.length;
  return [
    {
      name: "therapist ids",
      status: "ok",
      detail: `${checked === mapped.length ? "every mapped therapist has" : `${checked} mapped therapists have`} appointments ${span}${skipped}${unmapped.length > 0 ? `; not mapped: ${named(unmapped)}` : ""}`,
    },
  ];
}

/** The unmapped id one or two typing slips away from `id` (a transposition counts two), if exactly one is. */
function spelledLike(id: string, unmapped: [string, string | undefined][]): [string, string | undefined] | undefined {
  const near = unmapped.filter(([other]) => distance(id.toLowerCase(), other.toLowerCase()) <= 2);
  return near.length === 1 ? near[0] : undefined;
}

function notChecked(why: string): Check {
  return { name: "therapist ids", status: "warn", detail: `not checked: ${why}` };
}

function named(ids: [string, string | undefined][]): string {
  const shown = ids.slice(0, NAMED).map(([id, name]) => (name ? `${id} (${name})` : id));
  return `${shown.join(", ")}${ids.length > NAMED ? ` and ${ids.length - NAMED} more` : ""}`;
}
