// Tests deletions of the events of appointments that have begun or are over. Therapists tidy their calendars; a
// cancellation of a past session e-mails the customer and may refund them, so it is never sent from the calendar:
// - with a link, the event is put back saying why (as for any change the booking service would not take);
// - without one (the link of a past appointment expires with the sync window), a deletion Google reports again in a
//   full listing (after a 410) is left alone: it came back recreated, with a note inviting a second deletion, which
//   then cancelled a 20-day-old appointment.
import { afterEach, describe, expect, it } from "vitest";
import { eventIdFor } from "../../src/calendar/ids.ts";
import { ManualClock } from "../../src/clock.ts";
import { DAY, daemonHarness, type Harness, iso, liveOf, pollAll, quiet, settle, twoWay } from "./support.ts";

const HOUR = 3_600_000;

let h: Harness | undefined;
afterEach(async () => {
  await h?.close();
  h = undefined;
});

const cancels = (x: Harness) => x.world.booking.requests.filter((r) => r.route.endsWith("/cancel"));

/** A confirmed appointment of th_1 starting at `start`, mirrored (entered late: the simulator takes a past time). */
async function booked(x: Harness, start: number): Promise<{ id: string; cal: string; eventId: string }> {
  const id = String(x.world.booking.create({ therapist_id: "th_1", start_time: iso(start) }, { force: true }).id);
  await settle(x);
  const cal = x.world.calendarOf("th_1");
  expect(liveOf(x, cal, id)).toHaveLength(1);
  return { id, cal, eventId: eventIdFor(id) };
}

describe("an appointment that has begun, its event deleted", () => {
  it("yesterday's: put back saying why, nothing sent, however often it is deleted", async () => {
    h = await twoWay();
    const { id, cal, eventId } = await booked(h, Date.now() - DAY - 3 * HOUR);
    for (let i = 0; i < 2; i++) {
      h.world.google.userDelete(cal, eventId);
      await settle(h);
      const back = liveOf(h, cal, id);
      expect(back).toHaveLength(1);
      expect(String(back[0]!.description)).toMatch(
        /calbridge: your change to this event was undone: the appointment has begun, so taking its event out of this calendar \(deleting it, or moving it to another calendar\) changes nothing in the booking/,
      );
    }
    expect(cancels(h)).toEqual([]);
    expect(h.world.booking.get(id)?.status).toBe("confirmed");
    await h.app.sync.history.log.flush();
    const { entries } = await h.app.sync.history.log.read(id);
    expect(entries.at(-1)).toMatchObject({ origin: "calendar", reason: expect.stringContaining("has begun") });
  });

  it("one in progress (started 10 minutes ago): put back, nothing sent", async () => {
    h = await twoWay();
    const { id, cal, eventId } = await booked(h, Date.now() - 10 * 60_000);
    h.world.google.userDelete(cal, eventId);
    await settle(h);
    expect(liveOf(h, cal, id)).toHaveLength(1);
    expect(cancels(h)).toEqual([]);
  });

  it("decided before its start, sent after it (Google's look-ups retried past the start): put back, not cancelled", async () => {
    const clock = new ManualClock(Date.now());
    const x = await daemonHarness({ therapists: 2, clock });
    h = x;
    const start = clock.now() + 100_000;
    const id = String(x.world.booking.create({ therapist_id: "th_1", start_time: iso(start) }, { force: true }).id);
    await quiet(x);
    await x.app.reconcile();
    await pollAll(x);
    const cal = x.world.calendarOf("th_1");
    // Before a cancellation is sent, the event is looked for in the other mapped calendars (a "Change calendar"):
    // th_2's answers 503 with Retry-After 30 three times, so the look-up ends after the start.
    x.world.google.faults.next(3, {
      status: 503,
      reason: "backendError",
      retryAfter: 30,
      match: /GET .*th_2%40clinic\.test\/events\/cb/,
    });
    x.world.google.userDelete(cal, eventIdFor(id));
    await x.app.poller.poll("th_1");
    await quiet(x);
    for (let i = 0; i < 60; i++) {
      await clock.advance(5_000);
      for (let k = 0; k < 4; k++) await new Promise((r) => setTimeout(r, 25));
    }
    await quiet(x);
    expect(x.world.google.faults.pending).toBe(0); // the look-ups did run into the start
    expect(cancels(x)).toEqual([]);
    expect(x.world.booking.get(id)?.status).toBe("confirmed");
    const back = liveOf(x, cal, id);
    expect(back).toHaveLength(1);
    expect(String(back[0]!.description)).toContain(
      "the appointment has begun, so taking its event out of this calendar (deleting it, or moving it to another calendar) changes nothing in the booking",
    );
  });

  it("one tomorrow: cancelled as before", async () => {
    h = await twoWay();
    const { id, cal, eventId } = await booked(h, Date.now() + DAY);
    h.world.google.userDelete(cal, eventId);
    await settle(h);
    expect(cancels(h).map((r) => r.path)).toEqual([`/v1/appointments/${id}/cancel`]);
    expect(liveOf(h, cal, id)).toEqual([]);
  });
});

describe("moved to a colleague's mapped calendar (Change calendar) and put back, not written back", () => {
  const marked = (x: Harness, id: string) => x.world.therapists.flatMap((t) => liveOf(x, x.world.calendarOf(t), id));
  it.each([
    ["yesterday's appointment", { reassign: false }, -DAY],
    ["an appointment ahead, cancelling from the calendar off", { reassign: false, cancel: false }, 3 * DAY],
  ] as const)("%s: one event, in the therapist's calendar; the copy in the colleague's removed", async (_, wb, at) => {
    h = await twoWay(wb);
    const { id, cal } = await booked(h, Date.now() + at);
    h.world.google.userMove(cal, eventIdFor(id), h.world.calendarOf("th_2"));
    await settle(h);
    await h.app.reconcile({ force: true });
    await settle(h);
    expect(h.world.booking.requests.filter((r) => r.method !== "GET")).toEqual([]);
    expect(liveOf(h, cal, id)).toHaveLength(1);
    expect(marked(h, id)).toHaveLength(1); // the copy in th_2's calendar showed the appointment twice for good
  });
});

describe("a past appointment's deleted event, its link expired, reported again by a full listing (410)", () => {
  /** The appointment's link runs out (its end + past_days + 2 days), the therapist deletes the old event, Google
   * refuses the sync token: the full listing shows the deleted event with its marks. */
  async function forgottenAndDeleted(x: Harness, id: string, cal: string, eventId: string): Promise<void> {
    const link = await x.app.sync.links.get(id);
    expect(link).toBeDefined();
    await x.app.sync.links.forget(link!);
    x.world.google.userDelete(cal, eventId);
    await settle(x);
    expect(liveOf(x, cal, id)).toEqual([]);
    x.world.google.invalidateSyncTokens(cal);
    expect((await x.app.poller.poll("th_1")).fullSync).toBe(true);
    await settle(x);
  }

  it("confirmed: left deleted, nothing sent, and a reconciliation leaves it so", async () => {
    h = await twoWay();
    const { id, cal, eventId } = await booked(h, Date.now() - 20 * DAY);
    await forgottenAndDeleted(h, id, cal, eventId);
    await h.app.reconcile({ force: true });
    await settle(h);
    expect(liveOf(h, cal, id)).toEqual([]);
    expect(cancels(h)).toEqual([]);
    expect(h.world.booking.get(id)?.status).toBe("confirmed");
  });

  it("completed: left deleted (it came back, and the therapist could not delete it again until its link expired)", async () => {
    h = await twoWay();
    const { id, cal, eventId } = await booked(h, Date.now() - 20 * DAY);
    h.world.booking.complete(id);
    await settle(h);
    await forgottenAndDeleted(h, id, cal, eventId);
    expect(liveOf(h, cal, id)).toEqual([]);
    expect(cancels(h)).toEqual([]);
  });

  it("an appointment still ahead: put back saying its deletion was not sent, as before", async () => {
    h = await twoWay();
    const { id, cal, eventId } = await booked(h, Date.now() + 3 * DAY);
    await forgottenAndDeleted(h, id, cal, eventId);
    const back = liveOf(h, cal, id);
    expect(back).toHaveLength(1);
    expect(String(back[0]!.description)).toContain("the appointment was not cancelled. Delete it again to cancel it.");
    expect(cancels(h)).toEqual([]);
  });
});
