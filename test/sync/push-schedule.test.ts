// Push first, polling as a slow safety net: notifications for one calendar are coalesced (one incremental sync in
// flight, at most one queued); a calendar whose channel Google confirmed is polled only every
// sync.push_safety_poll_minutes (give or take a quarter), one without a working channel every calendar_poll_seconds;
// a change the channel did not announce is still found by the safety poll, and puts the calendar back on the short
// interval until a new channel is confirmed. Time on the manual clock; notifications over real HTTP.
import { request } from "undici";
import { afterEach, describe, expect, it } from "vitest";
import { eventIdFor } from "../../src/calendar/ids.ts";
import { ManualClock } from "../../src/clock.ts";
import type { RequestLogEntry } from "../../src/simulator/calendar/index.ts";
import { DAY, type Harness, harness, iso } from "./support.ts";

let h: Harness | undefined;
afterEach(async () => {
  h?.app.poller.stop();
  h?.app.push.stop();
  await h?.close();
  h = undefined;
});

const MINUTE = 60_000;

/** Waits (real time) until `done()` holds. */
async function until(done: () => boolean, ms = 5_000): Promise<void> {
  for (let t = 0; t < ms && !done(); t += 10) await new Promise((r) => setTimeout(r, 10));
  expect(done()).toBe(true);
}

/** A world with push on, the daemon's route reachable by the emulator, and one appointment mirrored for th_1. */
async function pushWorld(options: { clock?: ManualClock; latencyMs?: number } = {}) {
  h = await harness({
    therapists: 2,
    ...(options.clock ? { clock: options.clock } : {}),
    ...(options.latencyMs ? { google: { latencyMs: options.latencyMs } } : {}),
    configure: (c) => {
      c.google.push = { public_url: "https://sync.example/webhooks/google" };
      c.sync = { calendar_poll_seconds: 60, push_safety_poll_minutes: 20, writeback: { reschedule_grace_seconds: 0 } };
    },
  });
  await h.app.start();
  h.world.config.google.push!.public_url = `${h.app.http!.url}/webhooks/google`;
  const now = options.clock?.now() ?? Date.now();
  const start = new Date(now + 3 * DAY);
  start.setUTCHours(10, 0, 0, 0);
  const appt = h.world.booking.create({ therapist_id: "th_1", start_time: start.toISOString() }, { force: true });
  await h.app.reconcile();
  return { h, id: String(appt.id), start: start.getTime(), cal: h.world.calendarOf("th_1") };
}

const lists = (log: readonly RequestLogEntry[], cal: string) =>
  log.filter((r) => r.method === "GET" && r.path === `/calendar/v3/calendars/${encodeURIComponent(cal)}/events`);

describe("push first, polling as a safety net", () => {
  it("coalesces a burst of notifications for one calendar: one sync in flight, one queued", async () => {
    const { h, cal } = await pushWorld({ latencyMs: 300 });
    await h.app.push.start();
    await h.world.google.settleNotifications();
    await h.app.poller.poll("th_1"); // takes the sync token
    const before = lists(h.world.google.requestLog, cal).length;
    const channel = [...h.world.google.channels.values()].find((c) => c.calendarId === cal)!;
    const send = async () => {
      const res = await request(`${h.app.http!.url}/webhooks/google`, {
        method: "POST",
        headers: {
          "x-goog-channel-id": channel.id,
          "x-goog-channel-token": (channel as unknown as { token: string }).token,
          "x-goog-resource-state": "exists",
        },
      });
      await res.body.dump();
      return res.statusCode;
    };
    expect(new Set(await Promise.all(Array.from({ length: 50 }, send)))).toEqual(new Set([200]));
    await until(() => h.app.poller.busy === 0);
    expect(lists(h.world.google.requestLog, cal).length - before).toBeLessThanOrEqual(2);
  });

  it("polls a calendar with a confirmed channel every 20 minutes or so, one without every minute; an unannounced change is found by the safety poll and brings back the short interval until a new channel is confirmed", async () => {
    const clock = new ManualClock(Date.now());
    const { h, id, start, cal } = await pushWorld({ clock });
    const other = h.world.calendarOf("th_2");
    h.app.poller.start();
    // Without channels: every minute.
    await until(() => lists(h.world.google.requestLog, cal).length >= 1 && h.app.poller.busy === 0);
    const n0 = lists(h.world.google.requestLog, cal).length;
    for (let i = 0; i < 3; i++) {
      await clock.advance(MINUTE);
      await until(() => h.app.poller.busy === 0);
    }
    expect(lists(h.world.google.requestLog, cal).length - n0).toBe(3);

    // Channels opened; Google's first message confirms th_1's. th_2's address does not reach the daemon.
    h.world.config.google.push!.public_url = `${h.app.http!.url}/webhooks/google`;
    const th2 = h.app.calendars.get("th_2")!;
    const watch = th2.watch.bind(th2);
    th2.watch = (ch) => watch({ ...ch, address: "http://127.0.0.1:1/nowhere" });
    await h.app.push.start();
    await h.world.google.settleNotifications();
    expect(h.app.poller.intervalFor("th_1")).toBeGreaterThanOrEqual(15 * MINUTE);
    expect(h.app.poller.intervalFor("th_1")).toBeLessThanOrEqual(25 * MINUTE);
    expect(h.app.poller.intervalFor("th_2")).toBe(MINUTE);
    // The therapist moves the event and Google's notification is lost: nothing for 14 minutes (th_2 meanwhile is
    // polled every minute), then the safety poll finds it, 15 to 25 minutes after the last poll.
    h.world.google.userEdit(cal, eventIdFor(id), {
      start: { dateTime: iso(start + 3_600_000) },
      end: { dateTime: iso(start + 7_200_000) },
    });
    const a0 = lists(h.world.google.requestLog, cal).length;
    const b0 = lists(h.world.google.requestLog, other).length;
    for (let i = 0; i < 14; i++) {
      await clock.advance(MINUTE);
      await until(() => h.app.poller.busy === 0);
    }
    expect(lists(h.world.google.requestLog, cal).length - a0).toBe(0);
    expect(lists(h.world.google.requestLog, other).length - b0).toBe(14);
    expect(Date.parse(String(h.world.booking.get(id)!.start_time))).toBe(start);
    const watches = () => h.world.google.requestLog.filter((r) => r.path.endsWith("/events/watch")).length;
    const w0 = watches();
    for (let i = 0; i < 12 && Date.parse(String(h.world.booking.get(id)!.start_time)) === start; i++) {
      await clock.advance(MINUTE);
      await until(() => h.app.poller.busy === 0);
      await h.app.engine.idle();
    }
    expect(Date.parse(String(h.world.booking.get(id)!.start_time))).toBe(start + 3_600_000);
    // The channel that missed it is replaced; until the new one is confirmed the calendar is polled every minute.
    await until(() => watches() === w0 + 1);
    await h.world.google.settleNotifications();
    await until(() => h.app.poller.intervalFor("th_1") >= 15 * MINUTE);

    // Through push a change is seen at once: no clock advance needed.
    h.world.google.userEdit(cal, eventIdFor(id), {
      start: { dateTime: iso(start + 2 * 3_600_000) },
      end: { dateTime: iso(start + 3 * 3_600_000) },
    });
    await h.world.google.notify(cal);
    await until(() => Date.parse(String(h.world.booking.get(id)!.start_time)) === start + 2 * 3_600_000);
  });
});
