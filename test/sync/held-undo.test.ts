// Tests an Undo inside a held bulk deletion. A therapist deletes five events at once: the write-back guard holds the
// five cancellations. Restoring one of them from the bin brought back an event equal to what calbridge last wrote,
// so the poll took it for an echo and skipped it: its hold stayed open (in /status, writebacks_held, doctor and the
// notification) until the next reconciliation. The poll now syncs a live event whose write-back is held, and that
// sync releases its hold at once; nothing is sent to the booking service.
import { afterEach, expect, it } from "vitest";
import { eventIdFor } from "../../src/calendar/ids.ts";
import { ManualClock } from "../../src/clock.ts";
import { cancels, DAY, daemonHarness, type Harness, pass, pollAll, quiet } from "./support.ts";

let h: Harness | undefined;
afterEach(async () => {
  await h?.close();
  h = undefined;
});

it("restoring one event of a held bulk deletion releases its hold at the next poll, sending nothing", async () => {
  const clock = new ManualClock(Date.now());
  const x = await daemonHarness({ therapists: 2, clock });
  h = x;
  const ids: string[] = [];
  for (let i = 0; i < 10; i++) {
    const start = new Date(clock.now() + (i + 2) * DAY);
    start.setUTCHours(10, 0, 0, 0);
    ids.push(
      String(x.world.booking.create({ therapist_id: "th_1", start_time: start.toISOString() }, { force: true }).id),
    );
  }
  await quiet(x);
  await x.app.reconcile();
  await pollAll(x);
  const cal = x.world.calendarOf("th_1");
  for (const id of ids.slice(0, 5)) x.world.google.userDelete(cal, eventIdFor(id));
  await pollAll(x);
  await pass(x, clock, 90_000); // past the grace period: the guard decides, and holds them
  await pollAll(x);
  expect((await x.app.sync.guard.held("th_1")).length).toBe(5);
  expect(x.app.sync.guard.counts.get("th_1")).toBe(5);

  x.world.google.userRestoreFromBin(cal, eventIdFor(ids[0]!));
  await pollAll(x);
  await quiet(x);
  const held = (await x.app.sync.guard.held("th_1")).map((w) => w.appointmentId);
  expect(held.sort()).toEqual(ids.slice(1, 5).sort());
  expect(x.app.sync.guard.counts.get("th_1")).toBe(4);
  expect(cancels(x)).toBe(0);
  expect(x.world.booking.get(ids[0]!)!.status).toBe("confirmed");
  expect(x.world.google.event(cal, eventIdFor(ids[0]!))?.status).toBe("confirmed");
});
