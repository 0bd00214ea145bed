// A therapist deletes an event to cancel, and calbridge loses its records of it during the grace period (Redis
// restarted without persistence, a store restored from an older backup). Afterwards calbridge has no link: Google
// refusing to restore the event's id (a person deleted it) is the only trace of the deletion. Before, the event came
// back under the next id without a word and the appointment stayed booked: the customer turned up to a therapist who
// thought it cancelled. Now the event comes back with a note saying the appointment was not cancelled, nothing is
// cancelled on the strength of a deletion calbridge never saw stand with a link, the note goes like any other (when
// the booking changes), and deleting the event again is an ordinary deletion: grace period, then the cancellation.
import { createClient } from "redis";
import { afterEach, describe, expect, it } from "vitest";
import { eventIdFor } from "../../src/calendar/ids.ts";
import { ManualClock } from "../../src/clock.ts";
import type { ConfigInput } from "../../src/config/schema.ts";
import { captureLog } from "../support/log-capture.ts";
import { redisTestsEnabled, useRedisServer } from "../support/redis.ts";
import { cancels, DAY, daemonHarness, type Harness, liveOf, quiet } from "./support.ts";

let h: Harness | undefined;
afterEach(async () => {
  await h?.close();
  h = undefined;
});

const NOTE = /calbridge: this event was deleted in the calendar while calbridge had lost its records of it/;
const description = (e: Record<string, unknown> | undefined) => String(e?.description ?? "");

async function pass(x: Harness, clock: ManualClock, ms: number) {
  // One second at a time: a longer step times out Redis commands (the lease) on the manual clock.
  for (let t = 0; t < ms; t += 1_000) {
    await clock.advance(1_000);
    await quiet(x);
  }
}

async function poll(x: Harness) {
  await x.app.poller.poll("th_1");
  await quiet(x);
}

/** A daemon with two appointments of th_1 in its calendar. */
async function mirrored(clock: ManualClock, configure?: (c: ConfigInput) => void) {
  const log = captureLog();
  const x = await daemonHarness({ therapists: 1, clock, logger: log.logger, ...(configure ? { configure } : {}) });
  h = x;
  const ids = [2, 3].map((d) => {
    const start = new Date(clock.now() + d * DAY);
    start.setUTCHours(10, 0, 0, 0);
    return String(
      x.world.booking.create({ therapist_id: "th_1", start_time: start.toISOString() }, { force: true }).id,
    );
  });
  await quiet(x);
  await x.app.reconcile();
  await poll(x);
  const cal = x.world.calendarOf("th_1");
  const id = ids[0]!;
  expect(liveOf(x, cal, id)).toHaveLength(1);
  return { x, log, cal, id, other: ids[1]! };
}

/** The same, and the therapist deletes the first one's event: its cancellation waits out the grace period. */
async function deletedInGrace(clock: ManualClock, configure?: (c: ConfigInput) => void) {
  const { x, log, cal, id, other } = await mirrored(clock, configure);
  x.world.google.userDelete(cal, eventIdFor(id)); // Google will not restore this id any more
  await poll(x); // seen: the cancellation waits out its 60 s
  await pass(x, clock, 10_000);
  expect(cancels(x)).toBe(0);
  return { x, log, cal, id, other };
}

/** Everything calbridge does after the loss: the pending write-back's retry, a reconciliation, the poller. */
async function aftermath(x: Harness, clock: ManualClock) {
  await pass(x, clock, 120_000);
  await poll(x);
  await x.app.reconcile();
  await poll(x);
  await pass(x, clock, 120_000);
}

describe.skipIf(!redisTestsEnabled("lost-records"))("Redis restarted without persistence", () => {
  const redis = useRedisServer();

  it("during a deletion's grace period: the event is back under the next id with a note; nothing cancelled", async () => {
    const clock = new ManualClock(Date.now());
    const { x, log, cal, id, other } = await deletedInGrace(clock, (c) => {
      c.store = { ...(c.store ?? {}), url: redis().url };
    });
    const client = createClient({ url: redis().url });
    await client.connect();
    await client.flushAll(); // every key gone: the link, the waiting write-back, the event index
    await client.quit();
    await aftermath(x, clock);

    // Nothing cancelled, one live event (under the next id), and it says why it is back.
    expect(cancels(x)).toBe(0);
    expect(x.world.booking.get(id)!.status).toBe("confirmed");
    const back = liveOf(x, cal, id);
    expect(back).toHaveLength(1);
    expect(back[0]!.id).toBe(eventIdFor(id, 1));
    expect(description(back[0])).toMatch(NOTE);
    expect(description(back[0])).toMatch(/Delete it again to cancel it\./);
    expect(description(liveOf(x, cal, other)[0])).not.toMatch(/calbridge:/);
    const warned = log.lines.filter(
      (l) => l.level === 40 && l.appointment_id === id && /no record of it/.test(String(l.msg)),
    );
    expect(warned).toHaveLength(1);
  });
});

describe("the store's link lost while the person-deleted id stays in the Bin", () => {
  /** The link forgotten 10 s into the grace period, and everything calbridge does after that. */
  async function lost(clock: ManualClock) {
    const d = await deletedInGrace(clock);
    await d.x.app.sync.links.forget((await d.x.app.sync.links.get(d.id))!);
    await aftermath(d.x, clock);
    expect(cancels(d.x)).toBe(0);
    expect(d.x.world.booking.get(d.id)!.status).toBe("confirmed");
    const back = liveOf(d.x, d.cal, d.id);
    expect(back).toHaveLength(1);
    expect(back[0]!.id).toBe(eventIdFor(d.id, 1));
    expect(description(back[0])).toMatch(NOTE);
    expect(description(back[0])).toMatch(/Delete it again to cancel it\./);
    const warned = d.log.lines.filter(
      (l) => l.level === 40 && l.appointment_id === d.id && /no record of it/.test(String(l.msg)),
    );
    expect(warned).toHaveLength(1);
    // The appointment's history says it too (`calbridge history`).
    const entries = (await d.x.app.sync.history.log.read(d.id))?.entries ?? [];
    const created = entries.filter((e) => e.kind === "event_created" && e.eventId === eventIdFor(d.id, 1));
    expect(created.map((e) => e.reason)).toEqual([expect.stringMatching(/the cancellation was not sent/)]);
    return d;
  }

  it("puts the event back with a note; deleting it again is an ordinary deletion, written back after the grace", async () => {
    const clock = new ManualClock(Date.now());
    const { x, cal, id, other } = await lost(clock);
    // The note stays while the booking is as it was (a reconciliation does not take it away).
    await x.app.reconcile();
    await poll(x);
    expect(description(liveOf(x, cal, id)[0])).toMatch(NOTE);

    x.world.google.userDelete(cal, eventIdFor(id, 1));
    await poll(x);
    await pass(x, clock, 40_000);
    expect(cancels(x)).toBe(0); // Google's Undo and the Bin still take it back meanwhile
    await pass(x, clock, 40_000);
    expect(cancels(x)).toBe(1);
    expect(x.world.booking.get(id)!.status).toBe("cancelled");
    await x.app.reconcile();
    await poll(x);
    await pass(x, clock, 10_000);
    expect(liveOf(x, cal, id)).toHaveLength(0);
    expect(liveOf(x, cal, other)).toHaveLength(1);
    expect(cancels(x)).toBe(1);
  });

  it("takes the note away like any other once the booking changes; never cancels", async () => {
    const clock = new ManualClock(Date.now());
    const { x, cal, id } = await lost(clock);
    const later = new Date(Date.parse(String(x.world.booking.get(id)!.start_time)) + 2 * 3_600_000).toISOString();
    x.world.booking.move(id, later, { force: true });
    await quiet(x);
    await x.app.reconcile();
    await poll(x);
    const moved = liveOf(x, cal, id);
    expect(moved).toHaveLength(1);
    expect(Date.parse((moved[0]!.start as { dateTime: string }).dateTime)).toBe(Date.parse(later));
    expect(description(moved[0])).not.toMatch(/calbridge:/);
    expect(cancels(x)).toBe(0);
  });

  it("says to cancel in the booking service when cancelling from the calendar is turned off", async () => {
    const clock = new ManualClock(Date.now());
    const { x, cal, id } = await mirrored(clock, (c) => {
      c.sync = { ...(c.sync ?? {}), writeback: { ...(c.sync?.writeback ?? {}), cancel: false } };
    });
    await x.app.sync.links.forget((await x.app.sync.links.get(id))!);
    x.world.google.userDelete(cal, eventIdFor(id));
    await poll(x);
    await aftermath(x, clock);
    expect(cancels(x)).toBe(0);
    const back = liveOf(x, cal, id);
    expect(back).toHaveLength(1);
    expect(description(back[0])).toMatch(NOTE);
    expect(description(back[0])).toMatch(
      /Cancelling from the calendar is turned off: cancel it in the booking service\./,
    );
  });
});
