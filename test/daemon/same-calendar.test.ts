// Two mapped therapists on one Google calendar through a consent: th_2 (OAuth, `primary`) was connected in a browser
// signed in as th_1, so th_2's `primary` is th_1's calendar although the configuration names two. Before this was
// checked, the first reconciliation took th_2's event in that calendar for a copy left behind by th_1's sync and
// deleted it, and th_2's poll wrote the deletion back as a cancellation (the customer notified). The daemon resolves
// each mapping's calendar to its real id and does not sync th_2 at all; doctor fails on it.
import { afterEach, expect, it } from "vitest";
import { type App, createApp } from "../../src/daemon/app.ts";
import { startWorld, type World } from "../../src/simulator/world.ts";
import { runCli, writeConfig } from "../cli/support.ts";
import { captureLog } from "../support/log-capture.ts";

let world: World | undefined;
let app: App | undefined;
afterEach(async () => {
  await app?.stop(1000);
  await world?.close();
  app = undefined;
  world = undefined;
});

const HOUR = 3_600_000;

async function sharedWorld(): Promise<World> {
  const w = await startWorld({ therapists: 2 });
  const client = w.google.registerOAuthClient();
  w.config.google.oauth = client;
  const t2 = w.config.therapists[1] as Record<string, unknown>;
  t2.calendar_id = "primary";
  delete t2.impersonate;
  t2.auth = { type: "oauth", refresh_token: w.google.issueRefreshToken(w.calendarOf("th_1"), client.client_id) };
  return w;
}

it("a therapist whose primary calendar is another mapped therapist's is not synced: nothing deleted, nothing cancelled", async () => {
  world = await sharedWorld();
  const cal1 = world.calendarOf("th_1");
  const log = captureLog("info");
  app = await createApp(world.config, { logger: log.logger, oneShot: true, listen: "127.0.0.1:0" });
  await app.start();
  const at = (h: number) => new Date(Math.floor(Date.now() / HOUR) * HOUR + h * HOUR).toISOString();
  const mine = String(world.booking.create({ therapist_id: "th_1", start_time: at(50) }, { force: true }).id);
  const theirs = String(world.booking.create({ therapist_id: "th_2", start_time: at(52) }, { force: true }).id);
  await app.reconcile().catch(() => {});
  for (const t of ["th_1", "th_2"]) if (app.sync.mapping.calendarIfAny(t)) await app.poller.poll(t);
  await app.engine.idle();
  await app.reconcile().catch(() => {});
  for (const t of ["th_1", "th_2"]) if (app.sync.mapping.calendarIfAny(t)) await app.poller.poll(t);
  await app.engine.idle();

  // calbridge deleted nothing in th_1's calendar and cancelled nothing.
  expect(world.google.events(cal1).filter((e) => e.status === "cancelled")).toEqual([]);
  expect(world.booking.requests.filter((r) => r.route.endsWith("/cancel"))).toEqual([]);
  expect([world.booking.get(mine)!.status, world.booking.get(theirs)!.status]).toEqual(["confirmed", "confirmed"]);
  // th_1 syncs as before; th_2 is refused, with the reason in /status and the log.
  expect(world.google.events(cal1).filter((e) => e.status === "confirmed")).toHaveLength(1);
  expect(app.sync.mapping.calendarIfAny("th_2")).toBeUndefined();
  const th2 = (await app.status()).therapists.find((t) => t.therapistId === "th_2")!;
  expect(th2.credentials.ok).toBe(false);
  expect(th2.credentials.detail).toMatch(
    new RegExp(
      `calendar primary of th_2 is the Google calendar ${cal1}, which is also the calendar of th_1: .*own Google account`,
    ),
  );
  expect(log.find((l) => l["therapist_id"] === "th_2" && l["level"] === 50)?.msg).toMatch(
    /another therapist's calendar: nothing is synced in it/,
  );
});

it("doctor fails a therapist whose calendar resolves to another mapped therapist's", async () => {
  world = await sharedWorld();
  const file = writeConfig(world);
  const d = await runCli("doctor", "--json", "--config", file);
  const checks = (JSON.parse(d.stdout) as { checks: { name: string; status: string; detail: string }[] }).checks;
  expect(d.code).not.toBe(0);
  expect(checks.find((c) => c.name === "calendar of th_1")?.status).toBe("ok");
  const th2 = checks.find((c) => c.name === "calendar of th_2");
  expect(th2?.status).toBe("fail");
  expect(th2?.detail).toMatch(/which is also the calendar of th_1/);
});

it("while the real id of a primary calendar is not known, a reconciliation removes no copy that may be its event", async () => {
  world = await sharedWorld();
  const cal1 = world.calendarOf("th_1");
  // Google does not answer which calendar th_2's `primary` is at start: th_2 is synced, its calendar not yet told.
  world.google.faults.next(1, { status: 400, reason: "badRequest", match: /^GET \S*\/calendars\/primary(\?|$)/ });
  app = await createApp(world.config, { oneShot: true, listen: "127.0.0.1:0" });
  await app.start();
  expect(app.sync.mapping.calendarIfAny("th_2")).toBeDefined();
  const at = new Date(Math.floor(Date.now() / HOUR) * HOUR + 52 * HOUR).toISOString();
  const theirs = String(world.booking.create({ therapist_id: "th_2", start_time: at }, { force: true }).id);
  await app.reconcile().catch(() => {});
  await app.engine.idle();
  await app.reconcile().catch(() => {});
  await app.engine.idle();
  // th_2's event in that calendar is not taken for a copy th_1's listing should remove.
  expect(world.google.events(cal1).filter((e) => e.status === "cancelled")).toEqual([]);
  expect(world.booking.get(theirs)!.status).toBe("confirmed");
});
