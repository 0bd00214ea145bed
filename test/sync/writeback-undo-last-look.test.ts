// A deletion taken back while its cancellation was on its way: past the grace period, the write-back looks for the
// event in the therapist's other calendars first (a "Change calendar" looks like a deletion), which takes seconds.
// The therapist restores the event meanwhile (Undo, or from the Bin). The cancellation is not sent: the event is
// looked at once more, right before the cancel, and the appointment stays booked.
import { afterEach, describe, expect, it } from "vitest";
import { daemonHarness, type Harness, mirrored, settle } from "./support.ts";

let h: Harness | undefined;
afterEach(async () => {
  await h?.close();
  h = undefined;
});

const cancels = (x: Harness) =>
  x.world.booking.requests.filter((r) => r.route === "POST /v1/appointments/:id/cancel").length;

async function world(): Promise<Harness> {
  return daemonHarness({
    therapists: 1,
    configure: (c) => {
      c.sync = {
        ...c.sync,
        writeback: { cancel_grace_seconds: 0, reschedule_grace_seconds: 0 },
      } as typeof c.sync;
    },
    engine: { maxAttempts: 1, baseMs: 10 },
  });
}

describe("a deletion taken back during the write-back's look-ups", () => {
  it.each([
    ["Undo", "userUndoDelete"],
    ["a restore from the Bin", "userRestoreFromBin"],
  ] as const)(
    "%s while the other calendars are looked at: no cancellation sent, the appointment stays booked",
    async (_, how) => {
      h = await world();
      const m = await mirrored(h);
      const x = h;
      let undone = false;
      // The write-back's look at the account's own calendars (calendarList.list) is held while the therapist acts.
      x.world.google.faults.holdNext(/^GET .*\/users\/me\/calendarList/, async () => {
        x.world.google[how](m.cal, m.eventId);
        undone = true;
      });
      x.world.google.userDelete(m.cal, m.eventId);
      await settle(x);
      expect(undone).toBe(true);
      expect(cancels(x)).toBe(0);
      expect(x.world.booking.get(m.id)?.status).toBe("confirmed");
      expect(x.world.google.event(m.cal, m.eventId)?.status).toBe("confirmed");
      // Quiet afterwards: nothing is sent later for the deletion that was taken back.
      await x.app.reconcile();
      await settle(x);
      expect(cancels(x)).toBe(0);
      expect(x.world.booking.get(m.id)?.status).toBe("confirmed");
    },
  );
});
