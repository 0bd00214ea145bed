// A therapist's deletion is never sent because of a watch calbridge did not keep: a therapist taken out of the mapping
// (by a live reload, or in the file while the daemon was stopped) and mapped again has what was deleted meanwhile put
// back, not cancelled at the booking service. Kept as regression tests of an attempt (07d2410, reverted) to send a
// deletion still waiting out its grace period when the therapist was removed: dated by Google's `updated` against a
// watch's end on calbridge's clock, it sent deletions made while unmapped across a restart (the end taken at the start)
// and with calbridge's clock 30 s ahead of Google's (review11).
import { afterEach, expect, it } from "vitest";
import { eventIdFor } from "../../src/calendar/ids.ts";
import { ManualClock } from "../../src/clock.ts";
import type { App } from "../../src/daemon/app.ts";
import { startWorld, type World } from "../../src/simulator/world.ts";
import { cancels, mirroredOne, passApp, quietApp, runningWorld, startApp, without } from "./running-daemon.ts";

let world: World | undefined;
let apps: App[] = [];
afterEach(async () => {
  for (const a of apps) await a.stop(2000).catch(() => {});
  apps = [];
  await world?.close();
  world = undefined;
});

it("removed across a restart, deletion made while unmapped, mapped again within grace: must not be sent", async () => {
  const clock = new ManualClock(Date.now());
  const r = await runningWorld(clock, { cancel_grace_seconds: 3600 });
  world = r.world;
  apps.push(r.app);
  const original = structuredClone(r.world.config);
  const id = await mirroredOne(r.world, r.app, clock);
  await r.app.stop(2000); // stopped; the admin edits the file: th_1 out of the mapping
  await clock.advance(60_000);
  // th_1, now unmapped (and nobody syncing), cleans calbridge's event away.
  r.world.google.userDelete(r.world.calendarOf("th_1"), eventIdFor(id));
  await clock.advance(5_000);
  const b = await startApp(r.world, without(original, "th_1"), clock); // started with th_1 unmapped
  apps.push(b);
  await quietApp(r.world, b);
  await passApp(r.world, b, clock, 60_000);
  await b.reload(structuredClone(original)); // mapped again, 65 s after the deletion (grace 3600 s)
  await quietApp(r.world, b);
  await passApp(r.world, b, clock, 7_200_000, 60_000);
  await b.reconcile();
  await quietApp(r.world, b);
  expect({ cancels: cancels(r.world), status: r.world.booking.get(id)?.status }).toEqual({
    cancels: 0,
    status: "confirmed",
  });
}, 120_000);

it("control: removed by a live reload, deletion made while unmapped, mapped again within grace: put back", async () => {
  const clock = new ManualClock(Date.now());
  const r = await runningWorld(clock, { cancel_grace_seconds: 3600 });
  world = r.world;
  apps.push(r.app);
  const original = structuredClone(r.world.config);
  const id = await mirroredOne(r.world, r.app, clock);
  await r.app.reload(without(original, "th_1"));
  await quietApp(r.world, r.app);
  await clock.advance(60_000);
  r.world.google.userDelete(r.world.calendarOf("th_1"), eventIdFor(id));
  await passApp(r.world, r.app, clock, 65_000);
  await r.app.reload(structuredClone(original));
  await quietApp(r.world, r.app);
  await passApp(r.world, r.app, clock, 7_200_000, 60_000);
  await r.app.reconcile();
  await quietApp(r.world, r.app);
  expect({ cancels: cancels(r.world), status: r.world.booking.get(id)?.status }).toEqual({
    cancels: 0,
    status: "confirmed",
  });
}, 120_000);

it("a deletion made 20 s after the therapist was unmapped is not sent when they are mapped again", async () => {
  const t0 = Date.now();
  const google = new ManualClock(t0); // Google's (and the booking service's) clock
  const ours = new ManualClock(t0 + 30_000); // the daemon's, 30 s ahead
  const pass = async (ms: number, step = 5_000) => {
    for (let t = 0; t < ms; t += step) {
      const d = Math.min(step, ms - t);
      await google.advance(d);
      await ours.advance(d);
      await quietApp(world!, app);
    }
  };
  world = await startWorld({ therapists: 2, clock: google });
  const app = await startApp(world, world.config, ours);
  apps.push(app);
  const original = structuredClone(world.config);
  const s = new Date(google.now() + 3 * 86_400_000);
  s.setUTCHours(10, 0, 0, 0);
  const id = String(world.booking.create({ therapist_id: "th_1", start_time: s.toISOString() }, { force: true }).id);
  await quietApp(world, app);
  await app.reconcile();
  for (const t of world.therapists) await app.poller.poll(t);
  await quietApp(world, app);
  const cal = world.calendarOf("th_1");
  expect(world.google.event(cal, eventIdFor(id))?.status).toBe("confirmed");
  await pass(60_000); // links older than any watch starting now

  await app.reload(without(original, "th_1")); // until = U (our clock)
  await quietApp(world, app);
  await pass(20_000);
  world.google.userDelete(cal, eventIdFor(id)); // made while unmapped; updated = U - 10 s on Google's clock
  await pass(20_000);
  await app.reload(structuredClone(original)); // mapped again at U + 40 s
  await quietApp(world, app);
  await pass(600_000, 10_000);
  await app.reconcile();
  await quietApp(world, app);
  const ev = world.google.event(cal, eventIdFor(id));
  expect({
    cancels: cancels(world),
    status: world.booking.get(id)?.status,
    event: ev?.status,
    note: String(ev?.description ?? "").match(/calbridge: .*/)?.[0],
  }).toMatchObject({ cancels: 0, status: "confirmed" });
}, 120_000);
