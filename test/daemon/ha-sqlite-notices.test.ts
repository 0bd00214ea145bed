// Two daemons on one SQLite store file, the standby reached by what the load balancer sends it: a booking webhook it
// accepts, a Google push notification it acknowledges. The leader hears of both through the file's notices within a
// second or so, as Redis replicas do through pub/sub, instead of at its inbox sweep (30 s) or at its next calendar poll
// (a minute here, up to push_safety_poll_minutes with a confirmed channel). Real Apps, real HTTP, one file.
import { performance } from "node:perf_hooks";
import { afterEach, describe, expect, it } from "vitest";
import { eventIdFor } from "../../src/calendar/ids.ts";
import type { ConfigInput } from "../../src/config/schema.ts";
import { type App, createApp } from "../../src/daemon/app.ts";
import { silentLogger } from "../../src/log.ts";
import { startWorld, type World } from "../../src/simulator/world.ts";
import { deliver } from "../support/deliver.ts";

const LEASE_SECONDS = 2;
const HOUR = 3_600_000;
const DAY = 24 * HOUR;
const TOKEN = "channel-token-0123456789";
/** Well under the inbox sweep and the calendar poll, well over the notices' one-second read. */
const PROMPTLY_MS = 5000;

const cleanups: (() => Promise<unknown>)[] = [];
afterEach(async () => {
  for (const c of cleanups.splice(0).reverse()) await c().catch(() => {});
});

async function waitFor(what: string, predicate: () => boolean | Promise<boolean>, timeoutMs: number): Promise<void> {
  const start = performance.now();
  while (!(await predicate())) {
    if (performance.now() - start > timeoutMs) throw new Error(`timed out after ${timeoutMs} ms waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 20));
  }
}

async function world(configure?: (c: ConfigInput) => void): Promise<World> {
  const w = await startWorld({
    therapists: ["th_a"],
    configure: (c) => {
      c.store = { ...c.store, lease_seconds: LEASE_SECONDS };
      // No cron run, no poll within the test: only a notice can explain the leader acting within seconds.
      c.sync = {
        ...c.sync,
        reconcile_cron: "0 0 1 1 *",
        calendar_poll_seconds: 60,
        writeback: { reschedule_grace_seconds: 0 },
      };
      configure?.(c);
    },
  });
  cleanups.push(() => w.close());
  return w;
}

/** A daemon on the world's SQLite file, its inbox sweep at the default 30 s. */
async function daemon(w: World): Promise<App> {
  const app = await createApp(w.config, { logger: silentLogger, listen: "127.0.0.1:0", adminListen: "127.0.0.1:0" });
  let stopped: Promise<void> | undefined;
  cleanups.push(() => (stopped ??= app.stop(3000)));
  await app.start();
  return app;
}

const mirrored = (w: World, appointmentId: string) =>
  w.google.events(w.calendarOf("th_a")).some((e) => {
    const props = (e.extendedProperties as { private?: Record<string, string> } | undefined)?.private;
    return props?.calbridge_appointment_id === appointmentId && e.status !== "cancelled";
  });

describe("two daemons on one SQLite file: what reaches the standby reaches the leader at once", () => {
  it("a webhook accepted by the standby is applied by the leader within seconds, not at its 30 s sweep", async () => {
    const w = await world();
    const a = await daemon(w);
    const b = await daemon(w);
    expect([a.lease.isLeader, b.lease.isLeader]).toEqual([true, false]);
    // The start-up reconciliation is over: what comes next comes by webhook only.
    await waitFor("the leader's first reconciliation", async () => (await a.status()).lastReconcileAt !== null, 10_000);

    const start = new Date(Date.now() + 30 * HOUR);
    start.setUTCMinutes(0, 0, 0);
    const appt = w.booking.create({ therapist_id: "th_a", start_time: start.toISOString() }, { force: true });
    const id = String(appt.id);
    const event = [...w.booking.events]
      .reverse()
      .find((e) => e.type === "appointment.created" && (e.data as { object: { id?: unknown } }).object.id === id);
    expect(await deliver(b, event!)).toEqual({ status: 200, body: { received: true } });
    await waitFor("the leader to apply the webhook the standby accepted", () => mirrored(w, id), PROMPTLY_MS);
    // The leader's processor, not the standby's (which runs none).
    await waitFor("the inbox to be empty", () => a.inbox.pendingCount === 0, PROMPTLY_MS);
    expect(b.lease.isLeader).toBe(false);
  }, 30_000);

  it("a push notification acknowledged by the standby makes the leader poll that calendar now", async () => {
    const w = await world((c) => {
      // Nothing listens there: the channel the leader opens at start is re-pointed at the standby below.
      c.google.push = { public_url: "https://127.0.0.1:1/webhooks/google", token: TOKEN };
    });
    w.google.requireHttpsChannels = false;
    const start = new Date(Date.now() + 3 * DAY);
    start.setUTCHours(10, 0, 0, 0);
    const appt = w.booking.create({ therapist_id: "th_a", start_time: start.toISOString() }, { force: true });
    const id = String(appt.id);
    const cal = w.calendarOf("th_a");
    const a = await daemon(w);
    const b = await daemon(w);
    expect([a.lease.isLeader, b.lease.isLeader]).toEqual([true, false]);
    await waitFor(
      "the leader to mirror the booking, poll once and open a channel",
      () => w.google.events(cal).some((e) => e.id === eventIdFor(id)) && a.poller.lastPollAt("th_a") !== undefined,
      10_000,
    );
    // The leader opens a channel whose notifications go to the standby (as a load balancer may send them).
    w.config.google.push!.public_url = `${b.http!.url}/webhooks/google`;
    await a.push.renew(Date.now() + 8 * DAY);
    const channels = [...w.google.channels.values()].filter((c) => c.address === w.config.google.push!.public_url);
    expect(channels).toHaveLength(1);
    // Google's first message reached the standby before the leader heard back from its watch call: the standby knew
    // the channel from the entry the leader stored before the call (as on Redis), and acknowledged it.
    expect(w.google.deliveries.filter((d) => d.channelId === channels[0]!.id).map((d) => [d.state, d.status])).toEqual([
      ["sync", 200],
    ]);

    const polledAt = a.poller.lastPollAt("th_a")!;
    // The therapist moves the event an hour later in Google Calendar; the leader's poll writes the move back.
    w.google.userEdit(cal, eventIdFor(id), {
      start: { dateTime: new Date(start.getTime() + HOUR).toISOString() },
      end: { dateTime: new Date(start.getTime() + 2 * HOUR).toISOString() },
    });
    const deliveries = await w.google.notify(cal);
    expect(deliveries.filter((d) => d.channelId === channels[0]!.id).map((d) => d.status)).toEqual([200]);
    const movedBack = () => Date.parse(String(w.booking.get(id)!.start_time)) === start.getTime() + HOUR;
    await waitFor(
      "the leader to poll the calendar and write the move back",
      () => movedBack() && a.poller.lastPollAt("th_a")! > polledAt,
      PROMPTLY_MS,
    );
    // The standby acknowledged and polled nothing itself.
    expect(b.poller.lastPollAt("th_a")).toBeUndefined();
    expect(w.booking.requests.filter((r) => r.method === "PATCH")).toHaveLength(1);
  }, 30_000);
});
