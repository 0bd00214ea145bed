// A move to a colleague's calendar ("Change calendar", writeback.reassign on) changed again while its reassignment is
// on its way: the PATCH is answered 503 or 429 and, before it is sent again, the therapist deletes the event in the
// colleague's calendar or moves it on in time there. A reschedule and a cancellation look at the event right before
// each send (CallOptions.beforeSend); a reassignment did not, and the resend reassigned the appointment to a colleague
// whose calendar no longer showed it (the customer told of a new therapist, then of a cancellation), or at the time
// the therapist had just moved it from (two PATCHes, the customer told of both).
import { afterEach, describe, expect, it } from "vitest";
import { daemonHarness, type Harness, iso, liveOf, mirrored, settle } from "./support.ts";

let h: Harness | undefined;
afterEach(async () => {
  await h?.close();
  h = undefined;
});

const HOUR = 3_600_000;
const ONE = /^\/v1\/appointments\/[^/]+$/;

async function world(): Promise<Harness> {
  return daemonHarness({
    therapists: 2,
    configure: (c) => {
      c.sync = {
        ...c.sync,
        writeback: { cancel_grace_seconds: 0, reschedule_grace_seconds: 0, reassign: true },
      };
    },
    engine: { maxAttempts: 1, baseMs: 10 },
  });
}

/** PATCHes the booking service took (answered 2xx). */
const taken = (x: Harness) =>
  x.world.booking.requests.filter(
    (r) => r.method === "PATCH" && ONE.test(r.path) && (r.status ?? 0) >= 200 && (r.status ?? 0) < 300,
  ).length;
const sent = (x: Harness) => x.world.booking.requests.filter((r) => r.method === "PATCH" && ONE.test(r.path)).length;
const startOf = (e: Record<string, unknown>) => Date.parse((e.start as { dateTime: string }).dateTime);

/** The first PATCH is answered `status` (not applied); `change` lands before it would be sent again. */
function failFirstPatch(x: Harness, status: 503 | 429, change: () => void): void {
  x.world.booking.faults.raceNext({ method: "PATCH", path: ONE }, change);
  if (status === 429) {
    x.world.booking.faults.refuseNext(1, "rate_limited", {
      status,
      retryAfter: 1,
      match: { method: "PATCH", path: ONE },
    });
  } else x.world.booking.faults.failNext(1, status, { method: "PATCH", path: ONE });
}

describe("a move to a colleague's calendar changed again while its reassignment is on its way", () => {
  it.each([503, 429] as const)(
    "deleted in the colleague's calendar during a %s's wait: not reassigned; the deletion is decided as one",
    async (status) => {
      h = await world();
      const x = h;
      const m = await mirrored(x);
      const colleague = x.world.calendarOf("th_2");
      failFirstPatch(x, status, () => x.world.google.userDelete(colleague, m.eventId));
      x.world.google.userMove(m.cal, m.eventId, colleague); // "Change calendar" in Google's UI
      await settle(x);
      expect(sent(x)).toBe(1); // the one answered with the failure
      expect(taken(x)).toBe(0);
      // Never the colleague's: the event is gone from both calendars, which is a deletion (cancelled, grace 0 here).
      expect(x.world.booking.get(m.id)?.therapist_id).toBe("th_1");
      expect(x.world.booking.get(m.id)?.status).toBe("cancelled");
      await x.app.reconcile();
      await settle(x);
      expect(taken(x)).toBe(0);
    },
  );

  it("moved on in time in the colleague's calendar during the wait: one reassignment taken, with the new time", async () => {
    h = await world();
    const x = h;
    const m = await mirrored(x);
    const colleague = x.world.calendarOf("th_2");
    const later = m.start + 3 * HOUR;
    failFirstPatch(x, 503, () =>
      x.world.google.userEdit(colleague, m.eventId, {
        start: { dateTime: iso(later) },
        end: { dateTime: iso(later + HOUR) },
      }),
    );
    x.world.google.userMove(m.cal, m.eventId, colleague);
    await settle(x);
    // The resend of the old body (no time) is not taken: the move is decided again, the new time in the same PATCH.
    expect(taken(x)).toBe(1);
    const booking = x.world.booking.get(m.id);
    expect(booking?.therapist_id).toBe("th_2");
    expect(Date.parse(String(booking?.start_time))).toBe(later);
    const live = liveOf(x, colleague, m.id);
    expect(live).toHaveLength(1);
    expect(startOf(live[0]!)).toBe(later);
    expect(liveOf(x, m.cal, m.id)).toEqual([]);
  });
});
