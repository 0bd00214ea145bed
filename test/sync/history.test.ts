// Per-appointment history through the real daemon against the simulators, on the manual clock: an appointment moved
// by the booking, moved by the therapist (after the grace period), refused (past_booking) and cancelled from the
// calendar tells its whole story in `calbridge history`, as JSON, on the admin listener and linked from /status; other
// origins (the customer's cancellation, a reconciliation, an administrator) are named as such; no patient details.
import { afterEach, describe, expect, it } from "vitest";
import { eventIdFor } from "../../src/calendar/ids.ts";
import { ManualClock } from "../../src/clock.ts";
import type { ConfigInput } from "../../src/config/schema.ts";
import { WORLD_WEBHOOK_SECRET } from "../../src/simulator/world.ts";
import type { HistoryEntry } from "../../src/sync/history-entry.ts";
import { runCli, writeConfig } from "../cli/support.ts";
import { DAY, daemonHarness, type Harness, harness, iso } from "./support.ts";

let h: Harness | undefined;
afterEach(async () => {
  await h?.close();
  h = undefined;
});

const HOUR = 3_600_000;
const PATIENT = { name: "Zoe Secretpatient", email: "zoe.secret@example.org", phone: "+49 170 5550123" };
const NOTES = "knee pain, private note XYZZY";

async function daemon(clock: ManualClock, configure?: (c: ConfigInput) => void): Promise<Harness> {
  return daemonHarness({
    therapists: 2,
    clock,
    configure: (c) => {
      c.sync = { ...c.sync, writeback: { cancel_grace_seconds: 60, reschedule_grace_seconds: 30 } };
      configure?.(c);
    },
  });
}

/** Lets webhooks, calendar changes and syncs finish, moving the manual clock on by `ms` in steps. */
async function pass(x: Harness, clock: ManualClock, ms = 0, step = 5_000): Promise<void> {
  for (let t = 0; ; t += step) {
    for (let i = 0; i < 2; i++) {
      await x.world.booking.webhooksIdle();
      await x.app.processor.idle();
      for (const th of x.world.therapists) await x.app.poller.poll(th);
      await x.app.engine.idle();
    }
    if (t >= ms) return;
    await clock.advance(Math.min(step, ms - t));
  }
}

const at = (ms: number) => ({ dateTime: iso(ms) });

/** Start of the live event carrying the appointment's mark (whatever generation of its id), if any. */
function liveStart(x: Harness, cal: string, appointmentId: string): number | undefined {
  const live = x.world.google
    .events(cal)
    .find(
      (e) =>
        e.status !== "cancelled" &&
        (e.extendedProperties as { private?: Record<string, string> } | undefined)?.private
          ?.calbridge_appointment_id === appointmentId,
    );
  return live ? Date.parse(String((live.start as { dateTime: string }).dateTime)) : undefined;
}

/** What matters of each entry for the story (the rest is checked once). */
const story = (entries: HistoryEntry[]) =>
  entries.map((e) => [e.origin, e.kind, e.writeback ?? e.trigger, e.result ?? e.code ?? ""].join(" "));

function expectNoPatientDetails(text: string): void {
  for (const secret of [PATIENT.name, PATIENT.email, PATIENT.phone, NOTES, "Zoe", "XYZZY", "Massage"]) {
    expect(text).not.toContain(secret);
  }
}

describe("an appointment's history", () => {
  it("tells the whole story of an appointment moved by the booking, moved by the therapist, refused and cancelled", async () => {
    const clock = new ManualClock(Date.now());
    h = await daemon(clock);
    const start = Math.floor((clock.now() + 3 * DAY) / DAY) * DAY + 8 * HOUR; // within the simulator's working hours
    const appt = h.world.booking.create(
      { therapist_id: "th_1", start_time: iso(start), customer: PATIENT, notes: NOTES },
      { force: true },
    );
    const id = String(appt.id);
    const cal = h.world.calendarOf("th_1");
    const eventId = eventIdFor(id);
    await pass(h, clock);
    expect(h.world.google.event(cal, eventId)?.status).toBe("confirmed");

    // The booking moves it: appointment.updated, the event follows.
    h.world.booking.move(id, iso(start + 2 * HOUR), { force: true });
    await pass(h, clock);
    // The therapist drags it two hours later: written back once the 30 s grace period is over.
    h.world.google.userEdit(cal, eventId, { start: at(start + 4 * HOUR), end: at(start + 5 * HOUR) });
    await pass(h, clock, 40_000);
    expect(Date.parse(String(h.world.booking.get(id)!.start_time))).toBe(start + 4 * HOUR);
    // ... then into the past: the booking service refuses (past_booking) and the event is put back.
    h.world.google.userEdit(cal, eventId, { start: at(clock.now() - DAY), end: at(clock.now() - DAY + HOUR) });
    await pass(h, clock, 40_000);
    expect(Date.parse(String(h.world.booking.get(id)!.start_time))).toBe(start + 4 * HOUR);
    // ... and deletes it: cancelled once the 60 s grace period is over (a reconciliation meanwhile finds the same
    // deletion: it joins the waiting write-back, whose wait is told once).
    h.world.google.userDelete(cal, eventId);
    await pass(h, clock, 20_000);
    await h.app.reconcile();
    await pass(h, clock, 50_000);
    expect(h.world.booking.get(id)!.status).toBe("cancelled");
    await h.app.sync.history.log.flush();

    const { entries } = await h.app.sync.history.log.read(id);
    expect(story(entries)).toEqual([
      "booking event_created appointment.created ",
      // The description shows the notes, which only the full form has: read with leftover budget, then shown.
      "reconcile event_updated enrichment ",
      "booking event_updated appointment.updated ",
      "calendar writeback_waiting reschedule ",
      "calendar writeback reschedule ok",
      "calendar writeback_waiting reschedule ",
      "calendar writeback reschedule refused",
      "calendar writeback_waiting cancel ",
      "calendar writeback cancel ok",
    ]);
    expect(entries[0]).toMatchObject({ therapistId: "th_1", eventId, start: iso(start), end: iso(start + HOUR) });
    expect(entries[1]).toMatchObject({ start: iso(start), end: iso(start + HOUR) });
    expect(entries[2]).toMatchObject({ start: iso(start + 2 * HOUR), reason: "booking changed" });
    expect(entries[3]).toMatchObject({ waitSeconds: 30, start: iso(start + 4 * HOUR) });
    expect(entries[4]).toMatchObject({ start: iso(start + 4 * HOUR), status: "confirmed" });
    expect(entries[6]).toMatchObject({ side: "booking", code: "past_booking", httpStatus: 422 });
    expect(entries[7]).toMatchObject({ waitSeconds: 60, reason: "event deleted in the calendar" });
    expect(entries[8]).toMatchObject({ status: "cancelled" });
    for (const [i, e] of entries.entries()) {
      if (i > 0) expect(Date.parse(e.at)).toBeGreaterThanOrEqual(Date.parse(entries[i - 1]!.at));
    }

    // The command line: a readable timeline, and JSON for machines.
    const file = writeConfig(h.world);
    const text = await runCli("history", id, "--config", file);
    expect(text.code).toBe(0);
    const lines = text.stdout.trimEnd().split("\n");
    expect(lines[0]).toBe(`History of appointment ${id}: 9 entries, oldest first (times UTC; kept 90 days)`);
    expect(lines.slice(1)).toEqual([
      expect.stringMatching(/booking webhook \(appointment\.created\)\s+event created in th_1's calendar, /),
      expect.stringMatching(/reconciliation \(enrichment\)\s+event updated in th_1's calendar, /),
      expect.stringMatching(
        /booking webhook \(appointment\.updated\)\s+event updated in th_1's calendar, .* \(booking changed\)$/,
      ),
      expect.stringMatching(
        /therapist's calendar\s+the reschedule to .* waits out a 30 s grace period before it is sent/,
      ),
      expect.stringMatching(/therapist's calendar\s+appointment rescheduled in the booking service to /),
      expect.stringMatching(/therapist's calendar\s+the reschedule to .* waits out a 30 s grace period/),
      expect.stringMatching(
        /therapist's calendar\s+reschedule to .* refused by the booking service \(booking 422 past_booking\); the event is put back as booked \(event moved in the calendar\)$/,
      ),
      expect.stringMatching(
        /therapist's calendar\s+the deletion's write-back \(a cancellation, unless the event turns up in another calendar\) waits out a 60 s grace period/,
      ),
      expect.stringMatching(
        /therapist's calendar\s+appointment cancelled in the booking service \(event deleted in the calendar\)$/,
      ),
    ]);
    const json = await runCli("history", id, "--json", "--config", file);
    expect(json.code).toBe(0);
    expect(JSON.parse(json.stdout)).toEqual({ appointmentId: id, retentionDays: 90, entries });
    expectNoPatientDetails(text.stdout + json.stdout);

    // An id without a history: exit 1, and a line saying why there may be none.
    const unknown = await runCli("history", "apt_nope", "--config", file);
    expect(unknown.code).toBe(1);
    expect(unknown.stderr).toMatch(/^No history of appointment apt_nope: .* 90 days/);

    // The admin listener: /status links it, and the link shows the history (JSON, and a page for people).
    const admin = h.app.admin!.url;
    const status = (await (await fetch(`${admin}/status`)).json()) as {
      history: { retentionDays: number; recent: { appointmentId: string; href: string; kind: string }[] };
    };
    expect(status.history.recent[0]).toMatchObject({
      appointmentId: id,
      kind: "writeback",
      origin: "calendar",
      href: `/history/${id}`,
    });
    const statusPage = await (await fetch(`${admin}/status.html`)).text();
    expect(statusPage).toContain(`<a href="/history/${id}">${id}</a>`);
    const page = await fetch(`${admin}/history/${id}`, { headers: { accept: "text/html" } });
    expect(page.status).toBe(200);
    expect(page.headers.get("content-security-policy")).toBe("default-src 'none'; style-src 'unsafe-inline'");
    const html = await page.text();
    expect(html).toContain("therapist&#39;s calendar");
    expect(html).toContain("refused by the booking service (booking 422 past_booking)");
    expect((html.match(/<tr>/g) ?? []).length).toBe(10);
    const api = await fetch(`${admin}/history/${id}`);
    expect(((await api.json()) as { entries: unknown[] }).entries).toEqual(entries);
    expectNoPatientDetails(html + statusPage + JSON.stringify(status));
  });

  it("names the customer's cancellation, a reconciliation and an administrator's decision as such", async () => {
    const clock = new ManualClock(Date.now());
    h = await daemon(clock, (c) => {
      c.sync = { ...c.sync, writeback: { cancel_grace_seconds: 0 }, writeback_guard: { max_ratio: 0, floor: 0 } };
    });
    const cal = h.world.calendarOf("th_1");
    const start = clock.now() + 2 * DAY;
    // The customer cancels in the booking service.
    const a = String(h.world.booking.create({ therapist_id: "th_1", start_time: iso(start) }, { force: true }).id);
    await pass(h, clock);
    h.world.booking.cancel(a, "customer ill");
    await pass(h, clock);
    // Booked while webhooks do not arrive: the reconciliation finds it.
    const [endpoint] = h.world.booking.webhookEndpoints();
    h.world.booking.setWebhookEndpointEnabled(endpoint!.id, false);
    const b = String(
      h.world.booking.create({ therapist_id: "th_1", start_time: iso(start + DAY) }, { force: true }).id,
    );
    await h.app.reconcile();
    await pass(h, clock);
    // The therapist deletes it; the guard holds the cancellation, and an administrator has the event put back.
    h.world.google.userDelete(cal, eventIdFor(b));
    await pass(h, clock);
    expect(await h.app.sync.guard.isHeld(b)).toBe(true);
    await h.app.engine.settle(b, {
      reason: "writeback held --restore",
      priority: "writeback",
      override: "restore",
      calendar: { reread: true },
    });
    await h.app.sync.history.log.flush();

    expect(story((await h.app.sync.history.log.read(a)).entries)).toEqual([
      "booking event_created appointment.created ",
      "booking event_deleted appointment.cancelled deleted",
    ]);
    expect((await h.app.sync.history.log.read(a)).entries[1]).toMatchObject({
      status: "cancelled",
      reason: "cancelled",
    });
    expect(story((await h.app.sync.history.log.read(b)).entries)).toEqual([
      "reconcile event_created reconcile ",
      "calendar writeback_held cancel ",
      "admin event_restored writeback held --restore ",
    ]);
    const text = await runCli("history", b, "--config", writeConfig(h.world));
    expect(text.stdout).toMatch(/reconciliation\s+event created in th_1's calendar/);
    expect(text.stdout).toMatch(
      /the deletion's write-back \(a cancellation, unless the event turns up in another calendar\) is held by the write-back guard for an administrator to decide/,
    );
    expect(text.stdout).toMatch(
      /administrator \(writeback held --restore\)\s+event put back in th_1's calendar as booked/,
    );
  });

  it("a reconciliation records one entry per appointment it changes, and a warm one records nothing", async () => {
    const clock = new ManualClock(Date.now());
    h = await harness({ therapists: 2, clock });
    const ids = h.world.booking.seed({
      therapists: h.world.therapists,
      count: 30,
      from: clock.now() + DAY,
      to: clock.now() + 20 * DAY,
    });
    await h.app.reconcile();
    await h.app.engine.idle();
    await h.app.sync.history.log.flush();
    const all = async () => {
      const rows: [string, unknown][] = [];
      for await (const row of h!.app.store.table("history").entries()) rows.push(row);
      return rows.sort(([a], [b]) => a.localeCompare(b));
    };
    const cold = await all();
    const live = ids.filter((id) => h!.world.booking.get(id)?.status !== "cancelled");
    expect(cold.map(([id]) => id)).toEqual([...live].sort());
    for (const [, value] of cold) {
      expect(story((value as { entries: HistoryEntry[] }).entries)).toEqual(["reconcile event_created reconcile "]);
    }
    await clock.advance(60_000);
    await h.app.reconcile();
    await h.app.engine.idle();
    await h.app.sync.history.log.flush();
    expect(await all()).toEqual(cold);
  });

  it("a sync that keeps failing is told once when it starts failing, and once when it is given up on", async () => {
    const clock = new ManualClock(Date.now());
    h = await harness({ therapists: 2, clock, engine: { maxAttempts: 3, baseMs: 5_000 } });
    await h.app.start();
    h.world.booking.addWebhookEndpoint({
      url: `${h.app.http!.url}${h.world.config.webhooks.path}`,
      secret: WORLD_WEBHOOK_SECRET,
      events: ["*"],
    });
    // Google refuses every insert into th_1's calendar (403 forbidden: an answer, not an outage).
    h.world.google.faults.next(1000, {
      status: 403,
      reason: "forbidden",
      match: /POST .*th_1%40clinic\.test\/events$/,
    });
    const id = String(
      h.world.booking.create({ therapist_id: "th_1", start_time: iso(clock.now() + 3 * DAY) }, { force: true }).id,
    );
    // Not `pass`: the webhook's inbox entry stays until the engine gives up, so the processor is not idle meanwhile.
    for (let t = 0; t < 5 * 60_000; t += 5_000) {
      await clock.advance(5_000);
      await h.world.booking.webhooksIdle();
      await h.app.engine.idle();
    }
    await h.app.sync.history.log.flush();
    const { entries } = await h.app.sync.history.log.read(id);
    expect(story(entries)).toEqual([
      "booking sync_failed appointment.created forbidden",
      "booking dead_letter retry of appointment.created forbidden",
    ]);
    expect(entries[0]).toMatchObject({ side: "google", httpStatus: 403, attempts: 1 });
    expect(entries[1]).toMatchObject({ attempts: 3 });
    const text = await runCli("history", id, "--config", writeConfig(h.world));
    expect(text.stdout).toMatch(
      /booking webhook \(retry of appointment\.created\)\s+gave up after 3 attempts \(google 403 forbidden\): dead letter/,
    );
  });

  it("a copy left behind by a reassignment, removed by the reconciliation itself, is told too", async () => {
    const clock = new ManualClock(Date.now());
    h = await daemon(clock);
    const start = Math.floor((clock.now() + 3 * DAY) / DAY) * DAY + 8 * HOUR;
    const id = String(h.world.booking.create({ therapist_id: "th_1", start_time: iso(start) }, { force: true }).id);
    await pass(h, clock);
    // Reassigned to th_2: the event is written there, but removing it from th_1's calendar fails once.
    h.world.google.faults.next(1, {
      status: 403,
      reason: "forbidden",
      match: /DELETE .*th_1%40clinic\.test\/events\//,
    });
    h.world.booking.reassign(id, "th_2", { force: true });
    await pass(h, clock);
    expect(h.world.google.event(h.world.calendarOf("th_1"), eventIdFor(id))?.status).toBe("confirmed");
    await h.app.reconcile();
    await pass(h, clock);
    expect(h.world.google.event(h.world.calendarOf("th_1"), eventIdFor(id))?.status).toBe("cancelled");
    await h.app.sync.history.log.flush();
    const { entries } = await h.app.sync.history.log.read(id);
    expect(story(entries)).toEqual([
      "booking event_created appointment.created ",
      "booking event_moved appointment.updated ",
      "reconcile event_deleted reconcile deleted",
    ]);
    expect(entries[1]).toMatchObject({ therapistId: "th_1", toTherapistId: "th_2" });
    expect(entries[2]).toMatchObject({ therapistId: "th_1", reason: "copy left behind in another calendar" });
  });

  it("a refusal is told even when putting the event back fails at first (Google away for a moment)", async () => {
    const clock = new ManualClock(Date.now());
    h = await daemon(clock, (c) => {
      c.sync = { ...c.sync, writeback: { reschedule_grace_seconds: 0 } };
    });
    const start = Math.floor((clock.now() + 3 * DAY) / DAY) * DAY + 8 * HOUR;
    const id = String(h.world.booking.create({ therapist_id: "th_1", start_time: iso(start) }, { force: true }).id);
    const cal = h.world.calendarOf("th_1");
    await pass(h, clock);
    // Every write to the event fails for a while: the refusal's restore fails, and is retried by the engine.
    h.world.google.faults.next(8, {
      status: 500,
      reason: "backendError",
      match: new RegExp(`(PUT|PATCH|POST) .*th_1%40clinic\\.test/events/${eventIdFor(id)}`),
    });
    h.world.google.userEdit(cal, eventIdFor(id), { start: at(clock.now() - DAY), end: at(clock.now() - DAY + HOUR) });
    // Not `pass`: the calendar client's own retries wait on the manual clock too.
    const polled = h.app.poller.poll("th_1");
    const back = () => liveStart(h!, cal, id) === start;
    const end = Date.now() + 20_000; // real time, not 300 steps (the clock runs on while HTTP is in flight)
    while (!back() && Date.now() < end) {
      await clock.advance(1_000);
      await new Promise((r) => setTimeout(r, 5));
    }
    await polled;
    await h.app.engine.idle();
    expect(back()).toBe(true);
    expect(h.world.booking.requests.filter((r) => r.method === "PATCH")).toHaveLength(1);
    await h.app.sync.history.log.flush();
    const { entries } = await h.app.sync.history.log.read(id);
    expect(story(entries).slice(1)).toEqual([
      "calendar writeback reschedule refused",
      "calendar sync_failed calendar change backendError",
      "calendar event_created retry of calendar change ",
    ]);
    expect(entries[1]).toMatchObject({ code: "past_booking" });
    expect(entries.at(-1)).toMatchObject({ start: iso(start) });
  });
});
