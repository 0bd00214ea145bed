// A daemon whose configuration is reloaded for months, therapists joining and leaving, keeps nothing of a therapist
// the reload took out of the mapping: their sync activity, managed-event count, write-backs wanted lately, owned-
// calendar list (which held the retired gateway), full-listing times, poll state and push channel health each stayed
// for the process's life, one entry (or a whole gateway) per therapist ever removed. A live daemon over the
// simulators, push on, through 41 reloads that each map a new therapist (who books, deletes an event that is written
// back, gets a push notification, is reconciled; every other one's channel refused) and remove the one before.
import { afterEach, expect, it } from "vitest";
import { eventIdFor } from "../../src/calendar/ids.ts";
import { type App, createApp } from "../../src/daemon/app.ts";
import { silentLogger } from "../../src/log.ts";
import { startWorld, WORLD_WEBHOOK_SECRET, type World } from "../../src/simulator/world.ts";
import { freePort } from "../support/ports.ts";
import { waitFor } from "../support/wait-for.ts";

const DAY = 86_400_000;
const CYCLES = 41; // the last one added (kept) has a channel
const cleanups: (() => Promise<unknown>)[] = [];
afterEach(async () => {
  for (const c of cleanups.splice(0).reverse()) await c().catch(() => {});
});

async function daemon(): Promise<{ world: World; app: App }> {
  const port = await freePort();
  const world = await startWorld({
    therapists: 2,
    webhookTimeScale: 1 / 60_000,
    configure: (c) => {
      c.google.push = { public_url: `http://127.0.0.1:${port}/webhooks/google` };
      c.sync = {
        ...c.sync,
        calendar_poll_seconds: 300,
        writeback: { cancel_grace_seconds: 0, reschedule_grace_seconds: 0 },
      };
    },
  });
  cleanups.push(() => world.close());
  world.google.requireHttpsChannels = false;
  const app = await createApp(structuredClone(world.config), {
    logger: silentLogger,
    listen: `127.0.0.1:${port}`,
    adminListen: "127.0.0.1:0",
  });
  cleanups.push(() => app.stop(3000));
  await app.start();
  world.booking.addWebhookEndpoint({
    url: `${app.http!.url}/webhooks/booking`,
    secret: WORLD_WEBHOOK_SECRET,
    events: ["*"],
  });
  return { world, app };
}

it("a reload that removes a therapist releases what the daemon kept of them", async () => {
  const { world, app } = await daemon();
  const removed: string[] = [];
  let previous: string | undefined;
  for (let i = 1; i <= CYCLES; i++) {
    const id = `th_new${i}`;
    const cal = world.calendarOf(id);
    world.google.createCalendar(cal, cal, { timeZone: "Europe/Berlin" });
    world.booking.addTherapist(id);
    // Every other new calendar's push channel is refused: its renewal failure is kept for /status, no channel stored.
    if (i % 2 === 0)
      world.google.faults.next(1000, {
        status: 400,
        reason: "invalid",
        match: new RegExp(`new${i}%40clinic\\.test/events/watch`),
      });
    const next = structuredClone(app.config);
    next.therapists = next.therapists.filter((t) => t.therapist_id !== previous);
    next.therapists.push({ ...next.therapists[0]!, therapist_id: id, calendar_id: cal, impersonate: cal });
    await app.reload(next);
    if (previous) removed.push(previous);
    previous = id;
    await app.push.renew();
    expect(app.pushHealth.lastRenewalFailure(id) !== undefined).toBe(i % 2 === 0);

    const start = Date.now() + 2 * DAY + i * 3_600_000;
    const appt = String(
      world.booking.create({ therapist_id: id, start_time: new Date(start).toISOString() }, { force: true }).id,
    );
    await waitFor("the new therapist's event", () => world.google.event(cal, eventIdFor(appt)) !== undefined);
    world.google.userDelete(cal, eventIdFor(appt));
    await world.google.notify(cal); // nothing where the channel was refused: the poll below reads it there
    await app.poller.poll(id);
    await waitFor("the deletion written back", () => world.booking.get(appt)?.status === "cancelled");
    if (i % 4 === 0) await app.reconcile();
    await app.engine.idle();
  }

  // Each removed therapist had something kept of them (the last ones added show it while mapped).
  const last = previous!;
  expect(app.sync.activity.of(last)?.writebacks).toBe(1);
  expect(app.pushHealth.lastNotifiedAt(last)).toBeDefined();
  expect(app.poller.lastPollAt(last)).toBeDefined();

  expect(removed).toHaveLength(CYCLES - 1);
  const kept = (has: (id: string) => boolean) => removed.filter(has);
  expect.soft(kept((id) => app.sync.activity.of(id) !== undefined)).toEqual([]);
  expect.soft(kept((id) => app.sync.managed.has(id))).toEqual([]);
  expect.soft(kept((id) => app.poller.lastPollAt(id) !== undefined)).toEqual([]);
  expect.soft(kept((id) => app.pushHealth.lastNotifiedAt(id) !== undefined)).toEqual([]);
  expect.soft(kept((id) => app.pushHealth.lastRenewalFailure(id) !== undefined)).toEqual([]);
  expect.soft(kept((id) => app.pushHealth.channel(id) !== undefined)).toEqual([]);
  const mapped = app.config.therapists.length;
  expect.soft(app.sync.fx.ownLists.size).toBeLessThanOrEqual(mapped);
  expect.soft(app.sync.guard.intentsKept).toBeLessThanOrEqual(mapped);
  expect.soft(app.listings.size).toBeLessThanOrEqual(mapped);
}, 300_000);
