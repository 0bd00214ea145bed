// The reconciliation's calendar side between full listings: once the poller has a calendar's sync token, a run lists
// no calendar (no Google request at all when nothing changed) and still applies what the booking service changed
// without a webhook; every sync.calendar_full_listing_hours (give or take a quarter) a run lists it in full again,
// and only such a run finds an event whose appointment dropped out of the booking listing. Dry runs list in full.
import { afterEach, describe, expect, it } from "vitest";
import { eventIdFor } from "../../src/calendar/ids.ts";
import { ManualClock } from "../../src/clock.ts";
import { DAY, type Harness, harness, iso } from "./support.ts";

let h: Harness | undefined;
afterEach(async () => {
  h?.app.poller.stop();
  await h?.close();
  h = undefined;
});

const HOUR = 3_600_000;

describe("reconciliation between full listings", () => {
  it("sends the calendars nothing while their incremental sync covers them, and lists them in full once a day", async () => {
    const clock = new ManualClock(Date.now());
    h = await harness({ therapists: 2, clock });
    const sim = h.world.booking;
    const now = Math.floor(clock.now() / HOUR) * HOUR;
    const [a, b, c] = [1, 2, 3].map((i) =>
      sim.create(
        { therapist_id: i === 3 ? "th_2" : "th_1", start_time: iso(now + i * DAY + 10 * HOUR) },
        { force: true },
      ),
    );
    const google = () => h!.world.google.usage.requests;

    const first = await h.app.reconcile();
    expect(first).toMatchObject({ ok: true, calendarsListed: 2, calendarsIncremental: 0 });
    expect(h.allLive()).toHaveLength(3);
    // Before the poller has the calendars' sync tokens, a run lists them in full.
    expect((await h.app.reconcile()).calendarsListed).toBe(2);
    h.app.poller.start();
    for (const t of h.world.therapists) await h.app.poller.poll(t);
    const g0 = google();
    const quiet = await h.app.reconcile();
    expect(quiet).toMatchObject({ ok: true, calendarsListed: 0, calendarsIncremental: 2, managedEvents: 3 });
    expect(quiet.plan).toEqual([]);
    expect(google() - g0).toBe(0);

    // Missed webhooks: a move and a cancellation are applied through the links, with one write each (and, for the
    // removal, one listing by the appointment's mark for a series Google split off the event: series-tails.ts).
    sim.move(String(a!.id), now + 4 * DAY + 10 * HOUR, { force: true });
    sim.cancel(String(c!.id));
    const g1 = google();
    const drift = await h.app.reconcile();
    expect(drift).toMatchObject({ ok: true, calendarsListed: 0, counts: { update: 1, delete: 1 } });
    expect(google() - g1).toBe(3);
    const event = h.world.google.event(h.world.calendarOf("th_1"), eventIdFor(String(a!.id)));
    expect(Date.parse(String((event!.start as { dateTime: string }).dateTime))).toBe(now + 4 * DAY + 10 * HOUR);
    expect(h.live("th_2")).toHaveLength(0);

    // The booking service moves b out of the window without a webhook: not in its listing any more, so only a full
    // listing of the calendar finds the event left behind at the old time.
    const startOfB = () => {
      const ev = h!.world.google.event(h!.world.calendarOf("th_1"), eventIdFor(String(b!.id)));
      return Date.parse(String((ev!.start as { dateTime: string }).dateTime));
    };
    sim.move(String(b!.id), now + 120 * DAY, { force: true });
    expect((await h.app.reconcile()).calendarsListed).toBe(0);
    expect(startOfB()).toBe(now + 2 * DAY + 10 * HOUR);
    // A dry run reads everything, and shows it.
    const dry = await h.app.reconcile({ dryRun: true });
    expect(dry.calendarsListed).toBe(2);
    expect(dry.plan.map((p) => p.appointmentId)).toContain(String(b!.id));

    await clock.advance(18 * HOUR - 1); // the earliest a full listing can come again: 24 h less a quarter
    for (const t of h.world.therapists) await h.app.poller.poll(t);
    expect((await h.app.reconcile()).calendarsListed).toBe(0);
    await clock.advance(12 * HOUR);
    for (const t of h.world.therapists) await h.app.poller.poll(t);
    const daily = await h.app.reconcile();
    expect(daily).toMatchObject({ ok: true, calendarsListed: 2 });
    expect(startOfB()).toBe(now + 120 * DAY);
  });

  it("lists a calendar in full at the next run after its sync token expired (the poller read it again)", async () => {
    const clock = new ManualClock(Date.now());
    h = await harness({ therapists: 2, clock });
    const now = Math.floor(clock.now() / HOUR) * HOUR;
    h.world.booking.create({ therapist_id: "th_1", start_time: iso(now + DAY + 10 * HOUR) }, { force: true });
    expect((await h.app.reconcile()).calendarsListed).toBe(2);
    h.app.poller.start();
    for (const t of h.world.therapists) await h.app.poller.poll(t);
    expect((await h.app.reconcile()).calendarsListed).toBe(0);

    // Google no longer accepts th_1's token (410): the poller reads the calendar again from scratch, which also happens
    // when the calendar behind the credentials is another one; the links may no longer match it, so the run lists it.
    h.world.google.invalidateSyncTokens(h.world.calendarOf("th_1"));
    expect((await h.app.poller.poll("th_1")).fullSync).toBe(true);
    await clock.advance(1);
    expect(await h.app.reconcile()).toMatchObject({ ok: true, calendarsListed: 1, calendarsIncremental: 1 });
    expect(h.live("th_1")).toHaveLength(1);
    await clock.advance(1);
    expect((await h.app.reconcile()).calendarsListed).toBe(0);
  });
});
