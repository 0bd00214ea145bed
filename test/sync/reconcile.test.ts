import { afterEach, describe, expect, it } from "vitest";
import { eventIdFor } from "../../src/calendar/ids.ts";
import { ManualClock } from "../../src/clock.ts";
import type { Link } from "../../src/sync/types.ts";
import { DAY, daemonHarness, type Harness, harness, iso, liveOf } from "./support.ts";

let h: Harness | undefined;
afterEach(async () => {
  await h?.close();
  h = undefined;
});

const listRequests = (x: Harness) => x.world.booking.requests.filter((r) => r.route === "GET /v1/appointments").length;

describe("reconciliation", () => {
  it("mirrors 1,000 appointments over 10 therapists at the listing floor, then writes nothing on a second run", async () => {
    h = await harness({ therapists: 10 });
    const now = Date.now();
    h.world.booking.seed({ therapists: h.world.therapists, count: 1000, from: now - 2 * DAY, to: now + 60 * DAY });
    const report = await h.app.reconcile();
    expect(report.ok).toBe(true);
    expect(report.appointments).toBe(1000);
    const confirmed = h.world.booking.all().filter((a) => a.status !== "cancelled");
    expect(h.allLive()).toHaveLength(confirmed.length);
    expect(listRequests(h)).toBe(Math.ceil(1000 / 100));
    // Every event is in its therapist's calendar, with its appointment id and the deterministic id.
    for (const a of confirmed.slice(0, 50)) {
      const ev = h.world.google.event(h.world.calendarOf(String(a.therapist_id)), eventIdFor(String(a.id)));
      expect(ev?.status).toBe("confirmed");
    }
    const writes = h.writes();
    const before = h.world.booking.requests.length;
    const second = await h.app.reconcile();
    expect(second.plan).toEqual([]);
    expect(h.writes()).toBe(writes);
    expect(h.world.booking.requests.length - before).toBe(Math.ceil(1000 / 100));
  });

  it("reconciles the whole window when the booking service refuses lists that wide (its limits are not in the spec)", async () => {
    h = await harness({ therapists: 3 });
    const sim = h.world.booking;
    sim.dateReading.maxRangeDays = 31;
    const now = Date.now();
    // The default window: 7 days back, 90 ahead; appointments over all of it and a little beyond.
    sim.seed({ therapists: h.world.therapists, count: 300, from: now - 9 * DAY, to: now + 92 * DAY });
    const report = await h.app.reconcile();
    expect(report.ok).toBe(true);
    // In the window: overlapping it, as Google's listing of the calendar side is (one in progress at its past edge too).
    const inWindow = sim.all().filter((a) => {
      const start = Date.parse(a.start_time as string);
      const end = Date.parse(a.end_time as string);
      return a.status !== "cancelled" && end > now - 7 * DAY && start <= now + 90 * DAY;
    });
    expect(inWindow.length).toBeGreaterThan(200);
    expect(
      h
        .allLive()
        .map((ev) => ev.id)
        .sort(),
    ).toEqual(inWindow.map((a) => eventIdFor(String(a.id))).sort());
    const refused = () => sim.requests.filter((r) => r.route === "GET /v1/appointments" && r.status === 400).length;
    expect(refused()).toBeGreaterThan(0);
    const before = refused();
    const writes = h.writes();
    const second = await h.app.reconcile();
    expect(second.plan).toEqual([]);
    expect(h.writes()).toBe(writes);
    expect(refused()).toBe(before);
  });

  it("repairs every kind of drift in one run", async () => {
    h = await harness({
      therapists: 3,
      configure: (c) => {
        c.sync = { ...c.sync, writeback: { cancel: false, reschedule: false } };
      },
    });
    const sim = h.world.booking;
    const now = Date.now();
    const [a, b, c, d, e] = ["th_1", "th_1", "th_2", "th_2", "th_3"].map((t, i) =>
      sim.create({ therapist_id: t, start_time: iso(now + (i + 1) * DAY + 10 * 3_600_000) }, { force: true }),
    );
    await h.app.reconcile();
    expect(h.allLive()).toHaveLength(5);

    const missed = sim.create({ therapist_id: "th_3", start_time: iso(now + 9 * DAY) }, { force: true }); // missed create
    sim.cancel(String(a!.id)); // missed cancel
    sim.reassign(String(b!.id), "th_3", { force: true }); // reassignment
    const cal2 = h.world.calendarOf("th_2");
    h.world.google.userDelete(cal2, eventIdFor(String(c!.id))); // deleted by hand
    h.world.google.userEdit(cal2, eventIdFor(String(d!.id)), { summary: "my own title" }); // edited by hand
    // An orphan: a managed event whose appointment the booking service does not know.
    h.world.google.userInsert(h.world.calendarOf("th_3"), {
      id: eventIdFor("apt_ghost"),
      summary: "ghost",
      start: { dateTime: iso(now + 3 * DAY) },
      end: { dateTime: iso(now + 3 * DAY + 3_600_000) },
      extendedProperties: { private: { calbridge_appointment_id: "apt_ghost", calbridge_managed: "1" } },
    });

    const report = await h.app.reconcile();
    expect(report.ok).toBe(true);
    expect(report.counts).toMatchObject({ create: 1, delete: 2, move: 1, restore: 1, update: 1 });

    const idsIn = (t: string) => h!.live(t).map((ev) => ev.id);
    expect(idsIn("th_1")).toEqual([]);
    // Google refuses to bring back an id a person deleted: the event is back under the next generation of its id.
    expect(idsIn("th_2").sort()).toEqual([eventIdFor(String(c!.id), 1), eventIdFor(String(d!.id))].sort());
    expect(idsIn("th_3").sort()).toEqual([b, e, missed].map((x) => eventIdFor(String(x!.id))).sort());
    expect(h.world.google.event(cal2, eventIdFor(String(d!.id)))?.summary).not.toBe("my own title");

    const writes = h.writes();
    expect((await h.app.reconcile()).plan).toEqual([]);
    expect(h.writes()).toBe(writes);
  });

  it("holds a mass deletion until forced", async () => {
    h = await harness({ therapists: 2 });
    const now = Date.now();
    const ids = h.world.booking.seed({
      therapists: h.world.therapists,
      count: 40,
      from: now + DAY,
      to: now + 20 * DAY,
    });
    await h.app.reconcile();
    const mirrored = h.allLive().length;
    for (const id of ids.slice(0, 20)) if (h.world.booking.get(id)?.status === "confirmed") h.world.booking.cancel(id);

    const held = await h.app.reconcile();
    expect(held.guard.tripped).toBe(true);
    expect(held.ok).toBe(false);
    expect(h.allLive()).toHaveLength(mirrored);
    expect(await h.app.store.table("meta").get("last_reconcile_success")).toBeDefined();
    const metrics = await h.app.registry.getSingleMetricAsString("calbridge_mass_delete_guard_tripped_total");
    expect(metrics).toMatch(/ 1$/m);

    const forced = await h.app.reconcile({ force: true });
    expect(forced.guard.tripped).toBe(false);
    expect(h.allLive().length).toBe(h.world.booking.all().filter((a) => a.status !== "cancelled").length);
  });

  it("repairs a crash between the calendar write and the store write without a duplicate", async () => {
    h = await harness({ therapists: 1 });
    const appt = h.world.booking.create(
      { therapist_id: "th_1", start_time: iso(Date.now() + 2 * DAY) },
      { force: true },
    );
    const links = h.app.store.table<Link>("links");
    const realSet = links.set.bind(links);
    let crash = true;
    links.set = async (key, value, ttl) => {
      if (crash) {
        crash = false;
        throw new Error("simulated crash before the link was written");
      }
      return realSet(key, value, ttl);
    };
    await h.app.reconcile();
    expect(h.live("th_1")).toHaveLength(1); // the event was written, the link was not
    expect(await realSetGet(links, String(appt.id))).toBeUndefined();

    const report = await h.app.reconcile();
    expect(report.counts).toMatchObject({ adopt: 1 });
    expect(h.live("th_1")).toHaveLength(1);
    expect((await links.get(String(appt.id)))?.present).toBe(true);
  });

  it("dry run plans without writing anything anywhere", async () => {
    h = await harness({ therapists: 2 });
    const now = Date.now();
    h.world.booking.seed({ therapists: h.world.therapists, count: 30, from: now, to: now + 10 * DAY });
    const report = await h.app.reconcile({ dryRun: true });
    expect(report.dryRun).toBe(true);
    expect(report.counts.create).toBeGreaterThan(0);
    expect(h.writes()).toBe(0);
    const entries: unknown[] = [];
    for await (const e of h.app.store.table("links").entries()) entries.push(e);
    expect(entries).toEqual([]);
    expect(await h.app.store.table("meta").get("last_reconcile_success")).toBeUndefined();
  });

  it("does not act on a listing item older than a link a webhook wrote while the listing ran", async () => {
    const clock = new ManualClock(Date.now());
    h = await daemonHarness({ therapists: ["th_1"], clock });
    const x = h;
    const sim = x.world.booking;
    const google = x.world.google;
    const cal = x.world.calendarOf("th_1");
    sim.seed({ therapists: ["th_1"], count: 150, from: clock.now() + DAY, to: clock.now() + 30 * DAY });
    await x.app.reconcile();
    await x.app.engine.idle();
    // An appointment the listing's first page carries, confirmed and in the calendar.
    const res = await fetch(`${sim.url}/v1/appointments?page=1&per_page=100`, {
      headers: { authorization: `Bearer ${sim.apiKey}` },
    });
    const page1 = ((await res.json()) as { data: { id: string; status: string }[] }).data;
    const victim = page1.find((a) => a.status === "confirmed")!.id;
    expect(liveOf(x, cal, victim)).toHaveLength(1);

    // Each answer of the next listing takes a while: page 1 is read with the victim confirmed; while page 2 waits,
    // a second later, the victim is cancelled and its webhook synced (the event removed, the link written).
    const lists = () => sim.requests.filter((r) => r.route === "GET /v1/appointments").length;
    const before = lists();
    sim.faults.latencyMs = 1_500;
    const run = x.app.reconcile();
    while (lists() < before + 2) await new Promise((r) => setTimeout(r, 5));
    sim.faults.latencyMs = 0;
    await clock.advance(1_000);
    sim.cancel(victim, "cancelled while the listing ran");
    await sim.webhooksIdle();
    await x.app.processor.idle();
    await x.app.engine.idle();
    expect(liveOf(x, cal, victim)).toEqual([]);
    // Page 2 is still being answered: the link was written while the listing ran.
    const listRequests = sim.requests.filter((r) => r.route === "GET /v1/appointments");
    expect(listRequests).toHaveLength(before + 2);
    expect(listRequests.at(-1)?.status).toBeUndefined();
    const mark = google.requestLog.length;

    // The listing's copy (confirmed) is older than that link: the run reads the appointment instead of putting the
    // cancelled appointment's event back (an insert, then a restore of the deleted event).
    const report = await run;
    expect(report.ok).toBe(true);
    expect(report.plan.filter((e) => e.appointmentId === victim)).toEqual([]);
    const eventId = eventIdFor(victim);
    const written = google.requestLog
      .slice(mark)
      .filter((r) => r.method !== "GET" && (r.path.endsWith("/events") || r.path.includes(eventId)));
    expect(written).toEqual([]);
    expect(await x.app.store.table<Link>("links").get(victim)).toMatchObject({
      present: false,
      booking: { status: "cancelled" },
    });
    await x.app.engine.idle();
    expect(liveOf(x, cal, victim)).toEqual([]);
  });

  it("acts on the later copy of an appointment the listing's drifting pages carried twice", async () => {
    h = await harness({ therapists: ["th_1"] });
    const x = h;
    const sim = x.world.booking;
    const cal = x.world.calendarOf("th_1");
    const now = Date.now();
    sim.seed({ therapists: ["th_1"], count: 300, from: now + DAY, to: now + 30 * DAY });
    await x.app.reconcile();
    await x.app.engine.idle();
    const page = async (n: number) => {
      const res = await fetch(`${sim.url}/v1/appointments?page=${n}&per_page=100`, {
        headers: { authorization: `Bearer ${sim.apiKey}` },
      });
      return ((await res.json()) as { data: { id: string; status: string }[] }).data;
    };
    // The last confirmed appointment of the first page, in the calendar.
    const victim = [...(await page(1))].reverse().find((a) => a.status === "confirmed")!.id;
    expect(liveOf(x, cal, victim)).toHaveLength(1);

    // Page 1 of the next run is read with the victim confirmed; before page 2 is answered it is cancelled and new
    // bookings (no webhooks here) push it onto page 2, where the same walk reads it again, cancelled.
    const lists = () => sim.requests.filter((r) => r.route === "GET /v1/appointments").length;
    const before = lists();
    sim.faults.latencyMs = 300;
    const run = x.app.reconcile();
    while (lists() < before + 2) await new Promise((r) => setTimeout(r, 5));
    sim.cancel(victim, "cancelled while the listing ran");
    for (let i = 0; i < 80; i++)
      sim.create({ therapist_id: "th_1", start_time: iso(now + DAY + (i + 1) * 3_600_000) }, { force: true });
    sim.faults.latencyMs = 0;
    const report = await run;
    expect((await page(2)).find((a) => a.id === victim)?.status).toBe("cancelled"); // it did come twice

    // The fresher copy wins: its event is removed, not kept as confirmed.
    expect(report.ok).toBe(true);
    expect(report.plan.filter((e) => e.appointmentId === victim).map((e) => e.kind)).toEqual(["delete"]);
    await x.app.engine.idle();
    expect(liveOf(x, cal, victim)).toEqual([]);
  });

  it("skips and counts appointments of unmapped therapists", async () => {
    h = await harness({ therapists: ["th_1", "th_2"], mapped: ["th_1"] });
    const now = Date.now();
    h.world.booking.create({ therapist_id: "th_1", start_time: iso(now + DAY) }, { force: true });
    h.world.booking.create({ therapist_id: "th_2", start_time: iso(now + DAY) }, { force: true });
    const report = await h.app.reconcile();
    expect(report.skippedUnmapped).toBe(1);
    expect(h.live("th_1")).toHaveLength(1);
    expect(h.world.google.events(h.world.calendarOf("th_2"))).toHaveLength(0);
  });
});

async function realSetGet(table: { get(k: string): Promise<unknown> }, key: string) {
  return table.get(key);
}

describe("failures of one appointment", () => {
  it("go to the dead letters with the error, are retried, and never stop the rest of the run", async () => {
    const clock = new ManualClock(Date.now());
    h = await harness({ therapists: 2, clock, engine: { maxAttempts: 3, baseMs: 5_000 } });
    const now = clock.now();
    const ok = h.world.booking.create({ therapist_id: "th_1", start_time: iso(now + DAY) }, { force: true });
    const bad = h.world.booking.create({ therapist_id: "th_2", start_time: iso(now + DAY) }, { force: true });
    // Every write to th_2's calendar is refused for a while.
    h.world.google.faults.next(1000, { status: 403, reason: "forbidden", match: /th_2%40clinic\.test\/events/ });
    const report = await h.app.reconcile();
    expect(report.failed).toBe(1);
    expect(h.live("th_1").map((e) => e.id)).toEqual([eventIdFor(String(ok.id))]);
    const deadTable = h.app.store.table<{ error: string; attempts: number; final: boolean }>("dead");
    expect(await deadTable.get(`appt:${bad.id}`)).toBeUndefined(); // one failure so far: retried, not given up
    // The engine's backoff (5 s, 10 s, ...) on the manual clock: two more attempts, then one dead letter.
    for (let i = 0; i < 12; i++) {
      await clock.advance(5_000);
      await h.app.engine.idle();
    }
    const dead = await deadTable.get(`appt:${bad.id}`);
    expect(dead).toMatchObject({ attempts: 3, final: true });
    expect(dead?.error).toMatch(/forbidden|403/i);
    expect(h.app.sync.dead.count).toBe(1);

    // The fault clears; the next run syncs it and clears the dead letter.
    h.world.google.faults.reset();
    const again = await h.app.reconcile();
    expect(again.failed).toBe(0);
    expect(h.live("th_2")).toHaveLength(1);
    expect(await h.app.store.table("dead").get(`appt:${bad.id}`)).toBeUndefined();
    expect(h.app.sync.dead.count).toBe(0);
  });
});
