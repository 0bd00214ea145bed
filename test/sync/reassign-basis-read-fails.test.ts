// A therapist's move of an event to a colleague's calendar ("Change calendar", writeback.reassign on) whose last look
// at the appointment before the reassignment (writeback-basis.ts) fails on the write-back's last attempt: answered as a
// failed PATCH is, the copy in the colleague's calendar removed and the event put back saying the move was not applied,
// never two live events, nor a note about a "deletion" the therapist did not make.
import { afterEach, expect, it } from "vitest";
import { daemonHarness, type Harness, liveOf, mirrored, settle } from "./support.ts";

let h: Harness | undefined;
afterEach(async () => {
  await h?.close();
  h = undefined;
});

it("a reassignment whose last look fails on the last attempt leaves one event, in the therapist's own calendar", async () => {
  h = await daemonHarness({
    therapists: 2,
    configure: (c) => {
      c.sync = { ...c.sync, writeback: { cancel_grace_seconds: 0, reschedule_grace_seconds: 0, reassign: true } };
    },
    engine: { maxAttempts: 1, baseMs: 10 },
  });
  const m = await mirrored(h);
  const mine = new RegExp(`^/v1/appointments/${m.id}$`);
  let gets = 0;
  // The sync's own read passes; the last look (the second GET) and its retries are answered 503.
  h.world.booking.faults.failNext(6, 503, { method: "GET", path: mine, when: () => ++gets >= 2 });
  h.world.google.userMove(m.cal, m.eventId, h.world.calendarOf("th_2"));
  await settle(h);
  expect(gets).toBeGreaterThanOrEqual(2);
  expect(h.world.booking.requests.filter((r) => r.method === "PATCH")).toHaveLength(0);
  expect(h.world.booking.get(m.id)?.therapist_id).toBe("th_1");
  expect(liveOf(h, h.world.calendarOf("th_2"), m.id)).toHaveLength(0);
  const own = liveOf(h, m.cal, m.id);
  expect(own).toHaveLength(1);
  const note = String(own[0]?.description ?? "");
  expect(note).toContain("your move of this appointment to the calendar of another therapist was not applied");
  expect(note).not.toContain("deletion");
});
