// Reloading the configuration (#15). In process: a valid change is applied between syncs while webhooks keep
// arriving (every one applied), a new therapist is backfilled at once (no cron), a removed one is left alone, a
// re-pointed one's events move, settings apply, and settings only a restart takes up are named and kept. As
// `calbridge run` in a child process: SIGHUP with a valid file applies it without a restart and without a missed
// webhook; SIGHUP with a broken file logs each problem and the daemon goes on with the configuration it has.
import { readFileSync, writeFileSync } from "node:fs";
import { afterEach, describe, expect, it } from "vitest";
import { parse, stringify } from "yaml";
import { eventIdFor } from "../../src/calendar/ids.ts";
import type { Config } from "../../src/config/schema.ts";
import { type App, createApp } from "../../src/daemon/app.ts";
import { startWorld, WORLD_WEBHOOK_SECRET, type World } from "../../src/simulator/world.ts";
import { type Daemon, daemonFor } from "../chaos/daemon.ts";
import { captureLog } from "../support/log-capture.ts";

const DAY = 86_400_000;
const cleanups: (() => Promise<unknown>)[] = [];
afterEach(async () => {
  for (const c of cleanups.splice(0).reverse()) await c().catch(() => {});
});

async function waitFor(what: string, predicate: () => boolean | Promise<boolean>, timeoutMs = 30_000) {
  const until = Date.now() + timeoutMs;
  while (!(await predicate())) {
    if (Date.now() > until) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 25));
  }
}

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

async function world3(mapped: string[]): Promise<World> {
  const world = await startWorld({
    therapists: ["th_anna", "th_ben", "th_cleo"],
    mapped,
    webhookTimeScale: 1 / 6000,
    configure: (c) => {
      c.event = { ...c.event, title: "Session: {service_name}" };
    },
  });
  cleanups.push(() => world.close());
  return world;
}

/** Books one appointment a few days ahead; returns its id. */
function book(world: World, therapistId: string, n: number): string {
  const start = new Date(Date.now() + (1 + (n % 20)) * DAY);
  start.setUTCHours(7 + (n % 12), (n * 7) % 60, 0, 0);
  return String(
    world.booking.create({ therapist_id: therapistId, start_time: start.toISOString() }, { force: true }).id,
  );
}

const liveEvent = (world: World, therapistId: string, id: string) => {
  const ev = world.google.event(world.calendarOf(therapistId), eventIdFor(id));
  return ev && ev.status !== "cancelled" ? ev : undefined;
};

/** Books appointments for these therapists every few ms until `until` resolves; answers what was booked. */
async function keepBooking(world: World, therapists: string[], until: Promise<unknown>) {
  const booked: { therapistId: string; id: string }[] = [];
  let done = false;
  void until.finally(() => (done = true));
  for (let n = 0; !done || booked.length < 10; n++) {
    const therapistId = therapists[n % therapists.length]!;
    booked.push({ therapistId, id: book(world, therapistId, n) });
    await sleep(15);
  }
  return booked;
}

describe("reloading the configuration in process", () => {
  it("applies a change between syncs while webhooks arrive: added backfilled, removed left, re-pointed moved", async () => {
    const world = await world3(["th_anna", "th_ben"]);
    const before = [book(world, "th_cleo", 100), book(world, "th_cleo", 101)];
    const benEarly = book(world, "th_ben", 102);
    const log = captureLog("info");
    const app: App = await createApp(world.config, {
      logger: log.logger,
      listen: "127.0.0.1:0",
      adminListen: "127.0.0.1:0",
    });
    cleanups.push(() => app.stop(3000));
    await app.start();
    world.booking.addWebhookEndpoint({
      url: `${app.http!.url}/webhooks/booking`,
      secret: WORLD_WEBHOOK_SECRET,
      events: ["*"],
    });
    await waitFor("Ben's early appointment", () => liveEvent(world, "th_ben", benEarly) !== undefined);
    world.google.createCalendar("anna.sessions@clinic.test", world.calendarOf("th_anna"), {
      timeZone: "Europe/Berlin",
    });

    const next = structuredClone(world.config) as Config;
    next.therapists = next.therapists.filter((t) => t.therapist_id !== "th_ben");
    next.therapists[0]!.calendar_id = "anna.sessions@clinic.test";
    next.therapists.push({
      ...next.therapists[0]!,
      therapist_id: "th_cleo",
      calendar_id: world.calendarOf("th_cleo"),
      impersonate: world.calendarOf("th_cleo"),
    });
    next.event.title = "Appointment: {service_name}";
    next.sync.calendar_poll_seconds = 30;
    next.webhooks.listen = "127.0.0.1:1"; // only a restart takes this up

    let reloaded!: () => void;
    const reloading = new Promise<void>((r) => (reloaded = r));
    const booking = keepBooking(world, ["th_anna", "th_cleo"], reloading);
    await sleep(200);
    const changes = await app.reload(next);
    reloaded();
    const booked = await booking;

    expect(changes).toMatchObject({
      added: ["th_cleo"],
      removed: ["th_ben"],
      repointed: [{ therapistId: "th_anna", from: world.calendarOf("th_anna"), to: "anna.sessions@clinic.test" }],
      settings: ["sync.calendar_poll_seconds", "event.title"],
      restartNeeded: ["webhooks.listen"],
    });
    const line = log.find((l) => String(l.msg).startsWith("configuration reloaded"));
    expect(line?.msg).toBe(
      `configuration reloaded: therapists added: th_cleo; removed: th_ben; re-pointed: th_anna (${world.calendarOf("th_anna")} → anna.sessions@clinic.test); settings changed: sync.calendar_poll_seconds, event.title; needs a restart, left as it was: webhooks.listen`,
    );
    expect(app.config.webhooks.listen).toBe(world.config.webhooks.listen);
    expect(app.config.event.title).toBe("Appointment: {service_name}");

    // Every webhook sent during the reload was applied: each booking has its one event, in the calendar mapped now.
    await world.booking.webhooksIdle();
    const calendarNow = (t: string) => (t === "th_anna" ? "anna.sessions@clinic.test" : world.calendarOf(t));
    await waitFor("every booking mirrored", () =>
      [...booked, ...before.map((id) => ({ therapistId: "th_cleo", id }))].every(({ therapistId, id }) => {
        const ev = world.google.event(calendarNow(therapistId), eventIdFor(id));
        return ev !== undefined && ev.status !== "cancelled";
      }),
    );
    await app.engine.drained();
    expect(world.booking.deliveries.filter((d) => d.state !== "delivered")).toEqual([]);
    const annaLive = world.google.events(world.calendarOf("th_anna")).filter((e) => e.status !== "cancelled");
    expect(annaLive).toEqual([]); // all moved
    // Cleo's appointments from before the reload: backfilled at once (the cron runs every 15 minutes).
    for (const id of before) expect(liveEvent(world, "th_cleo", id)?.summary).toMatch(/^Appointment: /);
    // Ben is no longer mapped: his event stays as it was, and he is reported.
    expect(liveEvent(world, "th_ben", benEarly)?.summary).toMatch(/^Session: /);
    expect((await app.mappingReport()).unmapped.map((u) => u.therapistId)).toEqual(["th_ben"]);
    const writebacks = world.booking.requests.filter((r) => r.route.startsWith("PATCH") || r.route.endsWith("/cancel"));
    expect(writebacks).toEqual([]);
  });

  it("a therapist added over an earlier installation's events: a copy of an appointment now another's goes at the next run", async () => {
    const world = await world3(["th_anna", "th_ben"]);
    world.config.sync.calendar_full_listing_hours = 24;
    const started = async (config: Config, logger = captureLog("info").logger) => {
      const a = await createApp(structuredClone(config), { logger, listen: "127.0.0.1:0", adminListen: "127.0.0.1:0" });
      cleanups.push(() => a.stop(3000));
      await a.start();
      return a;
    };
    // An earlier installation (its own store) mirrored Ben's appointment; it is reassigned to Anna while nothing runs.
    const id = book(world, "th_ben", 1);
    const earlier = await started(world.config);
    await waitFor("Ben's event", () => liveEvent(world, "th_ben", id) !== undefined);
    await earlier.stop(3000);
    world.booking.reassign(id, "th_anna");

    // A new installation (a new store) with Anna; Ben added by a reload: that run lists only Ben's appointments, so it
    // cannot tell the event in his calendar from his own.
    const fresh = structuredClone(world.config) as Config;
    fresh.store.url = `sqlite://${world.dir}/second.sqlite`;
    const log = captureLog("info");
    const app = await started(
      { ...fresh, therapists: fresh.therapists.filter((t) => t.therapist_id === "th_anna") },
      log.logger,
    );
    const runs = () => log.lines.filter((l) => l.msg === "reconciliation finished");
    await waitFor("the start's run", () => runs().length === 1);
    expect(liveEvent(world, "th_anna", id)).toBeDefined();
    expect((await app.reload(structuredClone(fresh))).added).toEqual(["th_ben"]);
    await waitFor("Ben's run", () => runs().length === 2);
    expect(runs()[1]).toMatchObject({ appointments: 0, calendars_listed: 1, counts: {} });
    await app.engine.drained();
    expect(liveEvent(world, "th_ben", id)).toBeDefined();

    // The next run lists Ben's calendar in full again (not a day later) and removes the copy; nothing is written back.
    expect(await app.reconcile()).toMatchObject({ counts: { delete: 1 } });
    await app.engine.drained();
    expect(liveEvent(world, "th_ben", id)).toBeUndefined();
    expect(liveEvent(world, "th_anna", id)).toBeDefined();
    expect(world.booking.get(id)?.status).toBe("confirmed");
    const writebacks = world.booking.requests.filter((r) => r.route.startsWith("PATCH") || r.route.endsWith("/cancel"));
    expect(writebacks).toEqual([]);
  });

  it("a therapist re-pointed to a calendar holding an earlier installation's copy of a colleague's appointment: it goes at the next run", async () => {
    const world = await world3(["th_anna", "th_ben"]);
    world.config.sync.calendar_full_listing_hours = 24;
    const sessions = "anna.sessions@clinic.test";
    world.google.createCalendar(sessions, world.calendarOf("th_anna"), { timeZone: "Europe/Berlin" });
    const started = async (config: Config, logger = captureLog("info").logger) => {
      const a = await createApp(structuredClone(config), { logger, listen: "127.0.0.1:0", adminListen: "127.0.0.1:0" });
      cleanups.push(() => a.stop(3000));
      await a.start();
      return a;
    };
    const onSessions = (c: Config) => {
      c.therapists = c.therapists.map((t) => (t.therapist_id === "th_anna" ? { ...t, calendar_id: sessions } : t));
    };
    // An earlier installation (its own store) mirrored Anna's appointment into her sessions calendar; it is
    // reassigned to Ben while nothing runs.
    const id = book(world, "th_anna", 1);
    const earlierConfig = structuredClone(world.config) as Config;
    earlierConfig.store.url = `sqlite://${world.dir}/earlier.sqlite`;
    onSessions(earlierConfig);
    const earlier = await started(earlierConfig);
    const liveIn = (cal: string) =>
      world.google.events(cal).filter((e) => e.id === eventIdFor(id) && e.status !== "cancelled");
    await waitFor("the event in the sessions calendar", () => liveIn(sessions).length === 1);
    await earlier.stop(3000);
    world.booking.reassign(id, "th_ben");

    // This installation has Anna on her own calendar; its first run lists it in full, and dates the next listing of
    // Anna's calendar a day ahead. A reload re-points her to the sessions calendar.
    const log = captureLog("info");
    const app = await started(world.config, log.logger);
    const runs = () => log.lines.filter((l) => l.msg === "reconciliation finished");
    await waitFor("the start's run", () => runs().length === 1);
    expect(liveEvent(world, "th_ben", id)).toBeDefined();
    const next = structuredClone(world.config) as Config;
    onSessions(next);
    expect((await app.reload(next)).repointed.map((r) => r.therapistId)).toEqual(["th_anna"]);
    await waitFor("Anna's run after the move", () => runs().length === 2);
    await app.engine.drained();

    // The next full run lists the sessions calendar in full (not at the old calendar's date, a day later): the copy
    // goes. (The first call may join a run the move began, scoped to Anna, under load.)
    for (let i = 0; i < 2; i++) {
      await app.reconcile();
      await app.engine.drained();
    }
    expect(liveIn(sessions)).toEqual([]);
    expect(liveEvent(world, "th_ben", id)).toBeDefined();
    expect(world.booking.get(id)?.status).toBe("confirmed");
    const writebacks = world.booking.requests.filter((r) => r.route.startsWith("PATCH") || r.route.endsWith("/cancel"));
    expect(writebacks).toEqual([]);
  });
});

/** Rewrites the daemon's YAML file (the Config shape, secrets as ${...} references) with `edit` applied. */
function editFile(file: string, edit: (c: Config) => void): void {
  const config = parse(readFileSync(file, "utf8")) as Config;
  edit(config);
  writeFileSync(file, stringify(config));
}

describe("SIGHUP to `calbridge run`", () => {
  it("applies a valid file without a restart or a missed webhook, and keeps the old one when the file is broken", async () => {
    const world = await world3(["th_anna"]);
    const benBefore = book(world, "th_ben", 200);
    const daemon: Daemon = await daemonFor(world, { name: "reload daemon" });
    cleanups.push(() => daemon.stop(10_000));
    await daemon.start();
    world.booking.addWebhookEndpoint({ url: daemon.webhookUrl, secret: WORLD_WEBHOOK_SECRET, events: ["*"] });

    let reloaded!: () => void;
    const reloading = new Promise<void>((r) => (reloaded = r));
    const booking = keepBooking(world, ["th_anna", "th_ben"], reloading);
    await sleep(300);
    editFile(daemon.configFile, (c) => {
      c.therapists.push({
        ...c.therapists[0]!,
        therapist_id: "th_ben",
        calendar_id: world.calendarOf("th_ben"),
        impersonate: world.calendarOf("th_ben"),
      });
      c.event.title = "Appointment: {service_name}";
    });
    daemon.child.kill("SIGHUP");
    const log = (re: RegExp) => daemon.lines().find((l) => re.test(l));
    await waitFor("the reload's line", () => log(/configuration reloaded/) !== undefined);
    await sleep(300);
    reloaded();
    const booked = await booking;
    expect(log(/configuration reloaded/)).toContain(
      "configuration reloaded: therapists added: th_ben; settings changed: event.title",
    );

    await world.booking.webhooksIdle();
    await waitFor("every booking mirrored", () =>
      [...booked, { therapistId: "th_ben", id: benBefore }].every(({ therapistId, id }) =>
        liveEvent(world, therapistId, id),
      ),
    );
    expect(world.booking.deliveries.filter((d) => d.state !== "delivered")).toEqual([]);
    expect(liveEvent(world, "th_ben", benBefore)?.summary).toMatch(/^Appointment: /); // backfilled at once
    expect(daemon.alive()).toBe(true);
    expect(daemon.starts).toBe(1);

    // A broken file: each problem is logged, nothing changes, and webhooks are still applied.
    writeFileSync(daemon.configFile, `${readFileSync(daemon.configFile, "utf8")}\nsync:\n  window: "unterminated\n`);
    daemon.child.kill("SIGHUP");
    await waitFor("the refusal", () => log(/configuration not reloaded/) !== undefined);
    expect(log(/invalid configuration .*: line \d+, column \d+: the \\" opened here is never closed/)).toBeDefined();
    const after = book(world, "th_anna", 300);
    await waitFor("a booking after the refusal", () => liveEvent(world, "th_anna", after) !== undefined);
    expect(liveEvent(world, "th_anna", after)?.summary).toMatch(/^Appointment: /);
    expect(daemon.alive()).toBe(true);
    expect(await daemon.stop(10_000)).toBe(0);
  });
});
