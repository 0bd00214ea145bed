// A therapist's calendar changes while the old and the new calendar hold something calbridge must not take at face
// value (relocate.ts, relocate-rules.ts), through the real daemon against the simulators over HTTP:
// - pointed back at a calendar whose events were left behind: the stale copy there (an older time) is written over,
//   never adopted and read as the therapist's move (a reschedule nobody made);
// - a deletion the engine was waiting out (grace period) or holding (write-back guard) when the therapist was
//   re-pointed: never sent from a calendar nobody reads any more, but not undone silently either: the event written in
//   the new calendar says so, and `writeback held --apply` reports such a hold as not sent.
import { afterEach, describe, expect, it } from "vitest";
import { APPOINTMENT_ID_PROPERTY, eventIdFor } from "../../src/calendar/ids.ts";
import { writebackHeld } from "../../src/cli/writeback-held.ts";
import type { Config } from "../../src/config/schema.ts";
import { type App, createApp } from "../../src/daemon/app.ts";
import { silentLogger } from "../../src/log.ts";
import { startWorld, type World } from "../../src/simulator/world.ts";
import { DAY } from "./support.ts";

const HOUR = 3_600_000;
const cleanups: (() => Promise<unknown>)[] = [];
afterEach(async () => {
  for (const c of cleanups.splice(0).reverse()) await c().catch(() => {});
});

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
async function waitFor(what: string, predicate: () => boolean | Promise<boolean>, timeoutMs = 20_000) {
  const until = Date.now() + timeoutMs;
  while (!(await predicate())) {
    if (Date.now() > until) throw new Error(`timed out waiting for ${what}`);
    await sleep(25);
  }
}

async function world2(grace: { cancel: number; reschedule: number }): Promise<World> {
  const world = await startWorld({
    therapists: ["th_anna", "th_ben"],
    configure: (c) => {
      c.sync = {
        ...c.sync,
        calendar_poll_seconds: 5,
        window: { past_days: 30, future_days: 90 },
        writeback: { cancel_grace_seconds: grace.cancel, reschedule_grace_seconds: grace.reschedule },
      };
    },
  });
  cleanups.push(() => world.close());
  return world;
}

async function daemon(config: Config): Promise<App> {
  const app = await createApp(structuredClone(config), {
    logger: silentLogger,
    listen: "127.0.0.1:0",
    adminListen: "127.0.0.1:0",
  });
  cleanups.push(() => app.stop(3000));
  await app.start();
  return app;
}

/**
 * Books th_anna at `offsetMs` after today's 00:00 UTC, not after now: the tests move appointments two hours later,
 * which must stay within the simulator's working hours (07:00 to 21:00) whatever the time of day the test runs at (an
 * offset from now failed every run between 10:00 and 20:00 UTC, the booking service refusing the move).
 */
function book(world: World, offsetMs: number): string {
  const start = new Date(Date.now());
  start.setUTCHours(0, 0, 0, 0);
  start.setTime(start.getTime() + offsetMs);
  return String(world.booking.create({ therapist_id: "th_anna", start_time: start.toISOString() }, { force: true }).id);
}

const liveOf = (world: World, calendarId: string, id: string) =>
  world.google
    .events(calendarId)
    .filter(
      (e) =>
        e.status !== "cancelled" &&
        (e.extendedProperties as { private?: Record<string, string> } | undefined)?.private?.[
          APPOINTMENT_ID_PROPERTY
        ] === id,
    );

const startOf = (e: Record<string, unknown>) => Date.parse((e.start as { dateTime: string }).dateTime);

const writeBacks = (world: World) =>
  world.booking.requests.filter((r) => r.route.endsWith("/cancel") || r.route.startsWith("PATCH")).map((r) => r.route);

/**
 * Anna's events in her primary calendar, and a config that points her at a second calendar of her account (events.move
 * takes the events there), or with `otherAccount` at another account's calendar (the events are copied and deleted).
 */
async function repointSetup(grace: number, count: number, otherAccount = false) {
  const world = await world2({ cancel: grace, reschedule: grace });
  const old = world.calendarOf("th_anna");
  const fresh = otherAccount ? "anna2@clinic.test" : "anna.sessions@clinic.test";
  world.google.createCalendar(fresh, otherAccount ? fresh : old, { timeZone: "Europe/Berlin" });
  const ids = Array.from({ length: count }, (_, i) => book(world, (i + 1) * DAY + 9 * HOUR));
  const app = await daemon(world.config);
  await waitFor("mirrored", () => ids.every((id) => liveOf(world, old, id).length === 1));
  await app.engine.drained();
  const next = structuredClone(world.config) as Config;
  next.therapists[0]!.calendar_id = fresh;
  if (otherAccount) next.therapists[0]!.impersonate = fresh;
  return { world, old, fresh, ids, app, next };
}

describe("re-pointing a therapist", () => {
  it("pointed back at a calendar with a stale left-behind copy: written over, no reschedule sent", async () => {
    const world = await world2({ cancel: 0, reschedule: 0 });
    const primary = world.calendarOf("th_anna");
    const room = "room-anna@group.calendar.google.com";
    world.google.createCalendar(room, "owner@clinic.test", { timeZone: "Europe/Berlin" });
    world.google.shareCalendar(room, primary, "writer");
    const inRoom = structuredClone(world.config) as Config;
    inRoom.therapists[0]!.calendar_id = room;
    const id = book(world, 3 * DAY + 8 * HOUR);
    const booked = Date.parse(String(world.booking.get(id)!.start_time));
    const app = await daemon(inRoom);
    await waitFor("mirrored", () => liveOf(world, room, id).length === 1);
    await app.engine.drained();

    // Access to the room calendar is lost: Anna is pointed at her primary calendar, the room's copy is left behind.
    world.google.unshareCalendar(room, primary);
    await app.reload(structuredClone(world.config));
    await waitFor("written in the primary calendar", () => liveOf(world, primary, id).length === 1);
    await app.engine.drained();
    expect(liveOf(world, room, id)).toHaveLength(1);

    const moved = booked + 2 * HOUR;
    world.booking.move(id, moved, { force: true });
    // A reconciliation asked for while the reload's own (its backfill) runs joins that run, which may have listed the
    // booking before the move: asked again until one lists it after.
    await waitFor("the primary calendar follows the booking", async () => {
      await app.reconcile();
      await app.engine.drained();
      return startOf(liveOf(world, primary, id)[0]!) === moved;
    });

    // Access is back, and Anna is pointed back at the room: events.move answers 409 (the left-behind copy's id).
    world.google.shareCalendar(room, primary, "writer");
    await app.reload(structuredClone(inRoom));
    await waitFor("moved out of the primary calendar", () => liveOf(world, primary, id).length === 0);
    await app.engine.drained();
    await app.reconcile();
    await app.engine.drained();
    await app.poller.poll("th_anna");
    await app.engine.drained();

    expect(writeBacks(world)).toEqual([]);
    expect(Date.parse(String(world.booking.get(id)!.start_time))).toBe(moved);
    const live = liveOf(world, room, id);
    expect(live).toHaveLength(1);
    expect(startOf(live[0]!)).toBe(moved);
  }, 60_000);

  it("a deletion waiting out its grace period: not sent, and the event in the new calendar says so", async () => {
    const { world, old, fresh, ids, app, next } = await repointSetup(4, 2);
    const [id, other] = ids as [string, string];
    world.google.userDelete(old, eventIdFor(id));
    await app.poller.poll("th_anna"); // seen: it waits 4 s
    expect(writeBacks(world)).toEqual([]);

    await app.reload(next);
    await waitFor("relocated", () => liveOf(world, old, other).length === 0);
    await sleep(5000);
    await app.engine.drained();
    await app.reconcile();
    await app.engine.drained();

    expect(writeBacks(world)).toEqual([]);
    expect(world.booking.get(id)!.status).toBe("confirmed");
    const back = liveOf(world, fresh, id);
    expect(back).toHaveLength(1);
    expect(String(back[0]!.description)).toContain("your deletion of this event was not sent to the booking service");
    expect(String(back[0]!.description)).toContain("delete it again to cancel it");
    // The other event moved as it was, without a note.
    expect(String(liveOf(world, fresh, other)[0]!.description)).not.toContain("calbridge:");

    // Deleted again in the calendar now watched: an ordinary deletion, sent after its grace period.
    world.google.userDelete(fresh, String(back[0]!.id));
    await app.poller.poll("th_anna");
    await waitFor("cancelled", () => world.booking.get(id)!.status === "cancelled", 15_000);
    expect(writeBacks(world)).toEqual(["POST /v1/appointments/:id/cancel"]);
  }, 60_000);

  it("a move waiting out its grace period, re-pointed to another account's calendar (copied): sent, the time kept", async () => {
    const { world, old, fresh, ids, app, next } = await repointSetup(2, 2, true);
    const [id, other] = ids as [string, string];
    const was = world.google.event(old, eventIdFor(id)) as { start: { dateTime: string }; end: { dateTime: string } };
    const moved = Date.parse(was.start.dateTime) + 2 * HOUR;
    const at = (ms: number) => ({ dateTime: new Date(ms).toISOString() });
    world.google.userEdit(old, eventIdFor(id), { start: at(moved), end: at(Date.parse(was.end.dateTime) + 2 * HOUR) });
    await app.poller.poll("th_anna"); // seen: it waits 2 s
    expect(writeBacks(world)).toEqual([]);

    await app.reload(next);
    // Copied (written there, then deleted here), not moved by events.move: another account's calendar.
    await waitFor("copied", () =>
      ids.every((i) => liveOf(world, fresh, i).length === 1 && liveOf(world, old, i).length === 0),
    );
    expect(world.google.requestLog.some((r) => r.path.endsWith("/move") && r.status === 200)).toBe(false);
    // The copy shows the therapist's time, not the booking's: the move is still theirs, sent after its grace period.
    expect(startOf(liveOf(world, fresh, id)[0]!)).toBe(moved);
    await waitFor("rescheduled", () => Date.parse(String(world.booking.get(id)!.start_time)) === moved, 15_000);
    await app.poller.poll("th_anna");
    await app.reconcile();
    await app.engine.drained();
    expect(writeBacks(world)).toEqual(["PATCH /v1/appointments/:id"]);
    expect(liveOf(world, fresh, id).map(startOf)).toEqual([moved]);
    expect(String(liveOf(world, fresh, other)[0]!.description)).not.toContain("calbridge:");
  }, 60_000);

  it("held deletions: the events come back with a note, and writeback held --apply reports them not sent", async () => {
    const { world, old, fresh, ids, app, next } = await repointSetup(1, 6);
    const wiped = ids.slice(0, 4);
    for (const id of wiped) world.google.userDelete(old, eventIdFor(id));
    await app.poller.poll("th_anna");
    await sleep(2000);
    await app.engine.drained();
    expect((await app.sync.guard.held("th_anna")).map((h) => h.appointmentId).sort()).toEqual([...wiped].sort());

    await app.reload(next);
    await waitFor("relocated", () => ids.every((id) => liveOf(world, fresh, id).length === 1));
    await app.engine.drained();
    for (const id of wiped) {
      expect(String(liveOf(world, fresh, id)[0]!.description)).toContain("your deletion of this event was not sent");
    }

    const r = await writebackHeld(app, { therapistId: "th_anna", decision: "apply" });
    await app.engine.drained();
    expect(writeBacks(world)).toEqual([]);
    expect(wiped.map((id) => world.booking.get(id)!.status)).toEqual(Array(4).fill("confirmed"));
    expect(r.decided).toHaveLength(4);
    for (const d of r.decided) {
      expect(d.ok).toBe(false);
      expect(d.did).toMatch(/^not sent: there is nothing to send now/);
    }
    expect(await app.sync.guard.held("th_anna")).toEqual([]);
  }, 60_000);
});
