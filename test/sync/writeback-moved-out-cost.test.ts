// What the moved-out look-up (src/sync/moved-out.ts) costs and leaves behind: a burst of deletions reads the therapist's
// calendar list once, never at the price of a move to a calendar created a moment ago taken for a deletion; a deletion
// put back because cancelling from the calendar is turned off leaves no second live copy in the private calendar.
import { afterEach, expect, it } from "vitest";
import { eventIdFor } from "../../src/calendar/ids.ts";
import { ManualClock } from "../../src/clock.ts";
import type { ConfigInput } from "../../src/config/schema.ts";
import { cancels, DAY, daemonHarness, type Harness, liveOf, pass, quiet } from "./support.ts";

let h: Harness | undefined;
afterEach(async () => {
  await h?.close();
  h = undefined;
});

const PRIVATE = "th1private@group.calendar.google.com";
const HOBBY = "th1hobby@group.calendar.google.com";

async function world(clock: ManualClock, configure?: (c: ConfigInput) => void): Promise<Harness> {
  const x = await daemonHarness({
    therapists: 2,
    clock,
    configure: (c) => {
      // The default grace period; a guard that lets the burst through (its own tests hold bursts).
      c.sync = {
        ...c.sync,
        writeback: { cancel_grace_seconds: 60 },
        writeback_guard: { floor: 100, max_ratio: 1 },
      };
      configure?.(c);
    },
  });
  x.world.google.createCalendar(PRIVATE, "th_1@clinic.test", { summary: "Private", timeZone: "Europe/Berlin" });
  x.world.google.createCalendar(HOBBY, "th_1@clinic.test", { summary: "Hobby", timeZone: "Europe/Berlin" });
  return x;
}

async function mirrored(x: Harness, clock: ManualClock, n: number): Promise<string[]> {
  const ids: string[] = [];
  for (let i = 0; i < n; i++) {
    const start = new Date(clock.now() + (3 + i) * DAY);
    start.setUTCHours(10, 0, 0, 0);
    ids.push(
      String(x.world.booking.create({ therapist_id: "th_1", start_time: start.toISOString() }, { force: true }).id),
    );
  }
  await quiet(x);
  await x.app.poller.poll("th_1");
  await quiet(x);
  return ids;
}

const calendarLists = (x: Harness) =>
  x.world.google.requestLog.filter((r) => r.method === "GET" && /\/users\/me\/calendarList$/.test(r.path)).length;
const readsIn = (x: Harness, calendarId: string) =>
  x.world.google.requestLog.filter(
    (r) => r.method === "GET" && r.path.includes(`/calendars/${encodeURIComponent(calendarId)}/events/`),
  ).length;

it("a burst of deletions written back reads the therapist's calendar list once, and each owned calendar once per deletion", async () => {
  const clock = new ManualClock(Date.now());
  h = await world(clock);
  const ids = await mirrored(h, clock, 6);
  const cal = h.world.calendarOf("th_1");
  for (const id of ids) h.world.google.userDelete(cal, eventIdFor(id));
  await h.app.poller.poll("th_1");
  await quiet(h);
  const lists = calendarLists(h);
  await pass(h, clock, 65_000);
  expect(cancels(h)).toBe(6);
  for (const id of ids) expect(h.world.booking.get(id)!.status).toBe("cancelled");
  expect(calendarLists(h) - lists).toBe(1);
  expect(readsIn(h, PRIVATE)).toBe(6);
  expect(readsIn(h, HOBBY)).toBe(6);
});

it("a move to a calendar created after the list was read is still found: the list is read again before a cancellation", async () => {
  const clock = new ManualClock(Date.now());
  // A grace period shorter than the minute the list is remembered: the second deletion is written back within it.
  h = await world(clock, (c) => {
    c.sync = { ...c.sync, writeback: { cancel_grace_seconds: 30 } };
  });
  const [first, second] = await mirrored(h, clock, 2);
  const cal = h.world.calendarOf("th_1");
  h.world.google.userDelete(cal, eventIdFor(first!));
  await h.app.poller.poll("th_1");
  await quiet(h);
  await pass(h, clock, 35_000); // the first deletion written back: the list is read (and remembered)
  expect(h.world.booking.get(first!)!.status).toBe("cancelled");
  // Within the minute the list is remembered: a new calendar, and the other appointment's event moved there.
  await pass(h, clock, 5_000);
  const NEW = "th1new@group.calendar.google.com";
  h.world.google.createCalendar(NEW, "th_1@clinic.test", { summary: "New", timeZone: "Europe/Berlin" });
  h.world.google.userMove(cal, eventIdFor(second!), NEW);
  await h.app.poller.poll("th_1");
  await quiet(h);
  await pass(h, clock, 35_000);
  expect(h.world.booking.get(second!)!.status).toBe("confirmed");
  expect(calendarLists(h)).toBe(2); // read again: the one remembered was read before the move was seen
  expect(cancels(h)).toBe(1);
  expect(liveOf(h, cal, second!)).toHaveLength(1);
  expect(liveOf(h, NEW, second!)).toHaveLength(0);
});

it("with cancelling from the calendar turned off, an event moved to the private calendar is put back and the copy there removed: one live event", async () => {
  const clock = new ManualClock(Date.now());
  h = await world(clock, (c) => {
    c.sync = { ...c.sync, writeback: { ...c.sync?.writeback, cancel: false } };
  });
  const [id] = await mirrored(h, clock, 1);
  const cal = h.world.calendarOf("th_1");
  h.world.google.userMove(cal, eventIdFor(id!), PRIVATE);
  await h.app.poller.poll("th_1");
  await quiet(h);
  await pass(h, clock, 10_000);
  expect(h.world.booking.get(id!)!.status).toBe("confirmed");
  expect(cancels(h)).toBe(0);
  expect(liveOf(h, cal, id!)).toHaveLength(1);
  expect(liveOf(h, PRIVATE, id!)).toHaveLength(0);
  // Nothing else in the private calendar is touched.
  expect(h.world.google.requestLog.filter((r) => r.method === "DELETE").length).toBe(1);
});

it("a look in the private calendar answering 503 is not the mapped calendar's error: its health keeps no last error", async () => {
  const clock = new ManualClock(Date.now());
  h = await world(clock, (c) => {
    c.sync = { ...c.sync, writeback: { ...c.sync?.writeback, cancel: false } };
  });
  const [id] = await mirrored(h, clock, 1);
  const cal = h.world.calendarOf("th_1");
  h.world.google.faults.next(10_000, {
    status: 503,
    reason: "backendError",
    match: new RegExp(`GET .*/calendars/${encodeURIComponent(PRIVATE).replace(/\./g, "\\.")}/events/`),
  });
  h.world.google.userMove(cal, eventIdFor(id!), PRIVATE);
  let done = false;
  const polled = h.app.poller.poll("th_1").then(() => h!.app.engine.idle().then(() => (done = true)));
  const end = Date.now() + 20_000; // real time, not 600 steps (the clock runs on while HTTP is in flight)
  while (!done && Date.now() < end) {
    await clock.advance(1_000);
    await new Promise((r) => setTimeout(r, 2));
  }
  await polled;
  expect(readsIn(h, PRIVATE)).toBeGreaterThan(1); // looked (and retried) there
  expect(liveOf(h, cal, id!)).toHaveLength(1); // put back all the same
  const health = h.app.sync.mapping.calendarIfAny("th_1")!.health!();
  expect(health.lastError).toBeUndefined();
  expect(health.credentials).toBe("ok");
});
