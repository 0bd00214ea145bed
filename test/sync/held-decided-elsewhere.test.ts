// Tests holds an administrator decides with `calbridge writeback held` in its own process, beside the daemon (the CLI
// opens its own App on the daemon's store). After a held wipe was restored that way, the daemon went on counting the
// wipe's deletions in its memory (the restored events' syncs end as echoes, which settle nothing): the therapist's next
// single deletion was held again ("11 calendar changes of th_1 would be written back within 60 min (limit 3)") and
// the administrator told again. The daemon now forgets what it knew held once the store no longer holds it; what
// --apply sent still counts (the store keeps the list of those sent), and a new wipe is held as before.
import { afterEach, expect, it } from "vitest";
import { eventIdFor } from "../../src/calendar/ids.ts";
import { writebackHeld } from "../../src/cli/writeback-held.ts";
import { ManualClock } from "../../src/clock.ts";
import { createApp } from "../../src/daemon/app.ts";
import { silentLogger } from "../../src/log.ts";
import { cancels, daemonHarness, type Harness, mirroredMany, pass, pollAll } from "./support.ts";

let h: Harness | undefined;
afterEach(async () => {
  await h?.close();
  h = undefined;
});

/** th_1 has `count` appointments mirrored; the first `wiped` events are deleted at once and held by the guard. */
async function heldWipe(count: number, wiped: number) {
  const clock = new ManualClock(Date.now());
  const x = await daemonHarness({ therapists: 2, clock });
  h = x;
  const ids = await mirroredMany(x, clock, count);
  const cal = x.world.calendarOf("th_1");
  for (const id of ids.slice(0, wiped)) x.world.google.userDelete(cal, eventIdFor(id));
  await pollAll(x);
  await pass(x, clock, 90_000); // past the grace period: the guard decides, and holds them
  expect((await x.app.sync.guard.held("th_1")).length).toBe(wiped);
  // The event as the link names it now (a restored event is written again under the next generation of its id).
  const del = async (from: number, to: number) => {
    for (const id of ids.slice(from, to)) x.world.google.userDelete(cal, (await x.app.sync.links.get(id))!.eventId);
    await pollAll(x);
    await pass(x, clock, 90_000);
  };
  return { x, clock, ids, del };
}

/** `calbridge writeback held --therapist th_1 --<decision>` in its own App, then the daemon's 30-second count. */
async function decideElsewhere(x: Harness, clock: ManualClock, decision: "apply" | "restore") {
  const cli = await createApp(x.world.config, { logger: silentLogger, oneShot: true, clock });
  try {
    const r = await writebackHeld(cli, { therapistId: "th_1", decision });
    expect(r.decided.every((d) => d.ok)).toBe(true);
  } finally {
    await cli.stop(2000);
  }
  await x.app.sync.guard.refreshAll(["th_1", "th_2"]);
  await pollAll(x); // the restored events are calbridge's own writes: echoes
  await pass(x, clock, 10 * 60_000, 60_000);
}

it("after a held wipe is restored from the CLI, the therapist's next single deletion is cancelled, not held", async () => {
  const { x, clock, ids, del } = await heldWipe(11, 10);
  await decideElsewhere(x, clock, "restore");
  expect(cancels(x)).toBe(0);
  expect(x.world.google.events(x.world.calendarOf("th_1")).filter((e) => e.status !== "cancelled")).toHaveLength(11);

  await del(10, 11); // one deletion the therapist means, within the guard's window of the wipe
  expect((await x.app.sync.guard.held("th_1")).map((w) => w.reason)).toEqual([]);
  expect(cancels(x)).toBe(1);
  expect(x.world.booking.get(ids[10]!)?.status).toBe("cancelled");
});

it("a second wipe after a restore from the CLI is held again, from its own count", async () => {
  const { x, clock, del } = await heldWipe(11, 6);
  await decideElsewhere(x, clock, "restore");
  await del(0, 4); // four of the restored events deleted again: more than the floor of 3
  const held = await x.app.sync.guard.held("th_1");
  expect(held.map((w) => w.reason).sort()).toEqual([
    "4 calendar changes of th_1 would be written back within 60 min (limit 3)",
    ...Array(3).fill("joined the open hold of th_1"),
  ]);
  expect(cancels(x)).toBe(0);
});

it("cancellations applied from the CLI still count: the therapist's next deletion within the window is held", async () => {
  const { x, clock, del } = await heldWipe(11, 6);
  await decideElsewhere(x, clock, "apply");
  expect(cancels(x)).toBe(6);
  await del(6, 7);
  const held = await x.app.sync.guard.held("th_1");
  expect(held.map((w) => w.reason)).toEqual([
    "7 calendar changes of th_1 would be written back within 60 min (limit 3)",
  ]);
  expect(cancels(x)).toBe(6);
});
