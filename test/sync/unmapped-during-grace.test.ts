// A therapist deletes an event; while the deletion waits out its grace period (60 s), an administrator's reload takes
// the therapist out of the mapping. The wait ends while they are unmapped: calbridge neither writes their calendar nor
// writes back from it, so the deletion is neither sent nor put back then. What becomes of it when they are mapped again?
// The deletion was made while calbridge watched the calendar: it is the therapist's. Mapped again while it is still
// within its grace period (a mistake put right at once), its wait goes on and it is sent. Mapped again later, it is not
// sent (nobody watched meanwhile: the event may have been brought back and deleted again, the booking changed), but
// the event must not come back without a word, as if the therapist's deletion had never happened: it comes back with a
// note saying the deletion was not sent and why. Never mapped again, nothing is cancelled and nothing is deleted.
// A production daemon (not one-shot): only the leader of a running daemon settles the watches on a reload (watched.ts).
import { afterEach, expect, it } from "vitest";
import { eventIdFor } from "../../src/calendar/ids.ts";
import { ManualClock } from "../../src/clock.ts";
import type { Config } from "../../src/config/schema.ts";
import { createApp } from "../../src/daemon/app.ts";
import { silentLogger } from "../../src/log.ts";
import { startWorld, WORLD_WEBHOOK_SECRET } from "../../src/simulator/world.ts";
import { cancels, type Harness, liveOf, mirroredMany, pass, pollAll, quiet } from "./support.ts";

let h: Harness | undefined;
afterEach(async () => {
  await h?.close();
  h = undefined;
});

/** Like daemonHarness, but a running daemon's leader (daemonHarness's is one-shot: its reloads settle no watches). */
async function runningDaemon(clock: ManualClock): Promise<Harness> {
  const world = await startWorld({ therapists: 2, clock });
  const app = await createApp(world.config, {
    clock,
    logger: silentLogger,
    listen: "127.0.0.1:0",
    adminListen: "127.0.0.1:0",
  });
  const live = (t: string) => world.google.events(world.calendarOf(t)).filter((e) => e.status !== "cancelled");
  const x: Harness = {
    world,
    app,
    live,
    allLive: () => world.therapists.flatMap((t) => live(t)),
    writes: () => world.google.writes,
    async close() {
      await app.stop(2000).catch(() => {});
      await world.close();
    },
  };
  h = x;
  await app.start();
  world.booking.addWebhookEndpoint({
    url: `${app.http!.url}${world.config.webhooks.path}`,
    secret: WORLD_WEBHOOK_SECRET,
    events: ["*"],
  });
  return x;
}

const without = (config: Config, therapistId: string): Config => {
  const next = structuredClone(config);
  next.therapists = next.therapists.filter((t) => t.therapist_id !== therapistId);
  return next;
};

/** th_1's appointment mirrored, its event deleted by the therapist and seen, then th_1 removed 5 s into the wait. */
async function deletedThenRemoved(clock: ManualClock) {
  const x = await runningDaemon(clock);
  const original = structuredClone(x.world.config);
  const [id] = await mirroredMany(x, clock, 1);
  const cal = x.world.calendarOf("th_1");
  x.world.google.userDelete(cal, eventIdFor(id!));
  await pollAll(x);
  await pass(x, clock, 5_000);
  expect(cancels(x)).toBe(0); // waiting out its grace period
  await x.app.reload(without(original, "th_1"));
  await quiet(x);
  return { x, id: id!, cal, original };
}

/** What the calendar and the booking show of the appointment after a reconciliation. */
async function outcome(x: Harness, id: string, cal: string) {
  await x.app.reconcile();
  await quiet(x);
  const live = liveOf(x, cal, id);
  return {
    cancels: cancels(x),
    status: x.world.booking.get(id)?.status,
    live: live.length,
    note: live.map((e) => String(e.description ?? "").match(/calbridge: .*/)?.[0] ?? "no note")[0],
  };
}

it("mapped again within the grace period: the wait goes on, and the deletion is sent", async () => {
  const clock = new ManualClock(Date.now());
  const { x, id, cal, original } = await deletedThenRemoved(clock);
  await pass(x, clock, 5_000);
  await x.app.reload(structuredClone(original));
  await quiet(x);
  await pass(x, clock, 120_000);
  expect(await outcome(x, id, cal)).toEqual({ cancels: 1, status: "cancelled", live: 0, note: undefined });
}, 60_000);

it("a bulk deletion, th_1 removed and mapped again within its grace period: the guard counts all of it and holds it", async () => {
  // guard-remove-readd.test.ts over a running daemon, whose reloads settle the watches: the deletions' waits go on.
  const clock = new ManualClock(Date.now());
  const x = await runningDaemon(clock);
  const original = structuredClone(x.world.config);
  const ids = await mirroredMany(x, clock, 10);
  const cal = x.world.calendarOf("th_1");
  for (const id of ids) x.world.google.userDelete(cal, eventIdFor(id));
  await pollAll(x);
  await pass(x, clock, 5_000);
  await x.app.reload(without(original, "th_1"));
  await x.app.reload(structuredClone(original));
  await quiet(x);
  await pass(x, clock, 120_000);
  const held = (await x.app.sync.guard.held("th_1")).length;
  expect({ cancels: cancels(x), held, live: x.live("th_1").length }).toEqual({ cancels: 0, held: 10, live: 0 });
}, 60_000);

it("mapped again after the grace period ended: nothing sent, the event back with a note saying why", async () => {
  const clock = new ManualClock(Date.now());
  const { x, id, cal, original } = await deletedThenRemoved(clock);
  await pass(x, clock, 120_000);
  await x.app.reconcile();
  await quiet(x);
  expect(cancels(x)).toBe(0);
  await x.app.reload(structuredClone(original));
  await quiet(x);
  await pass(x, clock, 120_000);
  const got = await outcome(x, id, cal);
  expect(got).toMatchObject({ cancels: 0, status: "confirmed", live: 1 });
  // Not "made while calbridge was not syncing this calendar": it was made while calbridge watched it.
  expect(got.note).toMatch(
    /still waiting to be sent when an administrator took your calendar out of the calbridge mapping, so it was never sent/,
  );
}, 60_000);

it("never mapped again: nothing cancelled, nothing written in the calendar", async () => {
  const clock = new ManualClock(Date.now());
  const { x, id, cal } = await deletedThenRemoved(clock);
  const writes = x.writes();
  await pass(x, clock, 120_000);
  await x.app.reconcile();
  await quiet(x);
  await pass(x, clock, 60_000);
  expect({ ...(await outcome(x, id, cal)), writes: x.writes() - writes }).toEqual({
    cancels: 0,
    status: "confirmed",
    live: 0,
    note: undefined,
    writes: 0,
  });
}, 60_000);
