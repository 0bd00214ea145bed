// What the fault run exposed, pinned down deterministically: a calendar change read before calbridge's own later
// write of the same event must not be taken for the therapist's change (it would cancel or move the appointment in
// the booking service although nobody asked for it), and a live event of a cancelled appointment must not outlive
// the record that calbridge once removed it.
import { describe, expect, it } from "vitest";
import { eventIdFor } from "../../src/calendar/ids.ts";
import type { ConfigInput } from "../../src/config/schema.ts";
import { startWorld } from "../../src/simulator/world.ts";
import { type RunningApp, startApp } from "./app.ts";
import { removeWhenPassed } from "./dirs.ts";
import { stateProblems } from "./expected.ts";

/** Write-backs at once: the grace period before one is sent has tests of its own. */
const noGrace = (c: ConfigInput) => {
  c.sync = { ...c.sync, writeback: { cancel_grace_seconds: 0, reschedule_grace_seconds: 0 } };
};

const DAY = 86_400_000;
const HOUR = 3_600_000;
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

export function raceTests(seed: number): void {
  describe("races between calendar changes and calbridge's own writes", () => {
    it("a deletion overruled by booking_wins is not sent as a cancellation by a calendar poll that read it before the restore", async () => {
      const world = await startWorld({ therapists: 2, seed: seed + 3, configure: noGrace });
      removeWhenPassed(world.dir);
      let running: RunningApp | undefined;
      try {
        running = await startApp(world, "race daemon", { oneShot: true });
        const { app } = running;
        const start = new Date(Date.now() + 5 * DAY);
        start.setUTCHours(10, 0, 0, 0);
        const appt = world.booking.create({ therapist_id: "th_1", start_time: start.toISOString() });
        const id = String(appt.id);
        const cal = world.calendarOf("th_1");
        await app.engine.syncAppointment(id, { reason: "appointment.created", priority: "webhook" });
        await app.poller.poll("th_1"); // the first full read: calbridge's own event, an echo
        expect(world.google.event(cal, eventIdFor(id))?.status).toBe("confirmed");

        // Both sides change between two syncs: the therapist deletes the event, staff move the appointment.
        world.google.userDelete(cal, eventIdFor(id));
        const moved = start.getTime() + 2 * HOUR;
        world.booking.move(id, new Date(moved));
        // The appointment.updated webhook is being processed (its GET takes a while) when the calendar poll reads
        // the deletion; the poll's sync of the appointment waits for the webhook's, which restores the event
        // (booking_wins).
        world.booking.faults.latencyMs = 500;
        const webhook = app.engine.syncAppointment(id, { reason: "appointment.updated", priority: "webhook" });
        await sleep(100);
        const poll = app.poller.poll("th_1");
        await Promise.all([webhook, poll]);
        world.booking.faults.latencyMs = 0;
        await app.engine.idle();

        // booking_wins: the appointment keeps its new time, the event shows it; nothing was cancelled.
        const cancels = world.booking.requests.filter((r) => r.route === "POST /v1/appointments/:id/cancel");
        expect(cancels).toHaveLength(0);
        expect(world.booking.get(id)?.status).toBe("confirmed");
        expect(stateProblems(world)).toEqual([]);
        const report = await app.reconcile();
        expect(report.plan).toEqual([]);
      } finally {
        await running?.stop();
        await world.close();
      }
    });

    it("an event brought back after its deletion cancelled the appointment is removed again, by the poll or the reconciliation", async () => {
      const world = await startWorld({ therapists: 2, seed: seed + 4, configure: noGrace });
      removeWhenPassed(world.dir);
      let running: RunningApp | undefined;
      try {
        running = await startApp(world, "undo daemon", { oneShot: true });
        const { app } = running;
        const start = new Date(Date.now() + 6 * DAY);
        start.setUTCHours(9, 0, 0, 0);
        const id = String(world.booking.create({ therapist_id: "th_1", start_time: start.toISOString() }).id);
        const cal = world.calendarOf("th_1");
        const eventId = eventIdFor(id);
        await app.engine.syncAppointment(id, { reason: "appointment.created", priority: "webhook" });
        await app.poller.poll("th_1");

        // The therapist deletes the event: the appointment is cancelled (write-back).
        world.google.userDelete(cal, eventId);
        await app.poller.poll("th_1");
        await app.engine.idle();
        expect(world.booking.get(id)?.status).toBe("cancelled");
        // Then brings it back (Google's "undo", or restored from the bin): the calendar shows a cancelled appointment.
        world.google.userUndoDelete(cal, eventId);
        await app.poller.poll("th_1");
        await app.engine.idle();
        const afterPoll = stateProblems(world);
        const report = await app.reconcile();
        await app.engine.idle();
        expect({ afterPoll, afterReconcile: stateProblems(world), plan: report.plan.map((a) => a.kind) }).toEqual({
          afterPoll: [],
          afterReconcile: [],
          plan: [],
        });
      } finally {
        await running?.stop();
        await world.close();
      }
    });
  });
}
