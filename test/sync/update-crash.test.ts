// calbridge's own write of a booking change into the event, its record lost: the process died (or the link's store
// write failed) between the Google write and the link that records it. Had the clinic moved the booking again
// meanwhile, the next sync found the event at calbridge's earlier write and took it for the therapist's move: PATCHed
// back to the booking service (calendar_wins, customer told) or undone with a false note (booking_wins). Each write now
// marks the times it writes in the event itself (calbridge_times), and an event at a write the link never recorded is
// calbridge's own; a person's move, a failed write and an accepted move read as before.
import { afterEach, expect, it } from "vitest";
import { failLinkSaveOnce, restart, untilFired } from "./crash.ts";
import { daemonHarness, type Harness, iso, liveOf, mirrored, patches, settle, startOf } from "./support.ts";

let h: Harness | undefined;
afterEach(async () => {
  await h?.close();
  h = undefined;
});

const HOUR = 3_600_000;
const NEW = "th1.sessions@clinic.test";
const markOf = (ev: Record<string, unknown> | undefined) =>
  (ev?.extendedProperties as { private?: Record<string, string> } | undefined)?.private?.calbridge_times;
/** Two therapists, the daemon running, write-backs without grace periods, the conflict policy given. */
const started = (conflict: "calendar_wins" | "booking_wins") =>
  daemonHarness({
    therapists: 2,
    configure: (c) => {
      c.sync = { ...c.sync, conflict, writeback: { cancel_grace_seconds: 0, reschedule_grace_seconds: 0 } };
    },
  });
const bookedAt = (x: Harness, id: string) => Date.parse(String(x.world.booking.get(id)!.start_time));
/** The therapist drags the event in Google's UI to `start` (an hour long): its time zone stays, as a drag keeps it. */
function drag(x: Harness, m: { id: string; cal: string; eventId: string }, start: number) {
  const timeZone = (liveOf(x, m.cal, m.id)[0]?.start as { timeZone?: string } | undefined)?.timeZone;
  const at = (ms: number) => ({ dateTime: iso(ms), ...(timeZone ? { timeZone } : {}) });
  x.world.google.userEdit(m.cal, m.eventId, { start: at(start), end: at(start + HOUR) });
}

/**
 * The clinic moves the booking to `to`; calbridge writes it into the event, and the process dies as it records that
 * write (the link's store write fails): the event shows `to`, the link the times before.
 */
async function diesAfterWriting(x: Harness, m: { id: string; cal: string }, to: number): Promise<void> {
  const f = failLinkSaveOnce(x, (l) => l.present && l.eventStart === to, { die: true });
  x.world.booking.move(m.id, to, { force: true });
  await untilFired(x, f);
  await x.app.stop(2000);
  expect(startOf(liveOf(x, m.cal, m.id)[0])).toBe(to);
}

for (const conflict of ["calendar_wins", "booking_wins"] as const) {
  it(`${conflict}: the process dies after writing a move into the event; moved again meanwhile, nothing is sent back or noted undone`, async () => {
    h = await started(conflict);
    const m = await mirrored(h);
    await diesAfterWriting(h, m, m.start + HOUR);
    h.world.booking.move(m.id, m.start + 3 * HOUR, { force: true }); // the clinic moves it again while calbridge is down
    h = await restart(h);
    expect(await h.app.sync.links.get(m.id)).toMatchObject({ eventStart: m.start }); // the write's record was lost
    await h.app.reconcile({ force: true });
    await settle(h);
    expect(patches(h)).toBe(0);
    expect(bookedAt(h, m.id)).toBe(m.start + 3 * HOUR);
    const live = liveOf(h, m.cal, m.id);
    expect(live).toHaveLength(1);
    expect(startOf(live[0])).toBe(m.start + 3 * HOUR);
    expect(String(live[0]?.description ?? "")).not.toContain("calbridge:"); // no "your change ... was undone"
    const link = await h.app.sync.links.get(m.id);
    expect(link).toMatchObject({ present: true, eventStart: m.start + 3 * HOUR, timesMark: markOf(live[0]) });
  });
}

for (const conflict of ["calendar_wins", "booking_wins"] as const) {
  it(`${conflict}: the process dies after writing a move into the event; moved back meanwhile, the event follows, nothing sent or noted`, async () => {
    h = await started(conflict);
    const m = await mirrored(h);
    await diesAfterWriting(h, m, m.start + HOUR);
    h.world.booking.move(m.id, m.start, { force: true }); // back to where the link says it was
    h = await restart(h);
    await h.app.reconcile({ force: true });
    await settle(h);
    expect(patches(h)).toBe(0);
    expect(bookedAt(h, m.id)).toBe(m.start);
    const live = liveOf(h, m.cal, m.id);
    expect(startOf(live[0])).toBe(m.start);
    expect(String(live[0]?.description ?? "")).not.toContain("calbridge:");
  });
}

for (const how of ["copied", "events.move"] as const) {
  it(`after such a write the therapist is given a new calendar (${how}) and the booking moved again: nothing sent`, async () => {
    // The relocation takes a person's move of the old event along (a copy at their times: relocate-rules keptMove);
    // calbridge's own write, its record lost, is no such move.
    h = await started("calendar_wins");
    const m = await mirrored(h);
    await diesAfterWriting(h, m, m.start + HOUR);
    h.world.booking.move(m.id, m.start + 3 * HOUR, { force: true });
    const other = how === "copied"; // another account's calendar: events.move is not allowed, the event is copied
    h.world.google.createCalendar(NEW, other ? NEW : m.cal, { timeZone: "Europe/Berlin" });
    Object.assign(h.world.config.therapists[0]!, other ? { calendar_id: NEW, impersonate: NEW } : { calendar_id: NEW });
    h = await restart(h);
    await h.app.reconcile({ force: true });
    await settle(h);
    expect(patches(h)).toBe(0);
    expect(bookedAt(h, m.id)).toBe(m.start + 3 * HOUR);
    expect(liveOf(h, m.cal, m.id)).toEqual([]);
    const live = liveOf(h, NEW, m.id);
    expect(live.map(startOf)).toEqual([m.start + 3 * HOUR]);
    expect(String(live[0]?.description ?? "")).not.toContain("calbridge:");
  });
}

it("the therapist's own move after such a write is still theirs, and sent", async () => {
  h = await started("calendar_wins");
  const m = await mirrored(h);
  await diesAfterWriting(h, m, m.start + HOUR);
  drag(h, m, m.start + 5 * HOUR); // while calbridge is down: the mark stays, the times change
  h = await restart(h);
  await h.app.reconcile({ force: true });
  await settle(h);
  expect(patches(h)).toBe(1);
  expect(bookedAt(h, m.id)).toBe(m.start + 5 * HOUR);
  expect(startOf(liveOf(h, m.cal, m.id)[0])).toBe(m.start + 5 * HOUR);
});

it("a write Google refused leaves nothing behind: the therapist's move to exactly its times is theirs, and sent", async () => {
  h = await started("calendar_wins");
  const m = await mirrored(h);
  const f = { fired: false };
  h.world.google.faults.next(1000, {
    status: 503,
    reason: "backendError",
    match: /^PATCH /,
    when: () => {
      f.fired = true;
      return true;
    },
  });
  h.world.booking.move(m.id, m.start + HOUR, { force: true });
  await untilFired(h, f);
  await h.app.stop(2000);
  h.world.google.faults.reset();
  expect(startOf(liveOf(h, m.cal, m.id)[0])).toBe(m.start); // nothing was written
  // While calbridge is down the clinic moves the booking again, and the therapist moves the event to the times the
  // refused write was bringing: a change of theirs, in conflict with the booking's; calendar_wins sends it.
  h.world.booking.move(m.id, m.start + 3 * HOUR, { force: true });
  drag(h, m, m.start + HOUR);
  h = await restart(h);
  await h.app.reconcile({ force: true });
  await settle(h);
  expect(patches(h)).toBe(1);
  expect(bookedAt(h, m.id)).toBe(m.start + HOUR);
  expect(startOf(liveOf(h, m.cal, m.id)[0])).toBe(m.start + HOUR);
});

it("a move the booking took, then moved back to the times calbridge last wrote: the therapist's, and sent", async () => {
  h = await started("calendar_wins");
  const m = await mirrored(h);
  const first = markOf(liveOf(h, m.cal, m.id)[0]);
  drag(h, m, m.start + 2 * HOUR);
  await settle(h);
  expect(bookedAt(h, m.id)).toBe(m.start + 2 * HOUR);
  expect(markOf(liveOf(h, m.cal, m.id)[0])).toBe(first); // taken without a write: the event keeps the first mark
  drag(h, m, m.start);
  await settle(h);
  expect(patches(h)).toBe(2);
  expect(bookedAt(h, m.id)).toBe(m.start);
});

it("after a move the booking took, the booking moved back and written, its record lost, then moved again: nothing sent", async () => {
  // The second write's times are the first write's (the mark the link keeps): each write's mark is its own.
  h = await started("calendar_wins");
  const m = await mirrored(h);
  drag(h, m, m.start + 2 * HOUR);
  await settle(h);
  expect(bookedAt(h, m.id)).toBe(m.start + 2 * HOUR);
  await diesAfterWriting(h, m, m.start);
  h.world.booking.move(m.id, m.start + 3 * HOUR, { force: true });
  h = await restart(h);
  await h.app.reconcile({ force: true });
  await settle(h);
  expect(patches(h)).toBe(1); // the first move's only
  expect(bookedAt(h, m.id)).toBe(m.start + 3 * HOUR);
  const live = liveOf(h, m.cal, m.id);
  expect(startOf(live[0])).toBe(m.start + 3 * HOUR);
  expect(String(live[0]?.description ?? "")).not.toContain("undone");
});
