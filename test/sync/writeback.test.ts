// Two-way sync: a therapist's calendar changes pushed back to the booking service, refusals undone visibly,
// and both sides quiet afterwards (no echo, no ping-pong).
import { afterEach, describe, expect, it } from "vitest";
import { BookingApiError } from "../../src/booking/errors.ts";
import { eventIdFor } from "../../src/calendar/ids.ts";
import { ManualClock } from "../../src/clock.ts";
import type { ConfigInput } from "../../src/config/schema.ts";
import type { Link } from "../../src/sync/types.ts";
import { DAY, daemonHarness, type Harness, iso, liveOf, settle } from "./support.ts";

let h: Harness | undefined;
afterEach(async () => {
  await h?.close();
  h = undefined;
});

const HOUR = 3_600_000;
const NO_GRACE = { cancel_grace_seconds: 0, reschedule_grace_seconds: 0 };

/** A world with a running daemon (HTTP server, inbox processor) that receives the simulator's webhooks. */
async function twoWay(
  configure?: (c: ConfigInput) => void,
  engine?: { maxAttempts?: number; baseMs?: number },
  clock?: ManualClock,
): Promise<Harness> {
  return daemonHarness({
    therapists: 2,
    ...(clock ? { clock } : {}),
    // No grace period unless a test asks for one: these tests are about what a write-back does once it is sent.
    configure: (c) => {
      configure?.(c);
      c.sync = { ...c.sync, writeback: { ...NO_GRACE, ...c.sync?.writeback } };
    },
    ...(engine ? { engine, bookingMaxRetries: 0 } : {}),
  });
}

/** Reassignment from the calendar on, two tries per write-back, 5 s apart on `clock`. */
function reassigning(clock: ManualClock): Promise<Harness> {
  return twoWay(
    (c) => (c.sync = { ...c.sync, writeback: { reassign: true } }),
    { maxAttempts: 2, baseMs: 5_000 },
    clock,
  );
}

function bookingWrites(x: Harness): number {
  return x.world.booking.requests.filter((r) => r.method !== "GET").length;
}

/** Both sides are quiet: a full poll cycle, pending webhooks and a reconciliation write nothing anywhere. */
async function expectQuiet(x: Harness): Promise<void> {
  await settle(x);
  const google = x.writes();
  const booking = bookingWrites(x);
  await settle(x);
  const report = await x.app.reconcile();
  await settle(x);
  expect(report.plan).toEqual([]);
  expect(x.writes()).toBe(google);
  expect(bookingWrites(x)).toBe(booking);
}

async function mirrored(x: Harness, therapist = "th_1", startInDays = 3) {
  const start = new Date(Date.now() + startInDays * DAY);
  start.setUTCHours(10, 0, 0, 0);
  const appt = x.world.booking.create({ therapist_id: therapist, start_time: start.toISOString() }, { force: true });
  await settle(x);
  const cal = x.world.calendarOf(therapist);
  const eventId = eventIdFor(String(appt.id));
  expect(x.world.google.event(cal, eventId)?.status).toBe("confirmed");
  return { appt, id: String(appt.id), cal, eventId, start: start.getTime() };
}

const shifted = (ms: number) => ({ dateTime: iso(ms) });

/** The therapist's "change calendar" in Google: the event is gone from its calendar and in `to`'s with the same id. */
function moveToCalendar(x: Harness, m: Awaited<ReturnType<typeof mirrored>>, to: string): void {
  x.world.google.userMove(m.cal, m.eventId, x.world.calendarOf(to)); // "Change calendar" in Google's UI
}

describe("write-back", () => {
  it("a moved event reschedules the appointment, and both sides stay quiet", async () => {
    h = await twoWay();
    const m = await mirrored(h);
    h.world.google.userEdit(m.cal, m.eventId, { start: shifted(m.start + 2 * HOUR), end: shifted(m.start + 3 * HOUR) });
    await settle(h);
    const after = h.world.booking.get(m.id)!;
    expect(Date.parse(String(after.start_time))).toBe(m.start + 2 * HOUR);
    expect(Date.parse(String(after.end_time))).toBe(m.start + 3 * HOUR);
    const patches = h.world.booking.requests.filter((r) => r.method === "PATCH");
    expect(patches).toHaveLength(1);
    await expectQuiet(h);
    expect(h.world.google.event(m.cal, m.eventId)?.status).toBe("confirmed");
  });

  it("a move the booking service took is never undone when the event write after it fails for good", async () => {
    h = await twoWay(undefined, { maxAttempts: 1 });
    const m = await mirrored(h);
    // The therapist moves the event and renames it: taking the move, calbridge writes its own title back, and that
    // write fails (its only attempt).
    h.world.google.userEdit(m.cal, m.eventId, {
      summary: "my own title",
      start: shifted(m.start + 2 * HOUR),
      end: shifted(m.start + 3 * HOUR),
    });
    h.world.google.faults.next(1, { status: 500, reason: "backendError", match: /^PATCH .*\/events\// });
    await settle(h);
    expect(Date.parse(String(h.world.booking.get(m.id)!.start_time))).toBe(m.start + 2 * HOUR);
    // Not put back at the old time with "not applied": the booking service did apply it.
    const event = h.world.google.event(m.cal, m.eventId) as { start: { dateTime: string }; description?: string };
    expect(Date.parse(event.start.dateTime)).toBe(m.start + 2 * HOUR);
    expect(String(event.description ?? "")).not.toContain("was not applied");
    // The next reconciliation brings the event in line with the booking, and nothing more is sent.
    await h.app.reconcile();
    await settle(h);
    expect(h.world.booking.requests.filter((r) => r.method === "PATCH")).toHaveLength(1);
    const after = h.world.google.event(m.cal, m.eventId) as { start: { dateTime: string }; summary?: string };
    expect(Date.parse(after.start.dateTime)).toBe(m.start + 2 * HOUR);
    expect(after.summary).not.toBe("my own title");
  });

  it("a deleted event cancels the appointment with the configured reason", async () => {
    h = await twoWay((c) => {
      c.sync = { ...c.sync, writeback: { reason: "Therapist cancelled in calendar", notify_customer: false } };
    });
    const m = await mirrored(h);
    h.world.google.userDelete(m.cal, m.eventId);
    await settle(h);
    const after = h.world.booking.get(m.id)!;
    expect(after.status).toBe("cancelled");
    expect(after.cancellation_reason).toBe("Therapist cancelled in calendar");
    const cancel = h.world.booking.requests.find((r) => r.method === "POST" && r.route.includes("cancel"));
    expect(cancel).toBeDefined();
    await expectQuiet(h);
    expect(h.world.google.event(m.cal, m.eventId)?.status).toBe("cancelled");
  });

  it("a changed duration, an all-day event or a move by seconds is restored from the booking, nothing is sent", async () => {
    h = await twoWay();
    const m = await mirrored(h);
    h.world.google.userEdit(m.cal, m.eventId, { end: shifted(m.start + 3 * HOUR) });
    await settle(h);
    let ev = h.world.google.event(m.cal, m.eventId)!;
    expect(Date.parse(String((ev.end as { dateTime: string }).dateTime))).toBe(m.start + HOUR);
    h.world.google.userEdit(m.cal, m.eventId, {
      start: { date: iso(m.start).slice(0, 10) },
      end: { date: iso(m.start + DAY).slice(0, 10) },
    });
    await settle(h);
    ev = h.world.google.event(m.cal, m.eventId)!;
    expect((ev.start as { dateTime?: string }).dateTime).toBeDefined();
    expect(h.world.booking.requests.filter((r) => r.method === "PATCH")).toHaveLength(0);
    expect(String(ev.description)).toMatch(/calbridge|restored/i);
    // Moved by seconds (a script, another sync tool: no calendar app does that): no reschedule to hh:mm:05.
    h.world.google.userEdit(m.cal, m.eventId, {
      start: shifted(m.start + 5_000),
      end: shifted(m.start + HOUR + 5_000),
    });
    await settle(h);
    ev = h.world.google.event(m.cal, m.eventId)!;
    expect(Date.parse(String((ev.start as { dateTime: string }).dateTime))).toBe(m.start);
    expect(String(ev.description)).toMatch(/moved by less than a minute, which is no reschedule; times restored/);
    expect(Date.parse(String(h.world.booking.get(m.id)!.start_time))).toBe(m.start);
    expect(h.world.booking.requests.filter((r) => r.method === "PATCH")).toHaveLength(0);
    await expectQuiet(h);
  });

  it("a refused move is undone in the calendar, visibly, and reported", async () => {
    h = await twoWay();
    const m = await mirrored(h);
    // Another booking of the same therapist two hours later: moving onto it is refused (slot_unavailable).
    h.world.booking.create({ therapist_id: "th_1", start_time: iso(m.start + 2 * HOUR) }, { force: true });
    await settle(h);
    h.world.google.userEdit(m.cal, m.eventId, { start: shifted(m.start + 2 * HOUR), end: shifted(m.start + 3 * HOUR) });
    await settle(h);
    expect(Date.parse(String(h.world.booking.get(m.id)!.start_time))).toBe(m.start);
    const ev = h.world.google.event(m.cal, m.eventId)!;
    expect(Date.parse(String((ev.start as { dateTime: string }).dateTime))).toBe(m.start);
    expect(String(ev.description)).toMatch(
      /not applied: the booking service refused it \((slot_unavailable|therapist_unavailable)/,
    );
    const metric = await h.app.registry.getSingleMetricAsString("calbridge_writebacks_total");
    expect(metric).toMatch(/kind="reschedule",result="refused"} 1/);
    await expectQuiet(h);
  });

  it("a refusal's note says what its code means, never the service's text, which may name the customer", async () => {
    // booking_only: no customer details in events at all. The spec's error.message is free text; a real service's
    // customer_blocked may well say whom it blocks.
    h = await twoWay((c) => {
      c.event = { preset: "booking_only" };
    });
    const m = await mirrored(h);
    const customer = h.world.booking.customers().find((c) => c.id === m.appt.customer_id)!;
    h.world.booking.faults.refuseNext(1, "customer_blocked", {
      status: 403,
      match: { method: "PATCH" },
      message: `Customer ${customer.name} <${customer.email}> is blocked from booking (unpaid invoices)`,
    });
    h.world.google.userEdit(m.cal, m.eventId, { start: shifted(m.start + 2 * HOUR), end: shifted(m.start + 3 * HOUR) });
    await settle(h);
    const description = String(h.world.google.event(m.cal, m.eventId)!.description);
    expect(description).toContain(
      "not applied: the booking service refused it (customer_blocked: the customer is blocked from booking, HTTP 403)",
    );
    const link = await h.app.sync.links.get(m.id);
    for (const detail of [customer.name, customer.email, "unpaid"]) {
      expect(description).not.toContain(detail);
      expect(JSON.stringify(link)).not.toContain(detail);
    }
    expect(Date.parse(String(h.world.booking.get(m.id)!.start_time))).toBe(m.start);
  });

  it("a yes from the booking service that did not happen is no cancellation nor move: restored, visibly", async () => {
    h = await twoWay();
    const m = await mirrored(h);
    // The cancel is answered 200 with the appointment still confirmed, and nothing was done.
    h.world.booking.faults.ignoreNext(1, { match: { method: "POST", path: `/v1/appointments/${m.id}/cancel` } });
    h.world.google.userDelete(m.cal, m.eventId);
    await settle(h);
    expect(h.world.booking.get(m.id)!.status).toBe("confirmed");
    const back = liveOf(h, m.cal, m.id);
    expect(back).toHaveLength(1);
    expect(String(back[0]!.description)).toMatch(/deletion of this appointment was not applied: .*not_applied/);

    // A move answered 202 with the old time, and nothing was done.
    h.world.booking.faults.ignoreNext(1, { status: 202, match: { method: "PATCH" } });
    const id = back[0]!.id as string;
    h.world.google.userEdit(m.cal, id, { start: shifted(m.start + 2 * HOUR), end: shifted(m.start + 3 * HOUR) });
    await settle(h);
    expect(Date.parse(String(h.world.booking.get(m.id)!.start_time))).toBe(m.start);
    const ev = h.world.google.event(m.cal, id)!;
    expect(Date.parse(String((ev.start as { dateTime: string }).dateTime))).toBe(m.start);
    expect(String(ev.description)).toMatch(/move of this appointment was not applied: .*not_applied/);
    const metric = await h.app.registry.getSingleMetricAsString("calbridge_writebacks_total");
    expect(metric).toMatch(/kind="cancel",result="refused"} 1/);
    expect(metric).toMatch(/kind="reschedule",result="refused"} 1/);
    await expectQuiet(h);
  });

  it("a yes that can be neither read nor checked is never answered by putting the deleted event back", async () => {
    h = await twoWay((c) => (c.sync = { ...c.sync, cancelled_events: "keep" }), { maxAttempts: 1, baseMs: 10 });
    const m = await mirrored(h);
    // Cancelled, answered 204 without a body; every read of the appointment fails for a while.
    h.world.booking.faults.malformedNext(1, { status: 204, body: "", match: { method: "POST" } });
    const cancelled = () => h!.world.booking.get(m.id)!.status === "cancelled";
    h.world.booking.faults.failNext(1000, 503, { method: "GET", when: cancelled });
    h.world.google.userDelete(m.cal, m.eventId);
    await h.app.poller.poll("th_1");
    await h.app.engine.idle();
    expect(h.world.booking.get(m.id)!.status).toBe("cancelled");
    // Not put back as "not applied": the write-back is left for the dead letters, the event stays deleted.
    expect(liveOf(h, m.cal, m.id)).toEqual([]);
    const metric = await h.app.registry.getSingleMetricAsString("calbridge_writebacks_total");
    expect(metric).not.toMatch(/result="failed"} [1-9]/);
    expect(metric).not.toMatch(/result="refused"} [1-9]/);
    // Once the service answers again, the next sync lines the calendar up with the cancellation: nothing sent twice.
    h.world.booking.faults.reset();
    await settle(h);
    await h.app.reconcile();
    await settle(h);
    expect(h.world.booking.requests.filter((r) => r.route.endsWith("/cancel"))).toHaveLength(1);
    expect(liveOf(h, m.cal, m.id).every((e) => String(e.summary).startsWith("Cancelled"))).toBe(true);
  });

  it("a change to an appointment that is not confirmed is restored with the reason", async () => {
    h = await twoWay();
    const m = await mirrored(h);
    h.world.booking.complete(m.id);
    await settle(h);
    h.world.google.userDelete(m.cal, m.eventId);
    await settle(h);
    expect(h.world.booking.get(m.id)!.status).toBe("completed");
    // Put back under the next generation of its id: Google refuses to restore one a person deleted.
    expect(liveOf(h, m.cal, m.id).map((e) => e.id)).toEqual([eventIdFor(m.id, 1)]);
    await expectQuiet(h);
  });

  it("an event moved to another mapped therapist's calendar reassigns when allowed, otherwise is put back", async () => {
    for (const reassign of [true, false]) {
      h = await twoWay((c) => {
        c.sync = { ...c.sync, writeback: { reassign } };
      });
      const m = await mirrored(h, "th_1");
      moveToCalendar(h, m, "th_2");
      await settle(h);
      const appt = h.world.booking.get(m.id)!;
      expect(appt.status).toBe("confirmed");
      const live = (t: string) => liveOf(h!, h!.world.calendarOf(t), m.id).length === 1;
      if (reassign) {
        expect(appt.therapist_id).toBe("th_2");
        expect([live("th_1"), live("th_2")]).toEqual([false, true]);
      } else {
        expect(appt.therapist_id).toBe("th_1");
        expect([live("th_1"), live("th_2")]).toEqual([true, false]);
      }
      await expectQuiet(h);
      await h.close();
      h = undefined;
    }
  });

  it("the appointment.updated webhook after calbridge's own PATCH causes no write", async () => {
    h = await twoWay();
    const m = await mirrored(h);
    h.world.google.userEdit(m.cal, m.eventId, { start: shifted(m.start + DAY), end: shifted(m.start + DAY + HOUR) });
    await h.app.poller.poll("th_1");
    await h.app.engine.idle();
    const writes = h.writes();
    await h.world.booking.webhooksIdle(); // the appointment.updated that follows the PATCH
    await h.app.processor.idle();
    await h.app.engine.idle();
    expect(h.world.booking.events.some((e) => e.type === "appointment.updated")).toBe(true);
    expect(h.writes()).toBe(writes);
    await expectQuiet(h);
  });

  it("a change on both sides between two syncs: booking_wins keeps the booking's time and says so in the event", async () => {
    h = await twoWay();
    const m = await mirrored(h);
    h.world.google.userEdit(m.cal, m.eventId, { start: shifted(m.start + 2 * HOUR), end: shifted(m.start + 3 * HOUR) });
    // The booking moves too; its webhook is handled before the calendar poll sees the therapist's move.
    h.world.booking.move(m.id, iso(m.start + 5 * HOUR), { force: true });
    await h.world.booking.webhooksIdle();
    await h.app.processor.idle();
    await h.app.engine.syncAppointment(m.id, {
      reason: "test",
      priority: "writeback",
      calendar: { therapistId: "th_1", event: h.world.google.event(m.cal, m.eventId) as never },
    });
    await settle(h);
    expect(Date.parse(String(h.world.booking.get(m.id)!.start_time))).toBe(m.start + 5 * HOUR);
    const ev = h.world.google.event(m.cal, m.eventId)!;
    expect(Date.parse(String((ev.start as { dateTime: string }).dateTime))).toBe(m.start + 5 * HOUR);
    expect(String(ev.description)).toContain("your change to this event was undone: the booking was changed");
    expect(h.world.booking.requests.filter((r) => r.method === "PATCH")).toHaveLength(0);
    await expectQuiet(h);
  });

  it("calendar_wins sends the therapist's time instead", async () => {
    h = await twoWay((c) => {
      c.sync = { ...c.sync, conflict: "calendar_wins" };
    });
    const m = await mirrored(h);
    h.world.google.userEdit(m.cal, m.eventId, { start: shifted(m.start + 2 * HOUR), end: shifted(m.start + 3 * HOUR) });
    // The booking moves too, but its webhook is not processed before the calendar poll (delivery delayed).
    const link = (await h.app.sync.links.get(m.id)) as Link;
    h.world.booking.move(m.id, iso(m.start + 5 * HOUR), { force: true });
    await h.app.engine.syncAppointment(m.id, {
      reason: "test",
      priority: "writeback",
      calendar: { therapistId: "th_1", event: h.world.google.event(m.cal, m.eventId) as never },
    });
    expect(link.eventStart).toBe(m.start);
    expect(Date.parse(String(h.world.booking.get(m.id)!.start_time))).toBe(m.start + 2 * HOUR);
    await expectQuiet(h);
  });

  it("a transient failure of the write-back is retried", async () => {
    h = await twoWay();
    const m = await mirrored(h);
    h.world.booking.faults.failNext(2, 503, { method: "PATCH" });
    h.world.google.userEdit(m.cal, m.eventId, { start: shifted(m.start + 2 * HOUR), end: shifted(m.start + 3 * HOUR) });
    await settle(h);
    expect(Date.parse(String(h.world.booking.get(m.id)!.start_time))).toBe(m.start + 2 * HOUR);
    await expectQuiet(h);
  });

  it("a write-back that keeps failing is restored and reported, not retried forever", async () => {
    const clock = new ManualClock(Date.now());
    h = await twoWay(undefined, { maxAttempts: 2, baseMs: 5_000 }, clock);
    const m = await mirrored(h);
    h.world.booking.faults.failNext(1000, 503, { method: "PATCH" });
    h.world.google.userEdit(m.cal, m.eventId, { start: shifted(m.start + 2 * HOUR), end: shifted(m.start + 3 * HOUR) });
    const polled = h.app.poller.poll("th_1");
    // The booking client's own retries and the engine's second attempt, on the manual clock. Bounded in real time, not
    // in steps: under load the clock runs on while a request is in flight, and a step count ran out before the end.
    const end = Date.now() + 20_000;
    while (
      Date.now() < end &&
      !String(h.world.google.event(m.cal, m.eventId)?.description).includes("could not be sent")
    ) {
      await clock.advance(1_000);
      await new Promise((r) => setTimeout(r, 5));
    }
    await polled;
    await h.app.engine.idle();
    const ev = h.world.google.event(m.cal, m.eventId)!;
    expect(Date.parse(String((ev.start as { dateTime: string }).dateTime))).toBe(m.start);
    expect(String(ev.description)).toMatch(/not applied: it could not be sent after 2 attempts/);
    expect(Date.parse(String(h.world.booking.get(m.id)!.start_time))).toBe(m.start);
    const metric = await h.app.registry.getSingleMetricAsString("calbridge_writebacks_total");
    expect(metric).toMatch(/kind="reschedule",result="failed"} 1/);
    h.world.booking.faults.reset();
    await expectQuiet(h);
  });

  it("a reassignment that keeps failing is put back in its own calendar and removed from the other one", async () => {
    const clock = new ManualClock(Date.now());
    h = await reassigning(clock);
    const m = await mirrored(h, "th_1");
    const cal2 = h.world.calendarOf("th_2");
    h.world.booking.faults.failNext(1000, 503, { method: "PATCH" });
    moveToCalendar(h, m, "th_2");
    const polled = h.app.poller.poll("th_1");
    const end = Date.now() + 20_000; // real time, not 60 steps: under load the clock runs on while HTTP is in flight
    while (Date.now() < end && liveOf(h, m.cal, m.id).length === 0) {
      await clock.advance(1_000);
      await new Promise((r) => setTimeout(r, 5));
    }
    await polled;
    await h.app.engine.idle();
    expect(h.world.booking.get(m.id)!).toMatchObject({ status: "confirmed", therapist_id: "th_1" });
    // Exactly one live event, in the calendar of the therapist the booking names, saying why.
    expect(liveOf(h, cal2, m.id)).toHaveLength(0);
    const back = liveOf(h, m.cal, m.id);
    expect(back).toHaveLength(1);
    expect(String(back[0]!.description)).toMatch(
      /move of this appointment to the calendar of another therapist was not applied: it could not be sent after 2 attempts/,
    );
    const metric = await h.app.registry.getSingleMetricAsString("calbridge_writebacks_total");
    expect(metric).toMatch(/kind="reassign",result="failed"} 1/);
    await h.app.sync.history.log.flush();
    const entries = (await h.app.sync.history.log.read(m.id)).entries;
    expect(entries.find((e) => e.kind === "writeback")).toMatchObject({
      writeback: "reassign",
      result: "failed",
      toTherapistId: "th_2",
    });
    h.world.booking.faults.reset();
    await expectQuiet(h);
    expect(h.world.booking.requests.filter((r) => r.route.includes("cancel"))).toHaveLength(0);
  });

  it("a reassignment whose last answer was lost is looked up, found taken, and not undone", async () => {
    const clock = new ManualClock(Date.now());
    h = await reassigning(clock);
    const m = await mirrored(h, "th_1");
    const cal2 = h.world.calendarOf("th_2");
    // The booking service is out for the first attempt; on the last one it takes the PATCH, and then goes down before
    // answering it or any resend: the client ends with a timeout, as after a lost answer.
    const client = h.app.booking;
    const patch = client.patchAppointment.bind(client);
    let calls = 0;
    client.patchAppointment = async (...a: Parameters<typeof patch>) => {
      const taken = ++calls > 1 ? await patch(...a) : undefined;
      throw new BookingApiError({ code: "timeout", message: `no answer (${taken ? "taken" : "not sent"})` });
    };
    moveToCalendar(h, m, "th_2");
    const polled = h.app.poller.poll("th_1");
    // A minute of the clock, and on until the second call: under load the clock runs on while HTTP is in flight.
    const end = Date.now() + 20_000;
    for (let i = 0; i < 60 || (calls < 2 && Date.now() < end); i++) {
      await clock.advance(1_000);
      await new Promise((r) => setTimeout(r, 5));
    }
    await polled;
    await h.app.engine.idle();
    expect(calls).toBe(2);
    client.patchAppointment = patch;
    expect(h.world.booking.get(m.id)!).toMatchObject({ status: "confirmed", therapist_id: "th_2" });
    expect(liveOf(h, cal2, m.id)).toHaveLength(1);
    expect(liveOf(h, m.cal, m.id)).toHaveLength(0);
    const metric = await h.app.registry.getSingleMetricAsString("calbridge_writebacks_total");
    expect(metric).toMatch(/kind="reassign",result="ok"} 1/);
    expect(metric).not.toMatch(/result="failed"/);
    await expectQuiet(h);
  });

  it("with write-back off, the therapist's edits are overwritten from the booking", async () => {
    h = await twoWay((c) => {
      c.sync = { ...c.sync, writeback: { reschedule: false, cancel: false } };
    });
    const m = await mirrored(h);
    h.world.google.userEdit(m.cal, m.eventId, { start: shifted(m.start + 2 * HOUR), end: shifted(m.start + 3 * HOUR) });
    await settle(h);
    const ev = h.world.google.event(m.cal, m.eventId)!;
    expect(Date.parse(String((ev.start as { dateTime: string }).dateTime))).toBe(m.start);
    h.world.google.userDelete(m.cal, m.eventId);
    await settle(h);
    expect(liveOf(h, m.cal, m.id)).toHaveLength(1);
    expect(h.world.booking.get(m.id)!.status).toBe("confirmed");
    expect(h.world.booking.requests.filter((r) => r.method !== "GET")).toHaveLength(0);
    await expectQuiet(h);
  });
});

describe("errors are never taken for a therapist's deletion", () => {
  it("a moved-to calendar that answers quotaExceeded does not turn the move into a cancellation", async () => {
    h = await twoWay((c) => {
      c.sync = { ...c.sync, writeback: { reassign: true } };
    });
    const m = await mirrored(h, "th_1");
    moveToCalendar(h, m, "th_2");
    // Looking for it there fails: not an answer, so not "it is not there".
    h.world.google.faults.next(1, {
      status: 403,
      reason: "quotaExceeded",
      match: new RegExp(`GET .*th_2.*/events/${m.eventId}`),
    });
    await h.app.poller.poll("th_1");
    await h.app.engine.idle();
    expect(h.world.booking.get(m.id)!.status).toBe("confirmed");
    expect(h.world.booking.requests.filter((r) => r.route.includes("cancel"))).toHaveLength(0);
    // th_2's calendar is paused for the quota now; the write-back waits for it instead of guessing.
    expect(h.world.booking.get(m.id)!.therapist_id).toBe("th_1");
  });

  it("a 404 when re-reading a linked event (a calendar no longer accessible) does not cancel the appointment", async () => {
    h = await twoWay(undefined, { maxAttempts: 2, baseMs: 10 });
    const m = await mirrored(h, "th_1");
    // Out of the reconciliation's window listing, so it reads the event by id; Google would answer a deleted event
    // with status "cancelled", and answers 404 for a calendar it no longer lets calbridge see.
    h.world.google.userEdit(m.cal, m.eventId, {
      start: shifted(m.start + 400 * DAY),
      end: shifted(m.start + 400 * DAY + HOUR),
    });
    h.world.google.faults.next(20, {
      status: 404,
      reason: "notFound",
      match: new RegExp(`GET .*th_1.*/events/${m.eventId}`),
    });
    await h.app.reconcile();
    await h.app.engine.idle();
    expect(h.world.booking.get(m.id)!.status).toBe("confirmed");
    expect(h.world.booking.requests.filter((r) => r.route.includes("cancel"))).toHaveLength(0);
  });

  it("a second move while the first one's write-back is in flight is written back too, not silently undone", async () => {
    h = await twoWay(
      (c) => {
        // The description shows the time, so the move taken needs a write of the event (a drag keeps the event's
        // zone, as in Google's UI: the event is otherwise as calbridge writes it).
        c.event = { ...c.event, description: "Booking {id} at {start_local}" };
      },
      { maxAttempts: 5, baseMs: 10 },
    );
    const m = await mirrored(h, "th_1");
    // The therapist drags the event again right after the booking service took the first move: calbridge's write of
    // the event then meets a newer etag (412) and must re-read the linked event.
    const client = h.app.booking;
    const patch = client.patchAppointment.bind(client);
    let first = true;
    client.patchAppointment = async (...a: Parameters<typeof patch>) => {
      const res = await patch(...a);
      if (first) {
        first = false;
        h!.world.google.userEdit(m.cal, m.eventId, {
          start: shifted(m.start + 5 * HOUR),
          end: shifted(m.start + 6 * HOUR),
        });
      }
      return res;
    };
    h.world.google.userEdit(m.cal, m.eventId, { start: shifted(m.start + 2 * HOUR), end: shifted(m.start + 3 * HOUR) });
    await settle(h);
    await settle(h);
    const ev = h.world.google.event(m.cal, m.eventId)!;
    expect(Date.parse(String((ev.start as { dateTime: string }).dateTime))).toBe(m.start + 5 * HOUR);
    expect(Date.parse(String(h.world.booking.get(m.id)!.start_time))).toBe(m.start + 5 * HOUR);
  });

  it("an event deleted while its move is in flight is cancelled only once the deletion has stood its grace period", async () => {
    const CANCEL_GRACE_MS = 2_000;
    h = await twoWay(
      (c) => {
        // The calendar wins: the deletion found after the booking took the move is written back as a cancel. The move
        // waits out its own period first: a period timed from the move would be over when the deletion comes.
        c.sync = {
          ...c.sync,
          conflict: "calendar_wins",
          writeback: { cancel_grace_seconds: CANCEL_GRACE_MS / 1000, reschedule_grace_seconds: 2 },
        };
        // The description shows the time, so the move taken needs a write of the event (a drag keeps the event's
        // zone, as in Google's UI: the event is otherwise as calbridge writes it).
        c.event = { ...c.event, description: "Booking {id} at {start_local}" };
      },
      { maxAttempts: 5, baseMs: 10 },
    );
    const m = await mirrored(h, "th_1");
    // The therapist deletes the event right after the booking service took its move: calbridge's write of the event
    // then meets a newer etag (412), and it decides again from the deleted event.
    const client = h.app.booking;
    const patch = client.patchAppointment.bind(client);
    const cancel = client.cancelAppointment.bind(client);
    let deletedAt: number | undefined;
    let cancelledAt: number | undefined;
    client.patchAppointment = async (...a: Parameters<typeof patch>) => {
      const res = await patch(...a);
      if (deletedAt === undefined) {
        h!.world.google.userDelete(m.cal, m.eventId);
        deletedAt = Date.now();
      }
      return res;
    };
    client.cancelAppointment = (...a: Parameters<typeof cancel>) => {
      cancelledAt ??= Date.now();
      return cancel(...a);
    };
    h.world.google.userEdit(m.cal, m.eventId, { start: shifted(m.start + 2 * HOUR), end: shifted(m.start + 3 * HOUR) });
    await settle(h);
    await h.app.engine.drained();
    expect(deletedAt).toBeDefined();
    expect(cancelledAt).toBeDefined();
    expect(cancelledAt! - deletedAt!).toBeGreaterThanOrEqual(CANCEL_GRACE_MS);
    expect(h.world.booking.get(m.id)!.status).toBe("cancelled");
  });
});

describe("events that carry an appointment's mark but are not its event", () => {
  it("a moved occurrence or a copy of the event neither reschedules the booking nor is deleted", async () => {
    h = await twoWay();
    const m = await mirrored(h, "th_1");
    const ev = h.world.google.event(m.cal, m.eventId)!;
    // The therapist makes the event weekly and moves next week's occurrence: an event of its own id that inherits
    // the private properties (the emulator does not expand series, so it is inserted as such).
    h.world.google.userEdit(m.cal, m.eventId, { recurrence: ["RRULE:FREQ=WEEKLY;COUNT=4"] });
    const copy = h.world.google.userInsert(m.cal, {
      summary: ev.summary,
      description: ev.description,
      start: shifted(m.start + 7 * DAY + 2 * HOUR),
      end: shifted(m.start + 7 * DAY + 3 * HOUR),
      extendedProperties: ev.extendedProperties,
    });
    expect(copy.id).not.toBe(m.eventId);
    await h.app.poller.poll("th_1");
    await h.app.engine.idle();
    await h.app.reconcile();
    await h.app.engine.idle();
    expect(Date.parse(String(h.world.booking.get(m.id)!.start_time))).toBe(m.start);
    expect(h.world.booking.requests.filter((r) => r.method === "PATCH")).toHaveLength(0);
    expect(h.world.google.event(m.cal, String(copy.id))?.status).toBe("confirmed");
    const link = (await h.app.sync.links.get(m.id)) as Link;
    expect(link.eventId).toBe(m.eventId);
    expect(link.eventStart).toBe(m.start);
  });
});

describe("kept cancellations", () => {
  it("a kept 'Cancelled' event the therapist deletes stays deleted, and nothing is sent", async () => {
    h = await twoWay((c) => {
      c.sync = { ...c.sync, cancelled_events: "keep" };
    });
    const m = await mirrored(h);
    h.world.booking.cancel(m.id, "customer ill");
    await settle(h);
    const kept = h.world.google.event(m.cal, m.eventId)!;
    expect(kept.status).toBe("confirmed");
    expect(String(kept.summary)).toMatch(/^Cancelled: /);
    expect(kept.transparency).toBe("transparent");
    h.world.google.userDelete(m.cal, m.eventId);
    await settle(h);
    expect(h.world.google.event(m.cal, m.eventId)?.status).toBe("cancelled");
    await expectQuiet(h);
  });
});
