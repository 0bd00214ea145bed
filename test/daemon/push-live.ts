import { expect } from "vitest";
import type { Config } from "../../src/config/schema.ts";
// A real daemon for push tests: not one-shot (it leads, polls, renews and reloads as in production), push on, the
// emulator delivering its notifications to the daemon's own listener over plain HTTP on loopback.
import { type App, createApp } from "../../src/daemon/app.ts";
import { silentLogger } from "../../src/log.ts";
import { startWorld, type World } from "../../src/simulator/world.ts";
import { freePort } from "../support/ports.ts";
import { type Harness, harness } from "../sync/support.ts";

export const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/** Waits (real time) until `done()` holds; says whether it does. */
export async function until(done: () => boolean, ms = 10_000): Promise<boolean> {
  for (let t = 0; t < ms && !done(); t += 10) await sleep(10);
  return done();
}

/** events.list calls on a calendar so far. */
export const listings = (w: World, cal: string) =>
  w.google.requestLog.filter(
    (r) => r.method === "GET" && r.path.endsWith(`/calendars/${encodeURIComponent(cal)}/events`),
  ).length;

/** The daemon started, one channel open and confirmed per therapist. */
/** A leading daemon with push on over the simulators; `primary`: every therapist's calendar_id is `primary`. */
export async function liveDaemon(
  therapists: number,
  options: { primary?: boolean } = {},
): Promise<{ world: World; app: App; close(): Promise<void> }> {
  const port = await freePort();
  const world = await startWorld({
    therapists,
    configure: (c) => {
      c.google.push = { public_url: `http://127.0.0.1:${port}/webhooks/google` };
      c.sync = { ...c.sync, calendar_poll_seconds: 300 };
      if (options.primary) c.therapists = c.therapists.map((t) => ({ ...t, calendar_id: "primary" }));
    },
  });
  world.google.requireHttpsChannels = false;
  const app = await createApp(structuredClone(world.config), {
    logger: silentLogger,
    listen: `127.0.0.1:${port}`,
    adminListen: "127.0.0.1:0",
  });
  const close = async () => {
    await app.stop(3000).catch(() => {});
    await world.close();
  };
  try {
    await app.start();
    if (!(await until(() => world.google.channels.size === therapists))) throw new Error("channels not opened");
    await world.google.settleNotifications();
  } catch (err) {
    await close();
    throw err;
  }
  return { world, app, close };
}

/** The ids of the channels open at Google on `calendarId`. */
export const openOn = (w: World, calendarId: string): string[] =>
  [...w.google.channels.values()].filter((c) => c.calendarId === calendarId).map((c) => c.id);

/** A new calendar for the therapist (in the emulator), and the configuration that points them at it. */
export function repointed(w: World, therapistId = "th_1"): { oldCal: string; newCal: string; next: Config } {
  const oldCal = w.calendarOf(therapistId)!;
  const newCal = `${therapistId}-new@clinic.test`;
  w.google.createCalendar(newCal, oldCal, { timeZone: "Europe/Berlin" });
  const next = structuredClone(w.config);
  next.therapists = next.therapists.map((t) => (t.therapist_id === therapistId ? { ...t, calendar_id: newCal } : t));
  return { oldCal, newCal, next };
}

/** A daemon with push on whose three channels are open and confirmed, then stopped; th_2 is removed meanwhile. */
export async function stoppedWithThe2Removed(): Promise<Harness> {
  const x = await harness({
    therapists: 3,
    configure: (c) => {
      c.google.push = { public_url: "https://sync.example/webhooks/google" };
      c.sync = { ...c.sync, calendar_poll_seconds: 300 };
    },
  });
  await x.app.start();
  x.world.config.google.push!.public_url = `${x.app.http!.url}/webhooks/google`;
  x.world.google.requireHttpsChannels = false;
  await x.app.push.start();
  await x.world.google.settleNotifications();
  expect(x.world.google.channels.size).toBe(3);
  x.app.push.stop();
  await x.app.stop(2000);
  // While stopped, th_2 leaves the configuration: their channel is left behind, known only from the channels table.
  x.world.config.therapists = x.world.config.therapists.filter((t) => t.therapist_id !== "th_2");
  return x;
}
