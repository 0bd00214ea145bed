// calbridge's own write of a booking change into the event, its record lost: the process died (or the link's store
// write failed) between the Google write and the link that records it. Had the clinic moved the booking again
// meanwhile, the next sync found the event at calbridge's earlier write and took it for the therapist's move: PATCHed
// back to the booking service (calendar_wins, customer told) or undone with a false note (booking_wins). The times are
// now noted in the link before the write (Link.writing), and an event showing them is calbridge's own.
import { afterEach, expect, it } from "vitest";
import { failLinkSaveOnce, restart, untilFired } from "./crash.ts";
import { daemonHarness, type Harness, iso, liveOf, mirrored, settle } from "./support.ts";

let h: Harness | undefined;
afterEach(async () => {
  await h?.close();
  h = undefined;
});

const HOUR = 3_600_000;
const patches = (x: Harness) => x.world.booking.requests.filter((r) => r.method === "PATCH").length;
const startOf = (ev: Record<string, unknown> | undefined) =>
  Date.parse(String((ev?.start as { dateTime?: string } | undefined)?.dateTime));
/** Two therapists, the daemon running, write-backs without grace periods, the conflict policy given. */
const started = (conflict: "calendar_wins" | "booking_wins") =>
  daemonHarness({
    therapists: 2,
    configure: (c) => {
      c.sync = { ...c.sync, conflict, writeback: { cancel_grace_seconds: 0, reschedule_grace_seconds: 0 } };
    },
  });
const bookedAt = (x: Harness, id: string) => Date.parse(String(x.world.booking.get(id)!.start_time));

for (const conflict of ["calendar_wins", "booking_wins"] as const) {
  it(`${conflict}: the process dies after writing a move into the event; moved again meanwhile, nothing is sent back or noted undone`, async () => {
    h = await started(conflict);
    const m = await mirrored(h);
    // The event is written at +1h, then the link's save fails and the process is dead.
    const f = failLinkSaveOnce(h, (l) => l.present && l.eventStart === m.start + HOUR, { die: true });
    h.world.booking.move(m.id, m.start + HOUR, { force: true });
    await untilFired(h, f);
    await h.app.stop(2000);
    expect(startOf(liveOf(h, m.cal, m.id)[0])).toBe(m.start + HOUR);
    h.world.booking.move(m.id, m.start + 3 * HOUR, { force: true }); // the clinic moves it again while calbridge is down
    h = await restart(h);
    await h.app.reconcile({ force: true });
    await settle(h);
    expect(patches(h)).toBe(0);
    expect(bookedAt(h, m.id)).toBe(m.start + 3 * HOUR);
    const live = liveOf(h, m.cal, m.id);
    expect(live).toHaveLength(1);
    expect(startOf(live[0])).toBe(m.start + 3 * HOUR);
    expect(String(live[0]?.description ?? "")).not.toContain("undone");
    const link = await h.app.sync.links.get(m.id);
    expect(link).toMatchObject({ present: true, eventStart: m.start + 3 * HOUR });
    expect(link?.writing).toBeUndefined();
  });
}

it("a write that failed leaves its times noted: the therapist's move elsewhere is still theirs, and sent", async () => {
  h = await started("calendar_wins");
  const m = await mirrored(h);
  expect(liveOf(h, m.cal, m.id)).toHaveLength(1);
  const fx = h.app.sync.fx;
  const f = failLinkSaveOnce(h, () => false, { die: true });
  fx.write = async () => {
    f.fired = true;
    throw new Error("simulated failure of the Google write, then the process dies");
  };
  h.world.booking.move(m.id, m.start + HOUR, { force: true });
  await untilFired(h, f);
  await h.app.stop(2000);
  // The event still shows the first time; the therapist moves it to +2h while calbridge is down.
  h.world.google.userEdit(m.cal, m.eventId, {
    start: { dateTime: iso(m.start + 2 * HOUR) },
    end: { dateTime: iso(m.start + 3 * HOUR) },
  });
  h = await restart(h);
  expect((await h.app.sync.links.get(m.id))?.writing).toEqual({ start: m.start + HOUR, end: m.start + 2 * HOUR });
  await h.app.reconcile({ force: true });
  await settle(h);
  expect(patches(h)).toBe(1);
  expect(bookedAt(h, m.id)).toBe(m.start + 2 * HOUR);
  expect(startOf(liveOf(h, m.cal, m.id)[0])).toBe(m.start + 2 * HOUR);
});
