// A therapist's calendar_id changes (#15): through the real daemon (createApp, started as `calbridge run` starts it)
// against the Calendar emulator, calbridge's events move to the new calendar (events.move when the account can write
// both, else written in the new one and deleted from the old), links follow, and nothing is written back: with the
// grace periods at 0 and the old calendars still polled (two therapists swap calendars), removing calbridge's own event
// from the old calendar never becomes a cancellation or a PATCH. An old calendar that cannot be reached is left alone,
// reported, and the new one gets one event per appointment.
import { afterEach, describe, expect, it } from "vitest";
import { eventIdFor } from "../../src/calendar/ids.ts";
import { runDoctor } from "../../src/cli/doctor.ts";
import type { Config } from "../../src/config/schema.ts";
import { type App, createApp } from "../../src/daemon/app.ts";
import { silentLogger } from "../../src/log.ts";
import { startWorld, type World } from "../../src/simulator/world.ts";
import type { Link } from "../../src/sync/types.ts";
import { captureLog } from "../support/log-capture.ts";
import { DAY, iso } from "./support.ts";

const cleanups: (() => Promise<unknown>)[] = [];
afterEach(async () => {
  for (const c of cleanups.splice(0).reverse()) await c().catch(() => {});
});

async function waitFor(what: string, predicate: () => boolean | Promise<boolean>, timeoutMs = 20_000) {
  const until = Date.now() + timeoutMs;
  while (!(await predicate())) {
    if (Date.now() > until) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 25));
  }
}

async function world2(): Promise<World> {
  const world = await startWorld({
    therapists: ["th_anna", "th_ben"],
    configure: (c) => {
      // Any cancellation or move seen would be written back at once: the test must see none.
      c.sync = {
        ...c.sync,
        calendar_poll_seconds: 5,
        window: { past_days: 30, future_days: 90 },
        writeback: { cancel_grace_seconds: 0, reschedule_grace_seconds: 0 },
      };
    },
  });
  cleanups.push(() => world.close());
  return world;
}

/** The daemon as `calbridge run` makes it: leader work (reconciliation at start, polling) included. */
async function daemon(config: Config, logger = silentLogger, oneShot = false): Promise<App> {
  const app = await createApp(config, { logger, listen: "127.0.0.1:0", adminListen: "127.0.0.1:0", oneShot });
  cleanups.push(() => app.stop(3000));
  await app.start();
  return app;
}

/** Appointments of a therapist: `future` in the coming days, and one 20 days ago. */
function book(world: World, therapistId: string, future: number): string[] {
  const ids: string[] = [];
  for (let i = 0; i < future; i++) {
    const start = iso(Date.now() + (i + 1) * DAY + 9 * 3_600_000);
    ids.push(String(world.booking.create({ therapist_id: therapistId, start_time: start }, { force: true }).id));
  }
  const past = iso(Date.now() - 20 * DAY);
  ids.push(String(world.booking.create({ therapist_id: therapistId, start_time: past }, { force: true }).id));
  return ids;
}

const liveIds = (world: World, calendarId: string) =>
  world.google
    .events(calendarId)
    .filter((e) => e.status !== "cancelled")
    .map((e) => String(e.id))
    .sort();

const writebacks = (world: World) =>
  world.booking.requests.filter(
    (r) => r.route === "PATCH /v1/appointments/:id" || r.route === "POST /v1/appointments/:id/cancel",
  ).length;

/** The world's config with some therapists' calendars (and delegated accounts) changed, and a shorter past window. */
function repointed(world: World, to: Record<string, string>, pastDays = 1): Config {
  const config = structuredClone(world.config);
  config.sync.window.past_days = pastDays;
  for (const t of config.therapists) {
    const calendar = to[t.therapist_id];
    if (calendar) Object.assign(t, { calendar_id: calendar, impersonate: calendar });
  }
  return config;
}

async function mirrored(world: World, anna: string[], ben: string[]): Promise<void> {
  const first = await daemon(world.config);
  await waitFor("both calendars mirrored", () => liveIds(world, world.calendarOf("th_anna")).length === anna.length);
  await waitFor("ben mirrored", () => liveIds(world, world.calendarOf("th_ben")).length === ben.length);
  await first.stop(3000);
}

const eventIds = (ids: string[]) => ids.map((id) => eventIdFor(id)).sort();

describe("a therapist's calendar changes", () => {
  it("moves the events by events.move when the account can write both, past ones too, and writes nothing back", async () => {
    const world = await world2();
    const anna = book(world, "th_anna", 4);
    const ben = book(world, "th_ben", 2);
    await mirrored(world, anna, ben);
    const old = world.calendarOf("th_anna");
    // A second calendar of Anna's own account: the same delegated account writes both.
    world.google.createCalendar("anna.sessions@clinic.test", old, { timeZone: "Europe/Berlin" });
    const config = repointed(world, {});
    config.therapists[0]!.calendar_id = "anna.sessions@clinic.test";
    const inserts = world.google.counters.inserts;

    const app = await daemon(config);
    await waitFor("Anna's events in the new calendar", () => liveIds(world, "anna.sessions@clinic.test").length === 5);
    await waitFor("none left in the old one", () => liveIds(world, old).length === 0);
    expect(liveIds(world, "anna.sessions@clinic.test")).toEqual(eventIds(anna));
    // Moved, not copied: the one 20 days ago (outside the 1-day window now) by the relocation pass.
    expect(world.google.counters.moves).toBe(5);
    expect(world.google.counters.inserts).toBe(inserts);
    // The link is written once the move is answered: Google can show the event moved a moment before.
    await waitFor("links name the new calendar", async () => {
      const links = await Promise.all(anna.map((id) => app.sync.links.get(id)));
      return links.every((l) => l?.calendarId === "anna.sessions@clinic.test");
    });
    expect(liveIds(world, world.calendarOf("th_ben"))).toEqual(eventIds(ben));
    // Each appointment's history says the event went to the calendar the administrator named.
    await app.sync.history.log.flush();
    for (const id of anna) {
      const { entries } = await app.sync.history.log.read(id);
      expect(entries.filter((e) => e.kind === "event_relocated")).toEqual([
        expect.objectContaining({ origin: "admin", therapistId: "th_anna" }),
      ]);
    }

    // The new calendar is polled and reconciled: calbridge's own moves are no change, nothing is written back.
    const pollsBefore = app.poller.lastPollAt("th_anna") ?? 0;
    await waitFor("a poll of the new calendar", () => (app.poller.lastPollAt("th_anna") ?? 0) > pollsBefore);
    expect((await app.reconcile()).plan).toEqual([]);
    await app.engine.drained();
    expect(writebacks(world)).toBe(0);
    expect(liveIds(world, "anna.sessions@clinic.test")).toEqual(eventIds(anna));
  });

  it("two therapists swap calendars: copied and deleted, both old calendars polled, no write-back", async () => {
    const world = await world2();
    const anna = book(world, "th_anna", 3);
    const ben = book(world, "th_ben", 3);
    await mirrored(world, anna, ben);
    const [annaCal, benCal] = [world.calendarOf("th_anna"), world.calendarOf("th_ben")];

    const log = captureLog("info");
    const app = await daemon(repointed(world, { th_anna: benCal, th_ben: annaCal }), log.logger);
    await waitFor("the calendars swapped", () => {
      const [a, b] = [liveIds(world, annaCal), liveIds(world, benCal)];
      return a.join() === eventIds(ben).join() && b.join() === eventIds(anna).join();
    });
    // Each account may write only its own calendar: no events.move, each event written anew and the old one deleted.
    expect(world.google.counters.moves).toBe(0);
    // Both old calendars are some therapist's calendar now, polled every 5 s, and saw calbridge's deletions.
    const polled = Date.now();
    await waitFor("polls after the swap", () =>
      ["th_anna", "th_ben"].every((t) => (app.poller.lastPollAt(t) ?? 0) > polled),
    );
    expect((await app.reconcile()).plan).toEqual([]);
    await app.engine.drained();
    // The reconciliation at start waited for the moves: no event caught between two calendars looked like a stray.
    expect(log.find((l) => String(l.msg).startsWith("mass-deletion guard"))).toBeUndefined();
    expect(writebacks(world)).toBe(0);
    expect(world.booking.all().filter((a) => a.status === "cancelled")).toEqual([]);
    expect(liveIds(world, annaCal)).toEqual(eventIds(ben));
    expect(liveIds(world, benCal)).toEqual(eventIds(anna));
  });

  it("an old calendar that cannot be reached is left alone and reported; the new one gets one event each", async () => {
    const world = await world2();
    const anna = book(world, "th_anna", 3);
    const ben = book(world, "th_ben", 1);
    await mirrored(world, anna, ben);
    const old = world.calendarOf("th_anna");
    world.google.createCalendar("anna.new@clinic.test", "anna.new@clinic.test", { timeZone: "Europe/Berlin" });
    // Anna's old account is gone: delegation for it is refused, and her new account has no access to the old calendar.
    world.google.revokeTokens(old);
    const log = captureLog("info");
    const app = await daemon(repointed(world, { th_anna: "anna.new@clinic.test" }), log.logger);

    await waitFor("one event each in the new calendar", () => liveIds(world, "anna.new@clinic.test").length === 4);
    await app.engine.drained();
    expect(liveIds(world, "anna.new@clinic.test")).toEqual(eventIds(anna));
    expect(liveIds(world, old)).toEqual(eventIds(anna)); // left alone
    expect(writebacks(world)).toBe(0);
    expect(log.find((l) => String(l.msg).startsWith("old calendar cannot be reached"))).toMatchObject({
      therapist_id: "th_anna",
      from_calendar: old,
      to_calendar: "anna.new@clinic.test",
    });

    // Told in /status and doctor, with the command for when access is back. Nothing more to do for the daemon.
    await app.mappingReport();
    const res = await fetch(`${app.admin!.url}/status`);
    const status = (await res.json()) as { mapping: { leftBehind: Record<string, unknown>[] } };
    expect(status.mapping.leftBehind).toEqual([
      expect.objectContaining({
        therapistId: "th_anna",
        calendarId: old,
        events: 4,
        purge: `calbridge purge --therapist th_anna --calendar ${old}`,
      }),
    ]);
    const html = await (await fetch(`${app.admin!.url}/status.html`)).text();
    expect(html).toContain("left behind");
    const checks = await runDoctor(app);
    expect(checks.find((c) => c.name === "mapping: th_anna")).toMatchObject({
      status: "warn",
      detail: expect.stringContaining(`4 events stayed in ${old}`),
    });
    expect((await app.reconcile()).plan).toEqual([]);
  });

  it("a dry run shows the moves and writes nothing", async () => {
    const world = await world2();
    const anna = book(world, "th_anna", 2);
    await mirrored(world, anna, []);
    world.google.createCalendar("anna.sessions@clinic.test", world.calendarOf("th_anna"));
    const config = repointed(world, {}, 30);
    config.therapists[0]!.calendar_id = "anna.sessions@clinic.test";
    const writes = world.google.writes;
    const app = await daemon(config, silentLogger, true);
    const report = await app.reconcile({ dryRun: true });
    expect(report.plan.map((p) => p.kind)).toEqual(["move", "move", "move"]);
    expect(report.plan[0]).toMatchObject({
      reason: `the mapping names another calendar: from ${world.calendarOf("th_anna")} to anna.sessions@clinic.test`,
    });
    expect(world.google.writes).toBe(writes);
    const link = await app.store.table<Link>("links").get(anna[0]!);
    expect(link?.calendarId).toBe(world.calendarOf("th_anna"));
  });
});
