// Therapists in a strict Google Calendar, through the real daemon on the manual clock (issue #14): a bulk deletion is
// held, not cancelled; Undo within the grace period sends nothing; what a therapist adds to an event survives; an
// event Google will not restore comes back under the next id with the refused cancel sent once; a series made of an
// event trips no guard and becomes a single event again; an event moved to a mapped calendar calbridge cannot look at
// is never taken for a deletion.
import { afterEach, describe, expect, it } from "vitest";
import { eventIdFor } from "../../src/calendar/ids.ts";
import { runDoctor } from "../../src/cli/doctor.ts";
import { sentenceOf } from "../../src/cli/history-output.ts";
import { writebackHeld } from "../../src/cli/writeback-held.ts";
import { ManualClock } from "../../src/clock.ts";
import type { ConfigInput } from "../../src/config/schema.ts";
import type { Link } from "../../src/sync/types.ts";
import { captureLog } from "../support/log-capture.ts";
import { cancels, DAY, daemonHarness, type Harness, iso, liveOf, pass, patches, pollAll, quiet } from "./support.ts";

let h: Harness | undefined;
afterEach(async () => {
  await h?.close();
  h = undefined;
});

const HOUR = 3_600_000;

/** A daemon on the manual clock that receives the simulator's webhooks; calendar polls are the test's to make. */
async function daemon(clock: ManualClock, configure?: (c: ConfigInput) => void, log = captureLog()) {
  const x = await daemonHarness({ therapists: 2, clock, logger: log.logger, ...(configure ? { configure } : {}) });
  return { x, log };
}

/** `n` confirmed appointments of th_1 mirrored into its calendar (a reconciliation counts them for the guard). */
async function mirrored(x: Harness, clock: ManualClock, n: number, therapist = "th_1") {
  const ids: string[] = [];
  for (let i = 0; i < n; i++) {
    const start = new Date(clock.now() + (i + 2) * DAY);
    start.setUTCHours(9 + (i % 8), 0, 0, 0);
    ids.push(
      String(x.world.booking.create({ therapist_id: therapist, start_time: start.toISOString() }, { force: true }).id),
    );
  }
  await quiet(x);
  await x.app.reconcile();
  await pollAll(x); // the sync tokens
  return ids;
}

/**
 * One appointment of th_1, mirrored; the therapist deletes its event and the booking service refuses the cancellation
 * (past_booking) for good, so after the grace period the event is put back under the next generation of its id.
 */
async function deletedAndRefused(clock: ManualClock) {
  const { x } = await daemon(clock);
  h = x;
  const [id] = await mirrored(x, clock, 1);
  const cal = x.world.calendarOf("th_1");
  x.world.booking.faults.refuseNext(1000, "past_booking", { match: { path: `/v1/appointments/${id}/cancel` } });
  x.world.google.userDelete(cal, eventIdFor(id!));
  await pollAll(x);
  await pass(x, clock, 90_000);
  return { x, id: id!, cal };
}

describe("a bulk deletion (issue #14, case 1)", () => {
  it("is held, not cancelled: visible in /status, the metric, the log and doctor, until a person restores it", async () => {
    const clock = new ManualClock(Date.now());
    const { x, log } = await daemon(clock);
    h = x;
    const ids = await mirrored(x, clock, 10);
    const cal = x.world.calendarOf("th_1");
    for (const id of ids) x.world.google.userDelete(cal, eventIdFor(id)); // a phone app wipes the calendar
    await pollAll(x);
    await pass(x, clock, 90_000); // past the grace period
    await pollAll(x);
    await x.app.reconcile();
    await quiet(x);

    expect(cancels(x)).toBe(0);
    for (const id of ids) expect(x.world.booking.get(id)!.status).toBe("confirmed");
    const held = await x.app.sync.guard.held("th_1");
    expect(held.map((w) => w.appointmentId).sort()).toEqual([...ids].sort());
    expect((await x.app.status()).therapists.find((t) => t.therapistId === "th_1")?.writebacksHeld).toBe(10);
    expect(await x.app.registry.getSingleMetricAsString("calbridge_writebacks_held")).toContain(
      'calbridge_writebacks_held{therapist="th_1"} 10',
    );
    expect(log.lines.filter((l) => String(l["msg"]).startsWith("write-back guard:"))).toHaveLength(1);
    const doctor = await runDoctor(x.app);
    expect(doctor.find((c) => c.name === "write-backs")).toMatchObject({ status: "fail" });

    // A person decides: put the events back. Google will not restore the ids a person deleted: the next generation.
    const restored = await writebackHeld(x.app, { therapistId: "th_1", decision: "restore" });
    expect(restored.decided.every((d) => d.ok)).toBe(true);
    await quiet(x);
    for (const id of ids) expect(liveOf(x, cal, id).map((e) => e.id)).toEqual([eventIdFor(id, 1)]);
    expect(await x.app.sync.guard.held()).toEqual([]);
    expect(cancels(x)).toBe(0);
    // Quiet afterwards: a poll and a reconciliation write nothing anywhere and send nothing.
    const writes = x.writes();
    await pollAll(x);
    await pass(x, clock, 90_000);
    expect((await x.app.reconcile()).plan).toEqual([]);
    expect(x.writes()).toBe(writes);
    expect(cancels(x)).toBe(0);
  });

  it("sends the held cancellations when a person applies them, and joins new deletions to an open hold", async () => {
    const clock = new ManualClock(Date.now());
    const { x } = await daemon(clock);
    h = x;
    const ids = await mirrored(x, clock, 8);
    const cal = x.world.calendarOf("th_1");
    for (const id of ids.slice(0, 6)) x.world.google.userDelete(cal, eventIdFor(id));
    await pollAll(x);
    await pass(x, clock, 90_000);
    expect((await x.app.sync.guard.held("th_1")).length).toBe(6);
    // One more deletion while the hold is open: held too, however few it would be on its own.
    x.world.google.userDelete(cal, eventIdFor(ids[6]!));
    await pollAll(x);
    await pass(x, clock, 90_000);
    expect((await x.app.sync.guard.held("th_1")).length).toBe(7);
    expect(cancels(x)).toBe(0);

    const applied = await writebackHeld(x.app, { therapistId: "th_1", decision: "apply" });
    expect(applied.decided.map((d) => d.did)).toEqual(Array(7).fill("cancelled in the booking service"));
    expect(cancels(x)).toBe(7);
    for (const id of ids.slice(0, 7)) expect(x.world.booking.get(id)!.status).toBe("cancelled");
    expect(x.world.booking.get(ids[7]!)!.status).toBe("confirmed");
    expect(await x.app.sync.guard.held()).toEqual([]);
  });

  it("applying held moves sends only what was held: one deleted since is held again as a cancellation", async () => {
    const clock = new ManualClock(Date.now());
    const { x } = await daemon(clock);
    h = x;
    const ids = await mirrored(x, clock, 10);
    const cal = x.world.calendarOf("th_1");
    // A phone app shifts every event by an hour: ten moves, held.
    for (const id of ids) {
      const ev = x.world.google.event(cal, eventIdFor(id))!;
      const s = Date.parse(String((ev.start as { dateTime: string }).dateTime));
      x.world.google.userEdit(cal, eventIdFor(id), {
        start: { dateTime: iso(s + HOUR) },
        end: { dateTime: iso(s + 2 * HOUR) },
      });
    }
    await pollAll(x);
    await pass(x, clock, 60_000);
    const held = await x.app.sync.guard.held("th_1");
    expect(held.map((w) => w.kind)).toEqual(Array(10).fill("reschedule"));
    // Then it deletes one of them: it joins the open hold, which still shows the move a person is deciding about.
    x.world.google.userDelete(cal, eventIdFor(ids[0]!));
    await pollAll(x);
    await pass(x, clock, 90_000);
    expect(cancels(x)).toBe(0);

    // The person applies the ten moves: nine are sent, the deleted one is not sent as a cancellation.
    const applied = await writebackHeld(x.app, { therapistId: "th_1", decision: "apply" });
    expect(patches(x)).toBe(9);
    expect(cancels(x)).toBe(0);
    expect(x.world.booking.get(ids[0]!)!.status).toBe("confirmed");
    const first = applied.decided.find((d) => d.appointmentId === ids[0]);
    expect(first).toMatchObject({ ok: false });
    expect(first?.did).toMatch(/not sent.*cancellation/);
    expect(applied.decided.filter((d) => d.ok).map((d) => d.did)).toEqual(
      Array(9).fill("rescheduled in the booking service"),
    );
    // It is held as what it is now, for a new decision: listed, and sent only when that is applied.
    expect(await x.app.sync.guard.held("th_1")).toMatchObject([{ appointmentId: ids[0], kind: "cancel" }]);
    await pass(x, clock, 90_000);
    expect(cancels(x)).toBe(0);
    const again = await writebackHeld(x.app, { therapistId: "th_1", decision: "apply" });
    expect(again.decided).toEqual([{ appointmentId: ids[0], ok: true, did: "cancelled in the booking service" }]);
    expect(cancels(x)).toBe(1);
    expect(x.world.booking.get(ids[0]!)!.status).toBe("cancelled");
    expect(await x.app.sync.guard.held()).toEqual([]);
  });

  it("a few deletions under the floor are written back after the grace period", async () => {
    const clock = new ManualClock(Date.now());
    const { x } = await daemon(clock);
    h = x;
    const ids = await mirrored(x, clock, 10);
    const cal = x.world.calendarOf("th_1");
    for (const id of ids.slice(0, 2)) x.world.google.userDelete(cal, eventIdFor(id));
    await pollAll(x);
    await pass(x, clock, 30_000);
    expect(cancels(x)).toBe(0); // still in the grace period
    await pass(x, clock, 60_000);
    expect(cancels(x)).toBe(2);
    expect(await x.app.sync.guard.held()).toEqual([]);
  });
});

describe("the grace period (issue #14, case 2)", () => {
  it("Undo within the grace period sends nothing; nor does a move moved back", async () => {
    const clock = new ManualClock(Date.now());
    const { x } = await daemon(clock);
    h = x;
    const [a, b] = await mirrored(x, clock, 2);
    const cal = x.world.calendarOf("th_1");
    x.world.google.userDelete(cal, eventIdFor(a!));
    const ev = x.world.google.event(cal, eventIdFor(b!))!;
    const start = Date.parse(String((ev.start as { dateTime: string }).dateTime));
    const at = (ms: number) => ({ start: { dateTime: iso(ms) }, end: { dateTime: iso(ms + HOUR) } });
    x.world.google.userEdit(cal, eventIdFor(b!), at(start + 2 * HOUR));
    await pollAll(x);
    await pass(x, clock, 10_000);
    // Six seconds later the therapist presses Undo, and drags the other event back.
    x.world.google.userUndoDelete(cal, eventIdFor(a!));
    x.world.google.userEdit(cal, eventIdFor(b!), at(start));
    await pollAll(x);
    await pass(x, clock, 120_000);
    await pollAll(x);
    expect(cancels(x)).toBe(0);
    expect(patches(x)).toBe(0);
    expect(x.world.booking.get(a!)!.status).toBe("confirmed");
    expect(x.world.google.event(cal, eventIdFor(a!))?.status).toBe("confirmed");
    expect((await x.app.reconcile()).plan).toEqual([]);
  });

  it("a deletion after an Undo stands a grace period of its own: delete, Undo, delete again", async () => {
    const clock = new ManualClock(Date.now());
    const { x } = await daemon(clock);
    h = x;
    const [a] = await mirrored(x, clock, 3);
    const cal = x.world.calendarOf("th_1");
    x.world.google.userDelete(cal, eventIdFor(a!)); // T0
    await pollAll(x);
    await pass(x, clock, 5_000, 1_000);
    // T0+5: Undo. The event is calbridge's own again, so nothing is queued: the deletion's retry is still pending.
    x.world.google.userUndoDelete(cal, eventIdFor(a!));
    await pollAll(x);
    await pass(x, clock, 50_000, 1_000);
    x.world.google.userDelete(cal, eventIdFor(a!)); // T0+55: deleted again, a deletion that must stand 60 s itself
    await pollAll(x);
    await pass(x, clock, 10_000, 1_000); // T0+65: past the first deletion's period, the second has stood 10 s
    expect(cancels(x)).toBe(0);
    expect(x.world.booking.get(a!)!.status).toBe("confirmed");
    await pass(x, clock, 60_000, 1_000);
    expect(cancels(x)).toBe(1);
    expect(x.world.booking.get(a!)!.status).toBe("cancelled");
  });

  it("a move, then a deletion: the cancellation waits its own 60 s, not what was left of the move's 30 s", async () => {
    const clock = new ManualClock(Date.now());
    const { x } = await daemon(clock);
    h = x;
    const [a] = await mirrored(x, clock, 3);
    const cal = x.world.calendarOf("th_1");
    const ev = x.world.google.event(cal, eventIdFor(a!))!;
    const start = Date.parse(String((ev.start as { dateTime: string }).dateTime));
    x.world.google.userEdit(cal, eventIdFor(a!), {
      start: { dateTime: iso(start + 2 * HOUR) },
      end: { dateTime: iso(start + 3 * HOUR) },
    }); // T0: moved (a 30 s grace period)
    await pollAll(x);
    await pass(x, clock, 20_000, 1_000);
    expect(patches(x)).toBe(0);
    x.world.google.userDelete(cal, eventIdFor(a!)); // T0+20: deleted
    await pollAll(x);
    await pass(x, clock, 45_000, 1_000); // T0+65: the deletion has stood 45 s
    expect(cancels(x)).toBe(0);
    expect(patches(x)).toBe(0);
    await pass(x, clock, 30_000, 1_000);
    expect(cancels(x)).toBe(1);
    expect(patches(x)).toBe(0);
    // The history tells both waits: the move's, and the cancellation's that replaced it.
    await x.app.sync.history.log.flush();
    const { entries } = await x.app.sync.history.log.read(a!);
    const waits = entries.filter((e) => e.kind === "writeback_waiting").map((e) => [e.writeback, e.waitSeconds]);
    expect(waits).toEqual([
      ["reschedule", 30],
      ["cancel", 60],
    ]);
  });
});

describe("what a therapist adds to an event (issue #14, case 3)", () => {
  it("keeps location, reminders and guests across the booking's moves", async () => {
    const clock = new ManualClock(Date.now());
    const { x } = await daemon(clock);
    h = x;
    const [id] = await mirrored(x, clock, 1);
    const cal = x.world.calendarOf("th_1");
    const eventId = eventIdFor(id!);
    x.world.google.userEdit(cal, eventId, {
      location: "Room 3, Praxis am Park",
      reminders: { useDefault: false, overrides: [{ method: "popup", minutes: 15 }] },
      attendees: [{ email: "colleague@clinic.test" }],
    });
    await pollAll(x);
    const moved = new Date(clock.now() + 9 * DAY);
    moved.setUTCHours(14, 0, 0, 0);
    x.world.booking.move(id!, moved.toISOString(), { force: true });
    await quiet(x);
    const ev = x.world.google.event(cal, eventId)!;
    expect(Date.parse(String((ev.start as { dateTime: string }).dateTime))).toBe(moved.getTime());
    expect(ev.location).toBe("Room 3, Praxis am Park");
    expect(ev.reminders).toEqual({ useDefault: false, overrides: [{ method: "popup", minutes: 15 }] });
    expect((ev.attendees as { email: string }[]).map((g) => g.email)).toEqual(["colleague@clinic.test"]);
    // And a reconciliation leaves them alone too.
    await x.app.reconcile();
    expect(x.world.google.event(cal, eventId)?.location).toBe("Room 3, Praxis am Park");
  });
});

describe("an event Google will not restore (issue #14, case 4)", () => {
  it("comes back under the next generation of its id, and the refused cancel is sent once", async () => {
    const clock = new ManualClock(Date.now());
    const { x, id, cal } = await deletedAndRefused(clock);
    for (let i = 0; i < 3; i++) {
      await pollAll(x);
      await x.app.reconcile();
      await pass(x, clock, 60_000);
    }
    expect(cancels(x)).toBe(1);
    expect(x.world.booking.get(id!)!.status).toBe("confirmed");
    const live = liveOf(x, cal, id!);
    expect(live.map((e) => e.id)).toEqual([eventIdFor(id!, 1)]);
    expect(String(live[0]!.description)).toMatch(/your deletion of this appointment was not applied.*past_booking/);
    const link = (await x.app.sync.links.get(id!)) as Link;
    expect(link).toMatchObject({ eventId: eventIdFor(id!, 1), generation: 1, present: true });
    const writes = x.writes();
    await pollAll(x);
    expect((await x.app.reconcile()).plan).toEqual([]);
    expect(x.writes()).toBe(writes);
  });
});

describe("events brought back from the Bin", () => {
  const startOf = (ev: Record<string, unknown>) => String((ev["start"] as { dateTime: string }).dateTime);

  it("the one Google would not restore, beside its next generation: removed by the reconciliation, nothing sent", async () => {
    const clock = new ManualClock(Date.now());
    const { x, id, cal } = await deletedAndRefused(clock);
    await pollAll(x);
    expect(liveOf(x, cal, id!).map((e) => e.id)).toEqual([eventIdFor(id!, 1)]);

    // Two minutes on, the therapist restores the original from the Bin: two live events show one appointment.
    await pass(x, clock, 120_000);
    x.world.google.userRestoreFromBin(cal, eventIdFor(id!));
    await pollAll(x);
    await pass(x, clock, 120_000);
    const report = await x.app.reconcile();
    expect(report.plan).toEqual([
      expect.objectContaining({
        kind: "delete",
        eventId: eventIdFor(id!),
        reason: expect.stringMatching(/earlier generation/),
      }),
    ]);
    await pollAll(x);
    await pass(x, clock, 60_000);
    expect(liveOf(x, cal, id!).map((e) => e.id)).toEqual([eventIdFor(id!, 1)]);
    expect(cancels(x)).toBe(1);
    expect(x.world.booking.get(id!)!.status).toBe("confirmed");
    expect((await x.app.reconcile()).plan).toEqual([]);
  });

  it("the one Google would not restore, after the next generation was edited and adopted: still removed", async () => {
    const clock = new ManualClock(Date.now());
    const { x, id, cal } = await deletedAndRefused(clock);
    await pollAll(x);
    // The therapist adds a room to the event calbridge put back: nothing calbridge owns, so the link adopts it.
    x.world.google.userEdit(cal, eventIdFor(id, 1), { location: "Room 2" });
    await pollAll(x);
    await x.app.reconcile();
    await quiet(x);
    expect(await x.app.sync.links.get(id)).toMatchObject({ eventId: eventIdFor(id, 1), generation: 1 });

    x.world.google.userRestoreFromBin(cal, eventIdFor(id));
    await pollAll(x);
    await pass(x, clock, 120_000);
    const report = await x.app.reconcile();
    expect(report.plan).toEqual([
      expect.objectContaining({ kind: "delete", eventId: eventIdFor(id), reason: expect.stringMatching(/earlier/) }),
    ]);
    await quiet(x);
    expect(liveOf(x, cal, id).map((e) => e.id)).toEqual([eventIdFor(id, 1)]);
    expect(liveOf(x, cal, id)[0]).toMatchObject({ location: "Room 2" });
    expect(x.world.booking.get(id)!.status).toBe("confirmed");
  });

  it("the one Google would not restore, at the booking's time before it moved: removed, the new time stays", async () => {
    const clock = new ManualClock(Date.now());
    const { x } = await daemon(clock);
    h = x;
    const [id] = await mirrored(x, clock, 1);
    const cal = x.world.calendarOf("th_1");
    const old = startOf(x.world.google.event(cal, eventIdFor(id!))!);
    x.world.google.userDelete(cal, eventIdFor(id!));
    await pollAll(x);
    await pass(x, clock, 10_000);
    // The customer moves the appointment meanwhile: the booking wins, and the event is put back at the new time.
    const moved = iso(Date.parse(old) + 2 * DAY);
    x.world.booking.move(id!, moved, { force: true });
    await pass(x, clock, 90_000);
    await pollAll(x);
    expect(liveOf(x, cal, id!).map((e) => [e.id, Date.parse(startOf(e))])).toEqual([
      [eventIdFor(id!, 1), Date.parse(moved)],
    ]);

    x.world.google.userRestoreFromBin(cal, eventIdFor(id!));
    await pollAll(x);
    await x.app.reconcile();
    await pollAll(x);
    await pass(x, clock, 60_000);
    expect(cancels(x) + patches(x)).toBe(0);
    expect(liveOf(x, cal, id!).map((e) => [e.id, Date.parse(startOf(e))])).toEqual([
      [eventIdFor(id!, 1), Date.parse(moved)],
    ]);
  });
  it("after its deletion cancelled the appointment: shown as cancelled (kept events), never as a booking", async () => {
    const clock = new ManualClock(Date.now());
    const { x } = await daemon(clock, (c) => {
      c.sync = { ...c.sync, cancelled_events: "keep" };
    });
    h = x;
    const [id] = await mirrored(x, clock, 1);
    const cal = x.world.calendarOf("th_1");
    const ev = eventIdFor(id!);
    x.world.google.userDelete(cal, ev);
    await pollAll(x);
    await pass(x, clock, 70_000);
    expect(x.world.booking.get(id!)!.status).toBe("cancelled");

    // Five minutes later (too late for the grace period) the therapist restores it from the Bin.
    await pass(x, clock, 300_000);
    x.world.google.userRestoreFromBin(cal, ev);
    await pollAll(x);
    await pass(x, clock, 60_000);
    const shown = x.world.google.event(cal, ev)!;
    expect(shown).toMatchObject({ status: "confirmed", summary: expect.stringMatching(/^Cancelled: /) });
    expect(shown["transparency"]).toBe("transparent");
    expect(cancels(x)).toBe(1);
    expect(x.world.booking.get(id!)!.status).toBe("cancelled");
    await pollAll(x);
    expect((await x.app.reconcile()).plan).toEqual([]);
  });
});

describe("a series made of an event (issue #14, case 5)", () => {
  it("trips no guard, is not a stray, and becomes a single event again", async () => {
    const clock = new ManualClock(Date.now());
    const { x } = await daemon(clock);
    h = x;
    const ids = await mirrored(x, clock, 3);
    const cal = x.world.calendarOf("th_1");
    x.world.google.userEdit(cal, eventIdFor(ids[0]!), { recurrence: ["RRULE:FREQ=WEEKLY;COUNT=10"] });
    const report = await x.app.reconcile();
    expect(report.guard.tripped).toBe(false);
    expect(report.ok).toBe(true);
    expect(report.plan.map((p) => p.kind)).toEqual(["restore"]);
    await pollAll(x);
    const ev = x.world.google.event(cal, eventIdFor(ids[0]!))!;
    expect(ev.recurrence ?? []).toEqual([]);
    expect(String(ev.description)).toMatch(/does not repeat/);
    expect(x.world.google.events(cal).filter((e) => e.status !== "cancelled" && e.recurringEventId)).toEqual([]);
    expect(patches(x)).toBe(0);
    expect(cancels(x)).toBe(0);
    expect((await x.app.reconcile()).plan).toEqual([]);
  });

  it("split with 'this and following events' before calbridge looked: nothing is sent, the appointment keeps its time", async () => {
    const clock = new ManualClock(Date.now());
    const { x } = await daemon(clock);
    h = x;
    const [id] = await mirrored(x, clock, 1);
    const cal = x.world.calendarOf("th_1");
    const ev = eventIdFor(id!);
    const start = Date.parse(String((x.world.google.event(cal, ev)!["start"] as { dateTime: string }).dateTime));
    const booked = x.world.booking.get(id!)!.start_time;
    x.world.google.userEdit(cal, ev, { recurrence: ["RRULE:FREQ=WEEKLY;COUNT=6"] });
    // From the third week on, an hour later: the tail is a new series (<id>_R<time>) carrying the appointment's mark.
    x.world.google.userSplitSeries(cal, ev, start + 14 * DAY, {
      start: { dateTime: iso(start + 14 * DAY + HOUR) },
      end: { dateTime: iso(start + 14 * DAY + 2 * HOUR) },
    });
    await pollAll(x);
    await pass(x, clock, 120_000);
    await x.app.reconcile();
    await pollAll(x);
    await pass(x, clock, 60_000);
    expect(cancels(x) + patches(x)).toBe(0);
    expect(x.world.booking.get(id!)).toMatchObject({ status: "confirmed", start_time: booked });
    const own = x.world.google.event(cal, ev)!;
    expect(own.recurrence ?? []).toEqual([]);
    expect(Date.parse(String((own["start"] as { dateTime: string }).dateTime))).toBe(start);
  });
});

describe("an event moved to a mapped therapist's calendar that calbridge cannot look at", () => {
  /** The appointment's history as sentences, oldest first. */
  async function story(x: Harness, id: string): Promise<string[]> {
    await x.app.sync.history.log.flush();
    return (await x.app.sync.history.log.read(id)).entries.map(sentenceOf);
  }

  it("is not cancelled: the cancellation waits visibly, then becomes a dead letter with nothing sent", async () => {
    const clock = new ManualClock(Date.now());
    const { x, log } = await daemon(clock, (c) => {
      c.google.oauth = { client_id: "placeholder", client_secret: "placeholder-secret" };
      // th_2 is mapped, on OAuth, and has not connected yet: mapped, without a usable calendar.
      for (const t of c.therapists) if (t.therapist_id === "th_2") t.auth = { type: "oauth" };
      c.sync = { ...c.sync, retry: { unavailable_grace_minutes: 10 } };
    });
    h = x;
    expect(x.app.sync.mapping.calendarIfAny("th_2")).toBeUndefined();
    const [a, b] = await mirrored(x, clock, 5);
    const cal1 = x.world.calendarOf("th_1");
    const cal2 = x.world.calendarOf("th_2");
    // "Change calendar" in Google's UI, to the colleague's calendar: th_1's calendar keeps what looks like a deletion.
    x.world.google.userMove(cal1, eventIdFor(a!), cal2);
    // The price of not guessing: while th_2's calendar cannot be looked at, a plain deletion cannot be told from such
    // a move either, so it waits too.
    x.world.google.userDelete(cal1, eventIdFor(b!));
    await pollAll(x);
    await pass(x, clock, 90_000); // past the grace period

    expect(cancels(x)).toBe(0);
    for (const id of [a!, b!]) expect(x.world.booking.get(id)!.status).toBe("confirmed");
    expect(x.world.google.event(cal2, eventIdFor(a!))?.status).toBe("confirmed");
    // Visible: the log, th_1's last error in /status, the history.
    const waits = log.lines.filter((l) => l["msg"] === "calendar not available; the sync waits");
    expect(waits.map((l) => l["appointment_id"]).sort()).toEqual([a!, b!].sort());
    expect(String(waits[0]!["err"])).toMatch(/th_2: .*the cancellation is not sent and waits for it/);
    const th1 = (await x.app.status()).therapists.find((t) => t.therapistId === "th_1")!;
    expect(th1.lastError?.message).toMatch(/may have been moved to a mapped therapist's calendar .*\(th_2: /);
    expect((await story(x, a!)).at(-1)).toMatch(
      /^the cancellation is not sent: the event may have been moved to th_2's calendar, which cannot be looked at now \(calbridge other_calendar_unavailable\)/,
    );

    // th_2 never connects: after sync.retry.unavailable_grace_minutes the waits end as dead letters, like any sync of
    // an unavailable calendar. Nothing is sent; the events stay where the therapist left them.
    await pass(x, clock, 20 * 60_000, 15_000);
    expect(x.app.sync.dead.count).toBe(2);
    expect(cancels(x)).toBe(0);
    expect(patches(x)).toBe(0);
    for (const id of [a!, b!]) expect(x.world.booking.get(id)!.status).toBe("confirmed");
    expect(x.world.google.event(cal2, eventIdFor(a!))?.status).toBe("confirmed");
    expect((await story(x, a!)).at(-1)).toMatch(/^gave up waiting for th_2's calendar.*the cancellation was not sent/);
    // The reconciliation takes them up again, and they wait again: still nothing sent.
    await x.app.reconcile();
    await pass(x, clock, 90_000);
    expect(cancels(x)).toBe(0);
  });

  it("a calendar no longer shared (404) is not 'the event is not there': the write-back waits, then goes on", async () => {
    const clock = new ManualClock(Date.now());
    const { x } = await daemon(clock);
    h = x;
    const [a] = await mirrored(x, clock, 3);
    const cal1 = x.world.calendarOf("th_1");
    const cal2 = x.world.calendarOf("th_2");
    // th_2's calendar stops being shared with calbridge: Google answers 404 for every event in it.
    x.world.google.unshareCalendar(cal2, cal2);
    x.world.google.userMove(cal1, eventIdFor(a!), cal2);
    await x.app.poller.poll("th_1");
    await pass(x, clock, 90_000);
    expect(cancels(x)).toBe(0);
    expect(x.world.booking.get(a!)!.status).toBe("confirmed");
    expect((await story(x, a!)).at(-1)).toMatch(/may have been moved to th_2's calendar/);

    // Shared again: the next retry finds the event there. Reassigning is off by default, so it is put back in th_1's
    // calendar and removed from th_2's; still nothing is cancelled.
    x.world.google.shareCalendar(cal2, cal2, "owner");
    await pass(x, clock, 6 * 60_000, 15_000);
    expect(cancels(x)).toBe(0);
    expect(x.world.booking.get(a!)!).toMatchObject({ status: "confirmed", therapist_id: "th_1" });
    expect(liveOf(x, cal1, a!)).toHaveLength(1);
    expect(liveOf(x, cal2, a!)).toHaveLength(0);
  });
});
