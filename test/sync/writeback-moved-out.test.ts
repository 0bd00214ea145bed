// A therapist's "Change calendar" to one of their own calendars that calbridge does not manage (a personal or
// "Private" calendar) leaves in the mapped calendar the entry a deletion leaves: before a cancellation is written back,
// the calendars the account owns are looked at, and an event found there is brought back, never cancelled.
import { afterEach, expect, it } from "vitest";
import { eventIdFor } from "../../src/calendar/ids.ts";
import { ManualClock } from "../../src/clock.ts";
import { cancels, DAY, daemonHarness, type Harness, liveOf, settle } from "./support.ts";

let h: Harness | undefined;
afterEach(async () => {
  await h?.close();
  h = undefined;
});

/** th_1's own calendars besides the mapped one: one it owns, one shared with it read-only. */
const PRIVATE = "th1private@group.calendar.google.com";
const TEAM = "team@group.calendar.google.com";

async function world(clock?: ManualClock): Promise<Harness> {
  const x = await daemonHarness({
    therapists: 2,
    ...(clock ? { clock, engine: { maxAttempts: 3, baseMs: 5_000 } } : {}),
    configure: (c) => {
      c.sync = { ...c.sync, writeback: { cancel_grace_seconds: 0, reschedule_grace_seconds: 0 } };
    },
  });
  x.world.google.createCalendar(PRIVATE, "th_1@clinic.test", { summary: "Private", timeZone: "Europe/Berlin" });
  x.world.google.createCalendar(TEAM, "boss@clinic.test", { summary: "Team" });
  x.world.google.shareCalendar(TEAM, "th_1@clinic.test", "reader");
  return x;
}

async function mirrored(x: Harness, now = Date.now()) {
  const start = new Date(now + 3 * DAY);
  start.setUTCHours(10, 0, 0, 0);
  const appt = x.world.booking.create({ therapist_id: "th_1", start_time: start.toISOString() }, { force: true });
  const id = String(appt.id);
  return { id, cal: x.world.calendarOf("th_1"), eventId: eventIdFor(id) };
}

/** A calendar id as it stands in a request's path (the log keeps it encoded), ready for a RegExp. */
const inPath = (calendarId: string) => encodeURIComponent(calendarId).replace(/\./g, "\\.");
const note = (ev: Record<string, unknown> | undefined) => String(ev?.description ?? "");
const lookups = (x: Harness, path: RegExp) =>
  x.world.google.requestLog.filter((r) => r.method === "GET" && path.test(r.path)).length;

async function writebackEntries(x: Harness, id: string) {
  await x.app.sync.history.log.flush();
  return (await x.app.sync.history.log.read(id)).entries.filter((e) => e.kind === "writeback");
}

/** Both sides quiet: another round of polls and a reconciliation write nothing and send nothing. */
async function expectQuiet(x: Harness): Promise<void> {
  await settle(x);
  const writes = x.writes();
  const sent = x.world.booking.requests.filter((r) => r.method !== "GET").length;
  const report = await x.app.reconcile();
  await settle(x);
  expect(report.plan).toEqual([]);
  expect(x.writes()).toBe(writes);
  expect(x.world.booking.requests.filter((r) => r.method !== "GET").length).toBe(sent);
}

it("an event moved to the therapist's own unmapped calendar is not cancelled: it comes back to the mapped calendar with a note", async () => {
  h = await world();
  const m = await mirrored(h);
  await settle(h);
  h.world.google.userMove(m.cal, m.eventId, PRIVATE); // "Change calendar" to "Private" in Google's UI
  await settle(h);
  expect(h.world.booking.get(m.id)!.status).toBe("confirmed");
  expect(cancels(h)).toBe(0);
  // One live event, in the mapped calendar, saying why; none left in the private calendar.
  const back = liveOf(h, m.cal, m.id);
  expect(back).toHaveLength(1);
  expect(note(back[0])).toContain("calbridge: this appointment stays in calendar");
  expect(note(back[0])).toContain("To cancel it, delete the event here.");
  expect(liveOf(h, PRIVATE, m.id)).toHaveLength(0);
  expect(await writebackEntries(h, m.id)).toEqual([
    expect.objectContaining({ writeback: "cancel", result: "rewritten", calendarId: PRIVATE, therapistId: "th_1" }),
  ]);
  // The calendar it could only read was not looked at.
  expect(lookups(h, new RegExp(`/calendars/${inPath(TEAM)}/`))).toBe(0);
  await expectQuiet(h);
  // Deleting it now is a deletion: written back as one.
  const [again] = liveOf(h, m.cal, m.id);
  h.world.google.userDelete(m.cal, String(again!.id));
  await settle(h);
  expect(h.world.booking.get(m.id)!.status).toBe("cancelled");
});

it("where the mapped calendar no longer holds the id, the event itself is moved back (events.move, no notifications)", async () => {
  h = await world();
  const m = await mirrored(h);
  await settle(h);
  h.world.google.userMove(m.cal, m.eventId, PRIVATE);
  // By the time the write-back looks (held, say), Google forgot the entry the move left: the id is free there again.
  h.world.google.faults.next(1, {
    status: 500,
    reason: "unused",
    match: /GET .*\/users\/me\/calendarList$/,
    when: () => {
      h!.world.google.purgeDeleted(m.cal);
      return false;
    },
  });
  await settle(h);
  expect(cancels(h)).toBe(0);
  expect(h.world.google.event(m.cal, m.eventId)).toMatchObject({ status: "confirmed" });
  expect(note(h.world.google.event(m.cal, m.eventId))).toContain(
    "so it was moved back from the calendar you moved it to",
  );
  const move = h.world.google.requestLog.find((r) => r.method === "POST" && r.path.endsWith(`${m.eventId}/move`));
  expect(move).toMatchObject({ status: 200, sendUpdates: "none" });
  expect(liveOf(h, PRIVATE, m.id)).toHaveLength(0);
  expect(await writebackEntries(h, m.id)).toEqual([
    expect.objectContaining({ writeback: "cancel", result: "moved_back", calendarId: PRIVATE }),
  ]);
  await expectQuiet(h);
});

it("an event moved to a calendar the account can only read is not looked for there: the deletion is written back as today", async () => {
  h = await world();
  const m = await mirrored(h);
  await settle(h);
  h.world.google.userMove(m.cal, m.eventId, TEAM); // by someone who may write there; th_1's account may only read it
  await settle(h);
  expect(h.world.booking.get(m.id)!.status).toBe("cancelled");
  expect(cancels(h)).toBe(1);
  expect(lookups(h, new RegExp(`/calendars/${inPath(TEAM)}/`))).toBe(0);
});

it("a real deletion is cancelled as today, after one calendar list and one look in each other calendar the account owns", async () => {
  h = await world();
  const m = await mirrored(h);
  await settle(h);
  h.world.google.userDelete(m.cal, m.eventId);
  await settle(h);
  expect(h.world.booking.get(m.id)!.status).toBe("cancelled");
  expect(cancels(h)).toBe(1);
  expect(lookups(h, /\/users\/me\/calendarList$/)).toBe(1);
  expect(lookups(h, new RegExp(`/calendars/${inPath(PRIVATE)}/events/${m.eventId}$`))).toBe(1);
});

it("a calendar list answering 503 sends no cancellation: the sync waits, and once Google answers the event is kept", async () => {
  const clock = new ManualClock(Date.now());
  h = await world(clock);
  const m = await mirrored(h, clock.now());
  await settle(h);
  h.world.google.faults.next(10_000, { status: 503, reason: "backendError", match: /GET .*\/users\/me\/calendarList/ });
  h.world.google.userMove(m.cal, m.eventId, PRIVATE);
  const polled = h.app.poller.poll("th_1");
  // Four minutes of the clock, and on until several tries: under load the clock runs on while HTTP is in flight.
  const end = Date.now() + 20_000;
  for (let i = 0; i < 240 || (lookups(h, /\/users\/me\/calendarList$/) <= 6 && Date.now() < end); i++) {
    await clock.advance(1_000);
    await new Promise((r) => setTimeout(r, 2));
  }
  await polled;
  expect(cancels(h)).toBe(0);
  expect(h.world.booking.get(m.id)!.status).toBe("confirmed");
  expect(lookups(h, /\/users\/me\/calendarList$/)).toBeGreaterThan(6); // more than one try, beyond one call's retries
  expect(h.app.sync.activity.of("th_1")?.lastError).toMatch(/moved to another calendar of its account .*503/);
  await h.app.sync.history.log.flush();
  const waited = (await h.app.sync.history.log.read(m.id)).entries.find((e) => e.kind === "sync_failed");
  expect(waited).toMatchObject({ code: "other_calendar_unavailable", therapistId: "th_1", toTherapistId: "th_1" });
  // Google answers again: the waiting write-back looks, finds the event in "Private", and keeps it.
  h.world.google.faults.reset();
  const end2 = Date.now() + 20_000; // real time, not 600 steps (the clock runs on while HTTP is in flight)
  while (Date.now() < end2 && liveOf(h, m.cal, m.id).length === 0) {
    await clock.advance(1_000);
    await new Promise((r) => setTimeout(r, 2));
  }
  await h.app.engine.idle();
  expect(cancels(h)).toBe(0);
  expect(h.world.booking.get(m.id)!.status).toBe("confirmed");
  expect(liveOf(h, m.cal, m.id)).toHaveLength(1);
  expect(liveOf(h, PRIVATE, m.id)).toHaveLength(0);
});

it("an event that cannot be moved back (its calendar removed meanwhile) is written again in the mapped calendar, not cancelled", async () => {
  h = await world();
  const m = await mirrored(h);
  await settle(h);
  h.world.google.userMove(m.cal, m.eventId, PRIVATE);
  // The therapist deletes the "Private" calendar right after calbridge found the event in it.
  h.world.google.faults.next(1, {
    status: 500,
    reason: "unused",
    match: new RegExp(`POST .*/calendars/${inPath(PRIVATE)}/events/${m.eventId}/move`),
    when: () => {
      h!.world.google.deleteCalendar(PRIVATE);
      return false;
    },
  });
  await settle(h);
  expect(cancels(h)).toBe(0);
  expect(h.world.booking.get(m.id)!.status).toBe("confirmed");
  const back = liveOf(h, m.cal, m.id);
  expect(back).toHaveLength(1);
  expect(note(back[0])).toContain("could not be moved back, so it was written here again");
  expect(await writebackEntries(h, m.id)).toEqual([
    expect.objectContaining({ writeback: "cancel", result: "rewritten", code: "notFound", httpStatus: 404 }),
  ]);
  await expectQuiet(h);
});
