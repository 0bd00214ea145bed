// A calendar change whose appointment's record cannot be read, in the calendar poller (review23, left by f9129c3).
// With the link damaged, the poller compared the event's id with the first generation's (eventIdFor(id)): an event
// living under a later generation (Google refused the old id, an adopted event) was "marked but not its own", ignored
// at debug, no dead letter although the warn line said one, and the sync token advanced past it. With an event-index
// entry damaged (a deleted event carries no mark, so it is told by the index), the change was taken for not ours and
// the token advanced too. Now the first is handed to the engine (a dead letter naming the record, nothing sent) and
// the second holds the calendar's sync token, so the change is read again.
import { afterEach, expect, it } from "vitest";
import { eventIdFor } from "../../src/calendar/ids.ts";
import { damage, storePath } from "../support/damage-record.ts";
import { captureLog } from "../support/log-capture.ts";
import { DAY, daemonHarness, type Harness, liveOf, mirrored, settle, twoWay } from "./support.ts";

let h: Harness | undefined;
afterEach(async () => {
  await h?.close();
  h = undefined;
});

/** Requests to the booking service that change something (cancel, reschedule, ...). */
const bookingWrites = (x: Harness) => x.world.booking.requests.filter((r) => r.method !== "GET").length;
const token = (x: Harness) => x.app.store.table<string>("tokens").get("th_1");

async function deadLetters(x: Harness): Promise<string> {
  const dead: unknown[] = [];
  for await (const [k, v] of x.app.store.table<Record<string, unknown>>("dead").entries()) dead.push([k, v]);
  return JSON.stringify(dead);
}

/** An appointment of th_1 whose event lives under generation 1 (Google refused the first id), its link damaged. */
async function damagedGenerationOne(log: ReturnType<typeof captureLog>) {
  const x = await daemonHarness({
    therapists: 1,
    logger: log.logger,
    configure: (c) => {
      c.sync = { ...c.sync, writeback: { cancel_grace_seconds: 0, reschedule_grace_seconds: 0 } };
    },
  });
  h = x;
  const start = new Date(Date.now() + 3 * DAY);
  start.setUTCHours(10, 0, 0, 0);
  const appt = x.world.booking.create({ therapist_id: "th_1", start_time: start.toISOString() }, { force: true });
  await settle(x);
  const id = String(appt.id);
  const cal = x.world.calendarOf("th_1");
  x.world.google.userDelete(cal, eventIdFor(id));
  x.world.google.purgeDeleted(cal);
  x.world.booking.move(id, new Date(start.getTime() + DAY).toISOString(), { force: true });
  await settle(x);
  expect(liveOf(x, cal, id).map((e) => e.id)).toEqual([eventIdFor(id, 1)]);
  const link = await x.app.sync.links.get(id);
  expect(link).toMatchObject({ eventId: eventIdFor(id, 1) });
  await damage(storePath(x), "links", id);
  return { x, id, cal, link, start: start.getTime() + DAY };
}

const ignored = (log: ReturnType<typeof captureLog>) =>
  log.lines.filter((l) => String(l["msg"]).includes("not its own")).length;

it("a deletion of a later generation's event whose link is damaged is a dead letter naming the record", async () => {
  const log = captureLog("debug");
  const { x, id, cal, link } = await damagedGenerationOne(log);
  const writesBefore = bookingWrites(x);

  x.world.google.userDelete(cal, eventIdFor(id, 1));
  await x.app.poller.poll("th_1");
  await x.app.engine.idle();

  expect(await deadLetters(x)).toContain(`the record links/${id} cannot be read`);
  expect(ignored(log)).toBe(0);
  const told = log.lines.filter((l) => l["table"] === "links" && l["key"] === id && l["level"] === 40);
  expect(String(told[0]?.["msg"])).toContain("handed to its appointment's sync, which fails alone (a dead letter");
  // Nothing is cancelled because of the damaged record.
  expect(bookingWrites(x)).toBe(writesBefore);
  expect(x.world.booking.get(id)?.status).not.toBe("cancelled");

  // Restored (README's advice): the reconciliation sends the therapist's deletion.
  await x.app.store.table("links").set(id, link);
  await x.app.reconcile();
  await x.app.engine.idle();
  expect(x.world.booking.get(id)?.status).toBe("cancelled");
});

it("a move of a later generation's event whose link is damaged is a dead letter, nothing sent or undone", async () => {
  const log = captureLog("debug");
  const { x, id, cal, start } = await damagedGenerationOne(log);
  const writesBefore = bookingWrites(x);

  const later = (ms: number) => ({ dateTime: new Date(ms).toISOString() });
  x.world.google.userEdit(cal, eventIdFor(id, 1), { start: later(start + 3_600_000), end: later(start + 7_200_000) });
  const moved = x.world.google.event(cal, eventIdFor(id, 1));
  await x.app.poller.poll("th_1");
  await x.app.engine.idle();

  expect(await deadLetters(x)).toContain(`the record links/${id} cannot be read`);
  expect(ignored(log)).toBe(0);
  expect(bookingWrites(x)).toBe(writesBefore);
  expect(x.world.google.event(cal, eventIdFor(id, 1))).toEqual(moved);
});

it("a deletion whose event-index entry is damaged holds the calendar's sync token until it can be told", async () => {
  const log = captureLog("info");
  h = await twoWay({}, log.logger);
  const damaged = await mirrored(h);
  const other = await mirrored(h);
  await damage(storePath(h), "eventindex", damaged.eventId);
  const writesBefore = bookingWrites(h);
  const before = await token(h);

  // A deleted event carries no mark: only the event index tells its appointment. The other one is moved meanwhile.
  h.world.google.userDelete(damaged.cal, damaged.eventId);
  const later = (ms: number) => ({ dateTime: new Date(ms).toISOString() });
  h.world.google.userEdit(other.cal, other.eventId, {
    start: later(other.start + 3_600_000),
    end: later(other.start + 2 * 3_600_000),
  });
  for (let i = 0; i < 2; i++) {
    await h.app.poller.poll("th_1");
    await h.app.engine.idle();
    // Not advanced past the deletion: the next poll reads it again.
    expect(await token(h)).toBe(before);
  }
  const told = log.lines.filter((l) => l["table"] === "eventindex" && l["level"] === 40);
  expect(told).toHaveLength(2);
  expect(String(told[0]!["msg"])).toContain("the calendar's sync token is not advanced past it");
  // The other change is synced (once); nothing is sent for the deletion from the poll.
  expect(Date.parse(String(h.world.booking.get(other.id)?.start_time))).toBe(other.start + 3_600_000);
  expect(bookingWrites(h)).toBe(writesBefore + 1);
  expect(h.world.booking.get(damaged.id)?.status).not.toBe("cancelled");

  // The link is readable: the reconciliation sends the deletion, and its link's save writes the index entry again.
  await h.app.reconcile();
  await h.app.engine.idle();
  expect(h.world.booking.get(damaged.id)?.status).toBe("cancelled");
  await h.app.poller.poll("th_1");
  await h.app.engine.idle();
  expect(await token(h)).not.toBe(before);
});
