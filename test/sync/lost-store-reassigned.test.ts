// The booking service reassigns th_1's appointment to th_2, and calbridge loses its store (the SQLite file deleted or
// replaced) before it applies the reassignment: the old event stands in th_1's calendar, and no link says whose it
// was. The reconciliation after the loss wrote the event in th_2's calendar, but removes a copy left in another
// calendar only on the strength of a link: the old event stayed in th_1's calendar until th_1's next full listing (a
// day away), and for good when the appointment's event was gone by then (cancelled). th_1 went on seeing a client who
// is no longer theirs. The first reconciliation now removes it: only an event under the appointment's own id carrying
// calbridge's mark for it, counted by the mass-deletion guard like any removal.
import { rmSync } from "node:fs";
import { afterEach, expect, it } from "vitest";
import { eventIdFor } from "../../src/calendar/ids.ts";
import { type App, createApp } from "../../src/daemon/app.ts";
import { silentLogger } from "../../src/log.ts";
import { DAY, type Harness, harness, liveOf } from "./support.ts";

let h: Harness | undefined;
afterEach(async () => {
  await h?.close();
  h = undefined;
});

const MARKS = { calbridge_managed: "1" };

/** `count` appointments of th_1, one a day from the day after tomorrow at 10:00 UTC, mirrored by a reconciliation. */
async function booked(x: Harness, count: number): Promise<string[]> {
  const ids: string[] = [];
  for (let i = 0; i < count; i++) {
    const start = new Date(Date.now() + (i + 2) * DAY);
    start.setUTCHours(10, 0, 0, 0);
    ids.push(
      String(x.world.booking.create({ therapist_id: "th_1", start_time: start.toISOString() }, { force: true }).id),
    );
  }
  await x.app.reconcile();
  for (const id of ids) expect(liveOf(x, x.world.calendarOf("th_1"), id)).toHaveLength(1);
  return ids;
}

/** The store is lost: the daemon stops, its SQLite files are deleted, a new one starts on an empty store. */
async function loseStore(x: Harness): Promise<void> {
  await x.app.stop(2000);
  const file = x.world.config.store.url.slice("sqlite://".length);
  for (const suffix of ["", "-wal", "-shm"]) rmSync(file + suffix, { force: true });
  const app = await createApp(x.world.config, { logger: silentLogger, oneShot: true, listen: "127.0.0.1:0" });
  (x as { app: App }).app = app;
}

it("an appointment reassigned before the store was lost leaves no event in the old therapist's calendar", async () => {
  const x = await harness({ therapists: 2 });
  h = x;
  const [moved, kept] = await booked(x, 2);
  const [cal1, cal2] = [x.world.calendarOf("th_1"), x.world.calendarOf("th_2")];
  // Beside it in th_1's calendar: th_1's own event, and one carrying the mark for the appointment under another id (a
  // copy a person made): calbridge removes neither.
  const start = Date.now() + 5 * DAY;
  const own = x.world.google.userInsert(cal1, {
    summary: "own",
    start: { dateTime: new Date(start).toISOString() },
    end: { dateTime: new Date(start + 3_600_000).toISOString() },
  });
  const copy = x.world.google.userInsert(cal1, {
    summary: "copy",
    start: { dateTime: new Date(start + DAY).toISOString() },
    end: { dateTime: new Date(start + DAY + 3_600_000).toISOString() },
    extendedProperties: { private: { ...MARKS, calbridge_appointment_id: moved! } },
  });
  x.world.booking.reassign(moved!, "th_2", { force: true }); // not applied by calbridge yet
  await loseStore(x);

  const report = await x.app.reconcile();
  expect(report.guard).toMatchObject({ tripped: false, destructive: 1 });
  expect(report.plan).toContainEqual(
    expect.objectContaining({ kind: "delete", appointmentId: moved, therapistId: "th_1", eventId: eventIdFor(moved!) }),
  );
  expect(liveOf(x, cal2, moved!).map((e) => e.id)).toEqual([eventIdFor(moved!)]);
  expect(liveOf(x, cal1, moved!).map((e) => e.id)).toEqual([copy.id]);
  expect(liveOf(x, cal1, kept!)).toHaveLength(1);
  expect(x.world.google.event(cal1, String(own.id))?.status).not.toBe("cancelled");
  expect((await x.app.reconcile()).plan).toEqual([]);
});

it("so does one reassigned to a therapist calbridge does not map", async () => {
  const x = await harness({ therapists: 2, mapped: ["th_1"] });
  h = x;
  const [moved, kept] = await booked(x, 2);
  const cal1 = x.world.calendarOf("th_1");
  x.world.booking.reassign(moved!, "th_2", { force: true });
  await loseStore(x);

  const report = await x.app.reconcile();
  expect(report.guard).toMatchObject({ tripped: false, destructive: 1 });
  expect(liveOf(x, cal1, moved!)).toHaveLength(0);
  expect(liveOf(x, cal1, kept!)).toHaveLength(1);
  expect((await x.app.reconcile()).plan).toEqual([]);
});

it("the old events of appointments reassigned before the store was lost count toward the mass-deletion guard", async () => {
  const x = await harness({ therapists: 2 });
  h = x;
  const ids = await booked(x, 5);
  const cal1 = x.world.calendarOf("th_1");
  // Three reassigned and one cancelled of th_1's five events: four removals, more than the floor of three.
  for (const id of ids.slice(0, 3)) x.world.booking.reassign(id, "th_2", { force: true });
  x.world.booking.cancel(ids[3]!);
  await loseStore(x);

  const held = await x.app.reconcile();
  expect(held.guard).toMatchObject({ tripped: true, destructive: 4 });
  for (const id of ids) expect(liveOf(x, cal1, id)).toHaveLength(1); // nothing removed

  const forced = await x.app.reconcile({ force: true });
  expect(forced.guard.tripped).toBe(false);
  for (const id of ids.slice(0, 4)) expect(liveOf(x, cal1, id)).toHaveLength(0);
  expect(liveOf(x, cal1, ids[4]!)).toHaveLength(1);
});

it("an appointment whose listing shows no therapist keeps its event: it is read by id, not taken for a copy", async () => {
  const x = await harness({ therapists: 2 });
  h = x;
  const [id] = await booked(x, 1);
  const cal1 = x.world.calendarOf("th_1");
  await loseStore(x);
  // The listing shows therapist_id null (as a service may); the appointment read by id names th_1.
  x.world.booking.showNull(id!, ["therapist_id"]);
  x.world.booking.faults.raceNext({ method: "GET", path: `/v1/appointments/${id}` }, () =>
    x.world.booking.showNull(id!, []),
  );

  const report = await x.app.reconcile();
  expect(report.plan).not.toContainEqual(expect.objectContaining({ kind: "delete", appointmentId: id }));
  expect(liveOf(x, cal1, id!).map((e) => e.id)).toEqual([eventIdFor(id!)]);
  expect(liveOf(x, x.world.calendarOf("th_2"), id!)).toHaveLength(0);
});
