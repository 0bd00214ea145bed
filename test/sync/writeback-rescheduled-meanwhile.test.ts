// A therapist deletes an appointment's event, and before the cancellation is sent (its grace period, a hold of the
// write-back guard, or before a poll even saw the deletion) the booking service moves the appointment (the customer
// or the front desk). Google refuses any change to an event a person deleted (403), so bringing that event up to date
// must not be retried into a dead letter: the change on both sides is decided by sync.conflict. booking_wins: nothing
// is cancelled, and the event comes back at the new time under the next id with a note; calendar_wins: the
// cancellation goes its own way (grace period, guard).
import { afterEach, describe, expect, it } from "vitest";
import { eventIdFor } from "../../src/calendar/ids.ts";
import { ManualClock } from "../../src/clock.ts";
import type { ConfigInput } from "../../src/config/schema.ts";
import { captureLog } from "../support/log-capture.ts";
import { cancels, DAY, daemonHarness, type Harness, liveOf, pass, pollAll, quiet } from "./support.ts";

let h: Harness | undefined;
afterEach(async () => {
  await h?.close();
  h = undefined;
});

const deadLetters = async (x: Harness) => {
  const out: string[] = [];
  for await (const [key] of x.app.store.table<Record<string, unknown>>("dead").entries()) out.push(key);
  return out;
};

/** A daemon on the manual clock, with `n` confirmed appointments of th_1 mirrored into its calendar. */
async function mirrored(clock: ManualClock, n: number, configure?: (c: ConfigInput) => void) {
  const log = captureLog();
  const x = await daemonHarness({ therapists: 2, clock, logger: log.logger, ...(configure ? { configure } : {}) });
  h = x;
  const ids: string[] = [];
  for (let i = 0; i < n; i++) {
    const start = new Date(clock.now() + (i + 2) * DAY);
    start.setUTCHours(10, 0, 0, 0);
    ids.push(String(x.world.booking.create({ therapist_id: "th_1", start_time: start.toISOString() }).id));
  }
  await quiet(x);
  await x.app.reconcile();
  await pollAll(x); // the sync tokens
  return { x, log, ids, cal: x.world.calendarOf("th_1") };
}

/**
 * The booking service moves the appointment (appointment.updated to the daemon). The clock is advanced rather than
 * waiting for the inbox: a webhook's sync that joins a write-back in its grace period settles only when that does.
 */
async function rescheduled(x: Harness, clock: ManualClock, id: string): Promise<number> {
  const moved = new Date(clock.now() + 10 * DAY);
  moved.setUTCHours(14, 0, 0, 0);
  x.world.booking.move(id, moved);
  for (let i = 0; i < 60; i++) {
    await clock.advance(10_000);
    await x.world.booking.webhooksIdle();
    await x.app.engine.idle();
  }
  return moved.getTime();
}

const startOf = (e: Record<string, unknown>) => Date.parse(String((e.start as { dateTime: string }).dateTime));
const failures = (log: ReturnType<typeof captureLog>) =>
  log.lines.filter((l) => String(l["msg"]).startsWith("sync failed")).map((l) => `${l["msg"]}: ${String(l["err"])}`);

describe("the booking rescheduled while a therapist's deletion is not sent yet (sync.conflict: booking_wins)", () => {
  it("held by the write-back guard: no dead letter; the event is back at the new time with a note, the hold released", async () => {
    const clock = new ManualClock(Date.now());
    const { x, log, ids, cal } = await mirrored(clock, 5);
    for (const id of ids) x.world.google.userDelete(cal, eventIdFor(id)); // a wipe: held
    await pollAll(x);
    await pass(x, clock, 90_000);
    expect((await x.app.sync.guard.held("th_1")).length).toBe(5);
    const id = ids[0]!;

    const at = await rescheduled(x, clock, id);

    expect(failures(log)).toEqual([]);
    expect(await deadLetters(x)).toEqual([]);
    expect(cancels(x)).toBe(0);
    expect(x.world.booking.get(id)!.status).toBe("confirmed");
    const events = liveOf(x, cal, id);
    expect(events.map((e) => e.id)).toEqual([eventIdFor(id, 1)]); // Google will not restore the id a person deleted
    expect(startOf(events[0]!)).toBe(at);
    expect(String(events[0]!.description)).toContain("the booking was changed at the same time");
    // The stale cancellation is no longer held; the other four still are.
    expect((await x.app.sync.guard.held("th_1")).map((w) => w.appointmentId).sort()).toEqual(ids.slice(1).sort());
    // Quiet afterwards: a poll and a reconciliation send nothing and write nothing for it.
    const writes = x.writes();
    await pollAll(x);
    await x.app.reconcile();
    await quiet(x);
    expect(x.writes()).toBe(writes);
    expect(cancels(x)).toBe(0);
    expect(await deadLetters(x)).toEqual([]);
  });

  it("deleted before a poll saw it: no dead letter, nothing cancelled, the event is back at the new time", async () => {
    const clock = new ManualClock(Date.now());
    const { x, log, ids, cal } = await mirrored(clock, 1);
    const id = ids[0]!;
    x.world.google.userDelete(cal, eventIdFor(id)); // no poll yet

    const at = await rescheduled(x, clock, id);

    expect(failures(log)).toEqual([]);
    expect(await deadLetters(x)).toEqual([]);
    const events = liveOf(x, cal, id);
    expect(events.map((e) => e.id)).toEqual([eventIdFor(id, 1)]);
    expect(startOf(events[0]!)).toBe(at);
    // The poll then reports the old id's deletion: stale, nothing is sent for it.
    await pollAll(x);
    await pass(x, clock, 120_000);
    await x.app.reconcile();
    await quiet(x);
    expect(cancels(x)).toBe(0);
    expect(x.world.booking.get(id)!.status).toBe("confirmed");
    expect(liveOf(x, cal, id).map((e) => e.id)).toEqual([eventIdFor(id, 1)]);
    expect(await deadLetters(x)).toEqual([]);
  });

  it("waiting out its grace period: nothing cancelled, the event is back at the new time", async () => {
    const clock = new ManualClock(Date.now());
    const { x, log, ids, cal } = await mirrored(clock, 1);
    const id = ids[0]!;
    x.world.google.userDelete(cal, eventIdFor(id));
    await pollAll(x);
    await pass(x, clock, 20_000); // within the 60 s grace period

    const at = await rescheduled(x, clock, id);

    expect(failures(log)).toEqual([]);
    expect(await deadLetters(x)).toEqual([]);
    expect(cancels(x)).toBe(0);
    const events = liveOf(x, cal, id);
    expect(events.map((e) => e.id)).toEqual([eventIdFor(id, 1)]);
    expect(startOf(events[0]!)).toBe(at);
  });
});

describe("the same under sync.conflict: calendar_wins", () => {
  const calendarWins = (c: ConfigInput) => {
    c.sync = { ...c.sync, conflict: "calendar_wins" };
  };

  it("a held cancellation stays held for a person to decide, without a 403 retried into a dead letter", async () => {
    const clock = new ManualClock(Date.now());
    const { x, log, ids, cal } = await mirrored(clock, 5, calendarWins);
    for (const id of ids) x.world.google.userDelete(cal, eventIdFor(id));
    await pollAll(x);
    await pass(x, clock, 90_000);
    const id = ids[0]!;

    await rescheduled(x, clock, id);

    expect(failures(log)).toEqual([]);
    expect(await deadLetters(x)).toEqual([]);
    expect(cancels(x)).toBe(0);
    expect((await x.app.sync.guard.held("th_1")).map((w) => w.appointmentId)).toContain(id);
    expect(liveOf(x, cal, id)).toEqual([]);
  });

  it("a deletion no poll saw yet is sent as a cancellation after its grace period, without a dead letter", async () => {
    const clock = new ManualClock(Date.now());
    const { x, log, ids, cal } = await mirrored(clock, 1, calendarWins);
    const id = ids[0]!;
    x.world.google.userDelete(cal, eventIdFor(id));

    await rescheduled(x, clock, id);

    expect(failures(log)).toEqual([]);
    expect(await deadLetters(x)).toEqual([]);
    expect(cancels(x)).toBe(1);
    expect(x.world.booking.get(id)!.status).toBe("cancelled");
    expect(liveOf(x, cal, id)).toEqual([]);
  });
});
