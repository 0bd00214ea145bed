// `calbridge writeback held --restore` (its own App on the daemon's store, as the CLI runs it) beside a daemon sync of
// the same appointment. The daemon's sync read the link (naming the deleted event E0) before the CLI's restore wrote
// E1 and linked it; its gate asked the store whether the write-back is held after the CLI had released the hold.
// Nothing serialises the two processes (writeback held takes no lease, the appointment's turn is per process), and the
// daemon's last look read the event the stale link names (E0, still deleted): the appointment the administrator had
// just restored was cancelled in the booking service. The last look reads the record first now (writeback-basis.ts);
// a record changed meanwhile is decided from again (race4). Here cancel_grace_seconds: 0 and a hold older than the
// guard's window; with a grace period the retry read the link again anyway.
import { afterEach, expect, it } from "vitest";
import { eventIdFor } from "../../src/calendar/ids.ts";
import { writebackHeld } from "../../src/cli/writeback-held.ts";
import { ManualClock } from "../../src/clock.ts";
import { createApp } from "../../src/daemon/app.ts";
import { silentLogger } from "../../src/log.ts";
import { waitFor } from "../support/wait-for.ts";
import { cancels, daemonHarness, type Harness, liveOf, mirroredMany, pollAll, quiet } from "./support.ts";

let h: Harness | undefined;
afterEach(async () => {
  await h?.close();
  h = undefined;
});

it("writeback held --restore beside a daemon sync of the same appointment: the restored appointment is not cancelled", async () => {
  const clock = new ManualClock(Date.now());
  const x = await daemonHarness({
    therapists: 2,
    clock,
    configure: (c) => {
      c.sync = { ...c.sync, writeback: { cancel_grace_seconds: 0, reschedule_grace_seconds: 0 } };
    },
  });
  h = x;
  const ids = await mirroredMany(x, clock, 11);
  const cal = x.world.calendarOf("th_1");
  for (const id of ids.slice(0, 10)) x.world.google.userDelete(cal, eventIdFor(id));
  await pollAll(x);
  await quiet(x);
  const held = await x.app.sync.guard.held("th_1");
  expect(held.length).toBeGreaterThan(1);
  const before = cancels(x); // the first ones, under the guard's limit, were sent

  // The administrator looks at it the next day (the guard's 60-minute window is long over).
  await clock.advance(2 * 3_600_000);
  const a = held.at(-1)!.appointmentId;

  // A sync of A in the daemon (a booking webhook, a reconciliation's look-up: anything that asks the engine).
  const links = x.app.sync.fx.links;
  const get = links.get.bind(links);
  let daemonRead = false;
  links.get = async (id: string) => {
    const l = await get(id);
    if (id === a) daemonRead = true;
    return l;
  };
  let cliDone!: () => void;
  const decided = new Promise<void>((r) => (cliDone = r));
  const guard = x.app.sync.guard;
  const isHeld = guard.isHeld.bind(guard);
  guard.isHeld = async (id: string) => {
    if (id === a) await Promise.race([decided, new Promise((r) => setTimeout(r, 5000))]);
    return isHeld(id);
  };
  const daemonSync = x.app.engine.settle(a, {
    reason: "appointment.updated",
    priority: "webhook",
    calendar: { reread: true },
  });
  await waitFor("the daemon's sync to read the link", () => daemonRead, 10_000);

  // `calbridge writeback held --therapist th_1 --restore`, its own App on the daemon's store.
  const cli = await createApp(x.world.config, { logger: silentLogger, oneShot: true, clock });
  let r: Awaited<ReturnType<typeof writebackHeld>> | undefined;
  try {
    r = await writebackHeld(cli, { therapistId: "th_1", decision: "restore" });
  } finally {
    cliDone();
    await cli.stop(2000);
  }
  expect(r!.decided.every((d) => d.ok)).toBe(true);
  expect(r!.decided.find((d) => d.appointmentId === a)?.did).toBe("event put back from the booking");
  expect(liveOf(x, cal, a)).toHaveLength(1); // E1, written by the restore
  await daemonSync.catch(() => {});
  await quiet(x);

  // What the administrator asked: every held deletion put back, nothing cancelled.
  expect(x.world.booking.get(a)?.status).toBe("confirmed");
  expect(cancels(x)).toBe(before);
  const link = await x.app.sync.links.get(a);
  expect(link?.present).toBe(true);
});
