// Two replicas on one store, Google's notifications reaching the standby. The admin re-points a therapist to another
// calendar and reloads the leader first (each replica reloads its own file; the standby's SIGHUP comes next, or its
// reload failed). A notification on the leader's new channel reached the standby, which judged the channel by its own
// mapping (still the old calendar), took it for a channel left on a calendar the therapist no longer has, and dropped
// it: the therapist's change waited for the next periodic poll. Only the leader judges that now; the standby passes
// the notice on as before (review5 of 28e732a).

import { afterEach, expect, it } from "vitest";
import { eventIdFor } from "../../src/calendar/ids.ts";
import type { Config } from "../../src/config/schema.ts";
import { type App, createApp } from "../../src/daemon/app.ts";
import { silentLogger } from "../../src/log.ts";
import { startWorld, type World } from "../../src/simulator/world.ts";
import { waitFor } from "../support/wait-for.ts";

const HOUR = 3_600_000;
const DAY = 24 * HOUR;
const cleanups: (() => Promise<unknown>)[] = [];
afterEach(async () => {
  for (const c of cleanups.splice(0).reverse()) await c().catch(() => {});
});

async function daemon(config: Config): Promise<App> {
  const app = await createApp(config, { logger: silentLogger, listen: "127.0.0.1:0", adminListen: "127.0.0.1:0" });
  let stopped: Promise<void> | undefined;
  cleanups.push(() => (stopped ??= app.stop(3000)));
  await app.start();
  return app;
}

it("the leader's channel on a re-pointed therapist's new calendar: a notification reaching the standby (not reloaded yet) makes the leader poll", async () => {
  const w: World = await startWorld({
    therapists: ["th_a"],
    configure: (c) => {
      c.store = { ...c.store, lease_seconds: 2 };
      c.sync = { ...c.sync, reconcile_cron: "0 0 1 1 *", calendar_poll_seconds: 60 };
      c.google.push = { public_url: "https://127.0.0.1:1/webhooks/google", token: "channel-token-0123456789" };
    },
  });
  cleanups.push(() => w.close());
  w.google.requireHttpsChannels = false;
  const calA = w.calendarOf("th_a");
  const calB = "th_a-new@clinic.test";
  w.google.createCalendar(calB, calA, { timeZone: "Europe/Berlin" });
  const start = new Date(Date.now() + 3 * DAY);
  start.setUTCHours(10, 0, 0, 0);
  const id = String(w.booking.create({ therapist_id: "th_a", start_time: start.toISOString() }, { force: true }).id);

  const configA = structuredClone(w.config);
  const configB = structuredClone(w.config);
  const a = await daemon(configA);
  const b = await daemon(configB);
  expect([a.lease.isLeader, b.lease.isLeader]).toEqual([true, false]);
  await waitFor(
    "the leader to mirror the booking",
    () => w.google.events(calA).some((e) => e.id === eventIdFor(id)),
    10_000,
  );

  // The load balancer sends Google's notifications to the standby; the admin re-points th_a and reloads the leader
  // first (the standby's SIGHUP comes next, or its reload failed).
  configA.google.push!.public_url = `${b.http!.url}/webhooks/google`;
  const next = structuredClone(configA);
  next.therapists[0]!.calendar_id = calB;
  await a.reload(next);
  await waitFor(
    "the leader to open a channel on the new calendar and move the event there",
    () =>
      [...w.google.channels.values()].some((c) => c.address === configA.google.push!.public_url) &&
      w.google.events(calB).some((e) => e.id === eventIdFor(id) && e.status !== "cancelled"),
    10_000,
  );
  await w.google.settleNotifications();
  await a.engine.idle();
  const polledAt = a.poller.lastPollAt("th_a") ?? 0;

  // The therapist moves the event in the new calendar; Google notifies the new channel, the standby gets it.
  w.google.userEdit(calB, eventIdFor(id), {
    start: { dateTime: new Date(start.getTime() + HOUR).toISOString() },
    end: { dateTime: new Date(start.getTime() + 2 * HOUR).toISOString() },
  });
  const deliveries = await w.google.notify(calB);
  expect(deliveries.map((d) => d.status)).toEqual([200]);
  const metrics = await (await fetch(`${b.admin!.url}/metrics`)).text();
  // Not dropped as a channel "elsewhere" by the standby (its own mapping still names the old calendar).
  expect(metrics).not.toMatch(/calbridge_push_notifications_total\{result="elsewhere"\} [1-9]/);
  // The leader hears of it (a notice) and polls th_a's calendar within seconds, not at its next periodic poll.
  await waitFor("the leader to poll the new calendar", () => (a.poller.lastPollAt("th_a") ?? 0) > polledAt, 5000);
}, 40_000);
