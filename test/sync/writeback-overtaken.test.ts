// A write-back overtaken by the booking side: while the therapist's deletion or move was on its way (its webhook not
// yet in), the customer cancelled or moved the appointment. The booking service answers 409 invalid_state. The
// therapist's event is not put back with "your deletion was not applied" for an appointment that is cancelled (what
// the therapist wanted), nor shown as booked at a time the booking no longer has: the booking is read again first.
import { afterEach, describe, expect, it } from "vitest";
import { whatOf } from "../../src/cli/history-output.ts";
import type { HistoryEntry } from "../../src/sync/history-entry.ts";
import { daemonHarness, type Harness, iso, liveOf, mirrored as mirroredOne, settle } from "./support.ts";

let h: Harness | undefined;
afterEach(async () => {
  await h?.close();
  h = undefined;
});

const HOUR = 3_600_000;

async function world(
  wb: Record<string, unknown> = {},
  sync: Record<string, unknown> = {},
  maxAttempts = 1,
): Promise<Harness> {
  return daemonHarness({
    therapists: 1,
    configure: (c) => {
      c.sync = {
        ...c.sync,
        ...sync,
        writeback: { cancel_grace_seconds: 0, reschedule_grace_seconds: 0, ...wb },
      } as typeof c.sync;
    },
    engine: { maxAttempts, baseMs: 10 },
  });
}

async function mirrored(x: Harness) {
  const m = await mirroredOne(x);
  expect(x.world.google.event(m.cal, m.eventId)?.status).toBe("confirmed");
  return m;
}

/**
 * The booking side changes just before calbridge's write reaches it, after calbridge read the appointment, and its
 * webhook is late: calbridge does not know yet.
 */
function overtake(x: Harness, method: string, route: RegExp, change: () => void): void {
  for (const e of x.world.booking.webhookEndpoints()) x.world.booking.setWebhookEndpointEnabled(e.id, false);
  x.world.booking.faults.raceNext({ method, path: route }, change);
}

/** The therapist moves the event two hours on; the customer cancels just before calbridge's PATCH reaches the service. */
async function moveOvertakenByCancel(x: Harness, m: Awaited<ReturnType<typeof mirrored>>): Promise<void> {
  overtake(x, "PATCH", /^\/v1\/appointments\/[^/]+$/, () => x.world.booking.cancel(m.id, "customer cancelled online"));
  x.world.google.userEdit(m.cal, m.eventId, {
    start: { dateTime: iso(m.start + 2 * HOUR) },
    end: { dateTime: iso(m.start + 3 * HOUR) },
  });
  await settle(x);
}

async function history(x: Harness, id: string): Promise<HistoryEntry[]> {
  await x.app.sync.history.log.flush();
  return (await x.app.sync.history.log.read(id)).entries;
}

const sent = (x: Harness, method: string, route: RegExp) =>
  x.world.booking.requests.filter((r) => r.method === method && route.test(r.route)).length;

describe("a write-back the booking side overtook", () => {
  it("a deletion sent after the customer cancelled is not undone: the appointment is cancelled, as the therapist wanted", async () => {
    h = await world();
    const m = await mirrored(h);
    overtake(h, "POST", /\/cancel$/, () => h!.world.booking.cancel(m.id, "customer cancelled online"));
    h.world.google.userDelete(m.cal, m.eventId);
    await settle(h);
    // One cancel sent (answered 409: already cancelled), and not again.
    expect(sent(h, "POST", /:id\/cancel$/)).toBe(1);
    expect(h.world.booking.get(m.id)?.cancellation_reason).toBe("customer cancelled online");
    // The event stays deleted: no "your deletion was not applied" put back in the calendar.
    expect(h.world.google.event(m.cal, m.eventId)?.status).toBe("cancelled");
    const wb = (await history(h, m.id)).filter((e) => e.kind === "writeback");
    expect(wb.at(-1)).toMatchObject({ writeback: "cancel", result: "already", status: "cancelled" });
    expect(whatOf(wb.at(-1)!)).toContain("already cancelled in the booking service; the event stays deleted");
    // Quiet afterwards: nothing more is sent on either side.
    const writes = h.writes();
    await h.app.reconcile();
    await settle(h);
    expect(h.writes()).toBe(writes);
    expect(sent(h, "POST", /:id\/cancel$/)).toBe(1);
  });

  it("with tries left, the answer 'already cancelled' is looked at, not retried: history 'already', no failure", async () => {
    h = await world({}, {}, 3);
    const m = await mirrored(h);
    overtake(h, "POST", /\/cancel$/, () => h!.world.booking.cancel(m.id, "customer cancelled online"));
    h.world.google.userDelete(m.cal, m.eventId);
    await settle(h);
    expect(sent(h, "POST", /:id\/cancel$/)).toBe(1);
    const entries = await history(h, m.id);
    expect(entries.filter((e) => e.kind === "sync_failed")).toEqual([]);
    expect(entries.filter((e) => e.kind === "writeback").at(-1)).toMatchObject({
      writeback: "cancel",
      result: "already",
    });
  });

  it("a move sent after the customer cancelled removes the event instead of putting it back as booked", async () => {
    h = await world();
    const m = await mirrored(h);
    await moveOvertakenByCancel(h, m);
    expect(sent(h, "PATCH", /:id$/)).toBe(1);
    // The appointment is cancelled: its event goes (a cancelled appointment is shown as none, as the mirror does),
    // never put back "as booked" at 10:00 with a note that the move was not applied.
    const event = h.world.google.event(m.cal, m.eventId);
    expect(event?.status).toBe("cancelled");
    const wb = (await history(h, m.id)).filter((e) => e.kind === "writeback");
    // 409 invalid_state is no refusal the spec names: "could not be sent" (its only try here), and told with the
    // booking's status now, so the history does not say the event was put back.
    expect(wb.at(-1)).toMatchObject({ writeback: "reschedule", result: "failed", status: "cancelled" });
    expect(whatOf(wb.at(-1)!)).toContain(
      "the appointment is cancelled in the booking service now; the event shows that",
    );
  });

  it("a move refused while the booking already has that time (staff moved it there meanwhile) is not undone", async () => {
    h = await world();
    const m = await mirrored(h);
    const patch = /^\/v1\/appointments\/[^/]+$/;
    overtake(h, "PATCH", patch, () => h!.world.booking.move(m.id, m.start + 2 * HOUR, { force: true }));
    // The service refuses the PATCH (the slot is taken: by this very appointment now).
    h.world.booking.faults.refuseNext(1, "slot_unavailable", { status: 409, match: { method: "PATCH", path: patch } });
    h.world.google.userEdit(m.cal, m.eventId, {
      start: { dateTime: iso(m.start + 2 * HOUR) },
      end: { dateTime: iso(m.start + 3 * HOUR) },
    });
    await settle(h);
    expect(sent(h, "PATCH", /:id$/)).toBe(1);
    const event = h.world.google.event(m.cal, m.eventId) as { start: { dateTime: string }; description?: string };
    expect(Date.parse(event.start.dateTime)).toBe(m.start + 2 * HOUR);
    expect(String(event.description ?? "")).not.toContain("not applied");
    const wb = (await history(h, m.id)).filter((e) => e.kind === "writeback");
    expect(wb.at(-1)).toMatchObject({ writeback: "reschedule", result: "already", code: "slot_unavailable" });
    expect(whatOf(wb.at(-1)!)).toContain("the booking already has that time; the event stays");
  });

  describe("with cancelled_events: keep (a cancelled appointment's event stays, marked)", () => {
    // Google will not restore the deleted event under its id: a marker put back is a new generation of it.
    const live = (x: Harness, m: { cal: string; id: string }) => liveOf(x, m.cal, m.id);

    it("a deletion waiting its grace period when the customer cancels is not answered with the marker and 'undone'", async () => {
      h = await world({ cancel_grace_seconds: 3600 }, { cancelled_events: "keep" });
      const m = await mirrored(h);
      h.world.google.userDelete(m.cal, m.eventId);
      await settle(h); // the deletion waits out its grace period
      h.world.booking.cancel(m.id, "customer cancelled online"); // its webhook comes in
      await settle(h);
      expect(sent(h, "POST", /:id\/cancel$/)).toBe(0);
      // The therapist wanted the appointment gone and it is cancelled: no "Cancelled" marker put back, no false note.
      expect(live(h, m)).toEqual([]);
    });

    it("a move sent after the customer cancelled leaves the marker, and the history does not say the event is removed", async () => {
      h = await world({}, { cancelled_events: "keep" });
      const m = await mirrored(h);
      await moveOvertakenByCancel(h, m);
      expect(live(h, m)).toHaveLength(1); // the "Cancelled" marker
      const wb = (await history(h, m.id)).filter((e) => e.kind === "writeback");
      expect(wb.at(-1)).toMatchObject({ writeback: "reschedule", result: "failed", status: "cancelled" });
      expect(whatOf(wb.at(-1)!)).not.toMatch(/removed/);
      expect(whatOf(wb.at(-1)!)).toContain(
        "the appointment is cancelled in the booking service now; the event shows that",
      );
    });

    it("an event deleted after the customer cancelled (its webhook late) stays deleted", async () => {
      h = await world({}, { cancelled_events: "keep" });
      const m = await mirrored(h);
      for (const e of h.world.booking.webhookEndpoints()) h.world.booking.setWebhookEndpointEnabled(e.id, false);
      h.world.booking.cancel(m.id, "customer cancelled online");
      h.world.google.userDelete(m.cal, m.eventId);
      await settle(h);
      expect(sent(h, "POST", /:id\/cancel$/)).toBe(0);
      expect(live(h, m)).toEqual([]);
    });
  });
});
