// A write-back is never sent over a change someone else made since it was decided on: the appointment is read again
// after the calendar look-ups, right before the write, and again before any resend (after a 503's backoff or a 429's
// wait). A customer's reschedule or a reassignment landing meanwhile is not cancelled or moved back; the sync decides
// again from the appointment as it is now (booking_wins by default: the event shows the booking, with a note).
import { afterEach, describe, expect, it } from "vitest";
import type { HistoryEntry } from "../../src/sync/history-entry.ts";
import { daemonHarness, type Harness, iso, liveOf, mirrored, settle } from "./support.ts";

let h: Harness | undefined;
afterEach(async () => {
  await h?.close();
  h = undefined;
});

const HOUR = 3_600_000;
const ONE = /^\/v1\/appointments\/[^/]+$/;
const CANCEL = /^\/v1\/appointments\/[^/]+\/cancel$/;

async function world(reassign = false): Promise<Harness> {
  return daemonHarness({
    therapists: 2,
    configure: (c) => {
      c.sync = {
        ...c.sync,
        writeback: {
          cancel_grace_seconds: 0,
          reschedule_grace_seconds: 0,
          reason: "Cancelled by the therapist",
          reassign,
        },
      };
    },
    engine: { maxAttempts: 3, baseMs: 10 },
  });
}

const sent = (x: Harness, method: string, path: RegExp) =>
  x.world.booking.requests.filter((r) => r.method === method && path.test(r.path)).length;
const startOf = (e: Record<string, unknown>) => Date.parse((e.start as { dateTime: string }).dateTime);
const moveEvent = (x: Harness, m: { cal: string; eventId: string }, to: number) =>
  x.world.google.userEdit(m.cal, m.eventId, { start: { dateTime: iso(to) }, end: { dateTime: iso(to + HOUR) } });

/** The next matching request is answered 503 unprocessed, and `change` lands meanwhile (during the backoff). */
function failingWhile(x: Harness, method: string, path: RegExp, change: () => void, status = 503): void {
  x.world.booking.faults.raceNext({ method, path }, change);
  if (status === 429) {
    x.world.booking.faults.refuseNext(1, "rate_limited", { status, retryAfter: 1, match: { method, path } });
  } else x.world.booking.faults.failNext(1, status, { method, path });
}

describe("a write-back over a change made meanwhile", () => {
  it("a deletion is not sent when the customer rescheduled after calbridge read the appointment", async () => {
    h = await world();
    const m = await mirrored(h);
    const customers = m.start + 26 * HOUR;
    // The customer's reschedule lands after the sync's read of the appointment, before the last look (the second GET).
    let gets = 0;
    h.world.booking.faults.raceNext({ method: "GET", path: ONE, when: () => ++gets === 2 }, () =>
      h!.world.booking.move(m.id, customers, { force: true }),
    );
    h.world.google.userDelete(m.cal, m.eventId);
    await settle(h);
    expect(sent(h, "POST", CANCEL)).toBe(0);
    expect(h.world.booking.get(m.id)?.status).toBe("confirmed");
    expect(liveOf(h, m.cal, m.id).map(startOf)).toEqual([customers]);
  });

  it("a deletion is not sent again after a 503 when the customer rescheduled during the backoff", async () => {
    h = await world();
    const m = await mirrored(h);
    const customers = m.start + 26 * HOUR;
    failingWhile(h, "POST", CANCEL, () => h!.world.booking.move(m.id, customers, { force: true }));
    h.world.google.userDelete(m.cal, m.eventId);
    await settle(h);
    expect(sent(h, "POST", CANCEL)).toBe(1); // the one answered 503, unprocessed
    expect(h.world.booking.get(m.id)?.status).toBe("confirmed");
    expect(liveOf(h, m.cal, m.id).map(startOf)).toEqual([customers]);
  });

  it("a deletion is not sent again after a 503 when the appointment was reassigned during the backoff", async () => {
    h = await world();
    const m = await mirrored(h);
    failingWhile(h, "POST", CANCEL, () => h!.world.booking.reassign(m.id, "th_2", { force: true }));
    h.world.google.userDelete(m.cal, m.eventId);
    await settle(h);
    expect(h.world.booking.get(m.id)?.status).toBe("confirmed");
    expect(liveOf(h, h.world.calendarOf("th_2"), m.id)).toHaveLength(1);
  });

  it("a move is not sent again after a 503, nor after a 429, when the customer rescheduled meanwhile", async () => {
    for (const status of [503, 429]) {
      h = await world();
      const m = await mirrored(h);
      const customers = m.start + 26 * HOUR;
      failingWhile(h, "PATCH", ONE, () => h!.world.booking.move(m.id, customers, { force: true }), status);
      moveEvent(h, m, m.start + 2 * HOUR);
      await settle(h);
      expect(sent(h, "PATCH", ONE)).toBe(1);
      expect(Date.parse(String(h.world.booking.get(m.id)?.start_time))).toBe(customers);
      expect(liveOf(h, m.cal, m.id).map(startOf)).toEqual([customers]);
      await h.close();
      h = undefined;
    }
  });

  it("a cancellation by the customer during calbridge's backoff is not told as calbridge's in the history", async () => {
    h = await world();
    const m = await mirrored(h);
    failingWhile(h, "POST", CANCEL, () => h!.world.booking.cancel(m.id, "customer cancelled online"));
    h.world.google.userDelete(m.cal, m.eventId);
    await settle(h);
    expect(h.world.booking.get(m.id)?.cancellation_reason).toBe("customer cancelled online");
    await h.app.sync.history.log.flush();
    const entries: HistoryEntry[] = (await h.app.sync.history.log.read(m.id)).entries;
    expect(entries.filter((e) => e.kind === "writeback").at(-1)).toMatchObject({
      writeback: "cancel",
      result: "already",
    });
  });

  it("a move to a colleague's calendar is not sent as a reassignment when the customer rescheduled after calbridge read the appointment", async () => {
    h = await world(true);
    const m = await mirrored(h);
    const customers = m.start + 26 * HOUR;
    let gets = 0;
    const mine = new RegExp(`^/v1/appointments/${m.id}$`);
    h.world.booking.faults.raceNext({ method: "GET", path: mine, when: () => ++gets === 2 }, () =>
      h!.world.booking.move(m.id, customers, { force: true }),
    );
    h.world.google.userMove(m.cal, m.eventId, h.world.calendarOf("th_2")); // "Change calendar" in Google's UI
    await settle(h);
    expect(gets).toBeGreaterThanOrEqual(2);
    expect(sent(h, "PATCH", ONE)).toBe(0);
    expect(h.world.booking.get(m.id)?.therapist_id).toBe("th_1");
    expect(Date.parse(String(h.world.booking.get(m.id)?.start_time))).toBe(customers);
  });
});
