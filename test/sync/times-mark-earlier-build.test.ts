// A calbridge_times mark left in an event by this build, and a write of the booking's change made over it by a build
// without marks (an HA replica of the earlier version leading between two terms of this one, or a rollback and a roll
// forward): that build's patch leaves the private property as it was (patch merges extendedProperties.private key by
// key) and its link records no mark. This build took the stale mark for a write of its own whose record was lost, so a
// therapist who then moved the event back to the mark's times had it put back at the booking's time, nothing sent, and
// one who moved it elsewhere had it undone with a false note under booking_wins. A mark stamped before a link that
// records none was saved is no lost write (changes.ts lastSynced).
import { afterEach, expect, it } from "vitest";
import { ownedPatch } from "../../src/calendar/render.ts";
import { createApp } from "../../src/daemon/app.ts";
import { silentLogger } from "../../src/log.ts";
import { coreOf } from "../../src/sync/snapshot.ts";
import type { CalEvent } from "../../src/sync/types.ts";
import { restart } from "./crash.ts";
import { daemonHarness, type Harness, iso, liveOf, mirrored, settle } from "./support.ts";

let h: Harness | undefined;
afterEach(async () => {
  await h?.close();
  h = undefined;
});

const HOUR = 3_600_000;
type Mirrored = Awaited<ReturnType<typeof mirrored>>;
const patches = (x: Harness) => x.world.booking.requests.filter((r) => r.method === "PATCH").length;
const startOf = (ev: Record<string, unknown> | undefined) =>
  Date.parse(String((ev?.start as { dateTime?: string } | undefined)?.dateTime));
const markOf = (ev: Record<string, unknown> | undefined) =>
  (ev?.extendedProperties as { private?: Record<string, string> } | undefined)?.private?.calbridge_times;
const bookedAt = (x: Harness, id: string) => Date.parse(String(x.world.booking.get(id)!.start_time));
const started = (conflict: "calendar_wins" | "booking_wins") =>
  daemonHarness({
    therapists: 2,
    configure: (c) => {
      c.sync = { ...c.sync, conflict, writeback: { cancel_grace_seconds: 0, reschedule_grace_seconds: 0 } };
    },
  });

/**
 * This daemon stops; a daemon of the earlier build leads, and writes the clinic's move of the booking to `to` into the
 * event as that build did (ownedPatch of a body without the mark) and records it in a link without one.
 */
async function earlierBuildWrites(x: Harness, m: Mirrored, to: number) {
  await x.app.stop(2000);
  x.world.booking.move(m.id, to, { force: true });
  const old = await createApp(x.world.config, { logger: silentLogger, oneShot: true, listen: "127.0.0.1:0" });
  const cal = old.sync.mapping.calendar("th_1");
  const ev = (await cal.get(m.eventId)) as CalEvent;
  const timeZone = ev.start?.timeZone ?? undefined;
  const { calbridge_times: _, ...marks } = ev.extendedProperties?.private ?? {};
  const body = {
    summary: ev.summary,
    description: ev.description,
    colorId: ev.colorId,
    transparency: ev.transparency,
    visibility: ev.visibility,
    status: ev.status,
    start: { dateTime: iso(to), timeZone },
    end: { dateTime: iso(to + HOUR), timeZone },
    extendedProperties: { private: marks },
  };
  const written = await cal.patch(m.eventId, ownedPatch(body) as CalEvent, { ifMatch: ev.etag ?? undefined });
  const link = (await old.sync.links.get(m.id))!;
  const { timesMark: __, ...earlier } = link; // the earlier build's links have no such field
  const booking = coreOf(x.world.booking.get(m.id) as never);
  await old.sync.links.save({
    ...earlier,
    etag: written.etag ?? undefined,
    eventStart: to,
    eventEnd: to + HOUR,
    booking,
  });
  await old.stop(2000).catch(() => {});
  const live = liveOf(x, m.cal, m.id)[0];
  expect(startOf(live)).toBe(to);
  expect(markOf(live)).toContain(iso(m.start).replace(".000Z", "Z")); // this build's earlier mark, left in place
}

/** The therapist drags the event in Google's UI to `start` (an hour long), keeping its time zone. */
function drag(x: Harness, m: Mirrored, start: number) {
  const timeZone = (liveOf(x, m.cal, m.id)[0]?.start as { timeZone?: string } | undefined)?.timeZone;
  const at = (ms: number) => ({ dateTime: iso(ms), ...(timeZone ? { timeZone } : {}) });
  x.world.google.userEdit(m.cal, m.eventId, { start: at(start), end: at(start + HOUR) });
}

for (const conflict of ["calendar_wins", "booking_wins"] as const) {
  it(`${conflict}: moved back to the times of the stale mark by the therapist, the move is theirs and sent`, async () => {
    h = await started(conflict);
    const m = await mirrored(h);
    await earlierBuildWrites(h, m, m.start + 2 * HOUR);
    drag(h, m, m.start); // back to 10:00 (the customer asked); the booking has not changed since
    h = await restart(h);
    for (let i = 0; i < 2; i++) {
      await h.app.reconcile({ force: true });
      await settle(h);
    }
    expect(patches(h)).toBe(1);
    expect(bookedAt(h, m.id)).toBe(m.start);
    expect(liveOf(h, m.cal, m.id).map(startOf)).toEqual([m.start]);
  });

  it(`${conflict}: moved elsewhere by the therapist after the earlier build's write, the move is sent, never undone`, async () => {
    h = await started(conflict);
    const m = await mirrored(h);
    await earlierBuildWrites(h, m, m.start + 2 * HOUR);
    drag(h, m, m.start + 5 * HOUR);
    h = await restart(h);
    await h.app.reconcile({ force: true });
    await settle(h);
    expect(patches(h)).toBe(1);
    expect(bookedAt(h, m.id)).toBe(m.start + 5 * HOUR);
    const live = liveOf(h, m.cal, m.id);
    expect(live.map(startOf)).toEqual([m.start + 5 * HOUR]);
    expect(String(live[0]?.description ?? "")).not.toContain("calbridge:");
  });
}

it("the earlier build's write left alone, this build brings the event to the booking without a write or a note", async () => {
  h = await started("calendar_wins");
  const m = await mirrored(h);
  await earlierBuildWrites(h, m, m.start + 2 * HOUR);
  h = await restart(h);
  await h.app.reconcile({ force: true });
  await settle(h);
  expect(patches(h)).toBe(0);
  expect(bookedAt(h, m.id)).toBe(m.start + 2 * HOUR);
  const live = liveOf(h, m.cal, m.id);
  expect(live.map(startOf)).toEqual([m.start + 2 * HOUR]);
  expect(String(live[0]?.description ?? "")).not.toContain("calbridge:");
});
