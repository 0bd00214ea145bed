// engine.abandon() (a stop, a lost lease) swaps in a new work queue at once and only then waits for the old queue's
// syncs in flight. While a sync of appointment X still ran on the old queue, a new request for X (a poll whose read
// returned before poller.stop(), a reconciliation's next item) ran on the new queue at the same time: two syncs of one
// appointment at once, the older one's write landing last (the event at the old time, and a false "your change was
// undone" note). A key now runs once at a time across queues too.
import { afterEach, expect, it } from "vitest";
import { eventIdFor } from "../../src/calendar/ids.ts";
import { DAY, type Harness, harness } from "./support.ts";

let h: Harness | undefined;
afterEach(async () => {
  await h?.close();
  h = undefined;
});
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

it("never runs two syncs of one appointment at once, also across abandon()", async () => {
  const x = await harness({ therapists: 1 });
  h = x;
  const start = new Date(Date.now() + 3 * DAY);
  start.setUTCHours(10, 0, 0, 0);
  const id = String(
    x.world.booking.create({ therapist_id: "th_1", start_time: start.toISOString() }, { force: true }).id,
  );
  expect((await x.app.engine.settle(id, { reason: "appointment.created", priority: "webhook" })).ok).toBe(true);
  const eventId = eventIdFor(id);
  const write = new RegExp(`^(PUT|PATCH) .*/events/${eventId}$`);

  let release!: () => void;
  const released = new Promise<void>((r) => (release = r));
  let firstHeld = false;
  let secondArrivedWhileFirstHeld = false;
  x.world.google.faults.holdNext(write, async () => {
    firstHeld = true;
    await released;
  });

  x.world.booking.move(id, new Date(start.getTime() + 3_600_000), { force: true });
  const first = x.app.engine.syncAppointment(id, { reason: "appointment.updated", priority: "webhook" });
  for (let i = 0; i < 250 && !firstHeld; i++) await sleep(20);
  expect(firstHeld).toBe(true);
  x.world.google.faults.holdNext(write, async () => {
    secondArrivedWhileFirstHeld = true;
  });

  const abandoned = x.app.engine.abandon(); // waits for the sync in flight
  x.world.booking.move(id, new Date(start.getTime() + 2 * 3_600_000), { force: true });
  const second = x.app.engine.syncAppointment(id, { reason: "appointment.updated", priority: "webhook" });
  for (let i = 0; i < 50 && !secondArrivedWhileFirstHeld; i++) await sleep(20); // 1 s: it began at once before
  const concurrent = secondArrivedWhileFirstHeld;
  release();
  await Promise.allSettled([first, second, abandoned]);
  const ev = x.world.google.event(x.world.calendarOf("th_1"), eventId) as { start?: { dateTime?: string } };
  const finalStart = new Date(ev.start!.dateTime!).getTime();
  expect(concurrent, "a second sync of the appointment ran while the first was in flight").toBe(false);
  // ...and its outcome: the older sync (11:00, held) lands last over the newer (12:00), taking calbridge's own write
  // for a therapist's change ("your change to this event was undone ...").
  expect(new Date(finalStart).toISOString()).toBe(new Date(String(x.world.booking.get(id)!.start_time)).toISOString());
});
