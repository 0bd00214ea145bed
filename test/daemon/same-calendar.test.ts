// Two mapped therapists on one Google calendar through a consent: th_2 (OAuth, `primary`) was connected in a browser
// signed in as th_1, so th_2's `primary` is th_1's calendar although the configuration names two. Before this was
// checked, the first reconciliation took th_2's event in that calendar for a copy left behind by th_1's sync and
// deleted it, and th_2's poll wrote the deletion back as a cancellation (the customer notified). The daemon resolves
// each mapping's calendar to its real id and does not sync th_2 at all; doctor fails on it.
import { afterEach, expect, it } from "vitest";
import { eventIdFor } from "../../src/calendar/ids.ts";
import { type App, createApp } from "../../src/daemon/app.ts";
import { startWorld, type World } from "../../src/simulator/world.ts";
import { runCli, writeConfig } from "../cli/support.ts";
import { captureLog } from "../support/log-capture.ts";

let world: World | undefined;
let app: App | undefined;
afterEach(async () => {
  if (world) world.google.faults.errorRate = 0;
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

it("while the real id of a primary calendar is not known, that therapist is not synced: nothing written in a colleague's calendar", async () => {
  world = await sharedWorld();
  const cal1 = world.calendarOf("th_1");
  // Google does not answer which calendar th_2's `primary` is at start: th_2 waits, th_1 (named in the file) syncs.
  world.google.faults.next(1, { status: 400, reason: "badRequest", match: /^GET \S*\/calendars\/primary(\?|$)/ });
  app = await createApp(world.config, { oneShot: true, listen: "127.0.0.1:0" });
  await app.start();
  expect(app.sync.mapping.calendarIfAny("th_2")).toBeUndefined();
  const th2 = (await app.status()).therapists.find((t) => t.therapistId === "th_2")!;
  expect(th2.credentials.detail).toMatch(/^calendar not identified yet: /);
  const at = (h: number) => new Date(Math.floor(Date.now() / HOUR) * HOUR + h * HOUR).toISOString();
  const mine = String(world.booking.create({ therapist_id: "th_1", start_time: at(50) }, { force: true }).id);
  const theirs = String(world.booking.create({ therapist_id: "th_2", start_time: at(52) }, { force: true }).id);
  await app.reconcile().catch(() => {});
  await app.engine.idle();
  // th_2's appointment was not written into th_1's calendar (it would stay there once th_2 is refused).
  expect(world.google.event(cal1, eventIdFor(theirs))).toBeUndefined();
  expect(world.google.event(cal1, eventIdFor(mine))?.status).toBe("confirmed");
  // The next resolution (a reload here; a credentials check alike) tells th_1's calendar: th_2 is refused.
  await app.reload(structuredClone(world.config));
  await expect
    .poll(async () => (await app!.status()).therapists.find((t) => t.therapistId === "th_2")?.credentials.detail, {
      timeout: 5000,
    })
    .toMatch(/which is also the calendar of th_1/);
  await app.reconcile().catch(() => {});
  await app.engine.idle();
  expect(world.google.event(cal1, eventIdFor(theirs))).toBeUndefined();
  expect(world.google.events(cal1).filter((e) => e.status === "cancelled")).toEqual([]);
  expect(world.booking.requests.filter((r) => r.route.endsWith("/cancel"))).toEqual([]);
});

it("a therapist whose calendar cannot be identified (access revoked) does not stop stray copies being removed elsewhere", async () => {
  world = await startWorld({ therapists: 3 });
  const client = world.google.registerOAuthClient();
  world.config.google.oauth = client;
  const cal1 = world.calendarOf("th_1");
  const cal3 = world.calendarOf("th_3");
  const t3 = world.config.therapists[2] as Record<string, unknown>;
  t3.calendar_id = "primary";
  delete t3.impersonate;
  t3.auth = { type: "oauth", refresh_token: world.google.issueRefreshToken(cal3, client.client_id) };
  world.google.revokeTokens(cal3); // th_3 revoked access: their calendar can never be told
  app = await createApp(world.config, { oneShot: true, listen: "127.0.0.1:0" });
  await app.start();
  expect(app.sync.mapping.calendarIfAny("th_3")).toBeUndefined();
  const at = new Date(Math.floor(Date.now() / HOUR) * HOUR + 50 * HOUR).toISOString();
  const id = String(world.booking.create({ therapist_id: "th_1", start_time: at }, { force: true }).id);
  await app.reconcile().catch(() => {});
  await app.engine.idle();
  // Reassigned to th_2; removing it from th_1's calendar fails once: a copy left behind there.
  world.google.faults.next(1, { status: 403, reason: "forbidden", match: /DELETE .*th_1%40clinic\.test\/events\// });
  world.booking.reassign(id, "th_2", { force: true });
  await app.reconcile().catch(() => {});
  await app.engine.idle();
  expect(world.google.event(cal1, eventIdFor(id))?.status).toBe("confirmed");
  await app.reconcile().catch(() => {});
  await app.engine.idle();
  expect(world.google.event(cal1, eventIdFor(id))?.status).toBe("cancelled");
  expect(world.booking.get(id)!.status).toBe("confirmed");
});

it("the daemon listens at once while Google does not answer which calendar an OAuth primary is", async () => {
  world = await startWorld({ therapists: 3 });
  const client = world.google.registerOAuthClient();
  world.config.google.oauth = client;
  for (const t of world.config.therapists as Record<string, unknown>[]) {
    const own = String(t.calendar_id);
    t.calendar_id = "primary";
    delete t.impersonate;
    t.auth = { type: "oauth", refresh_token: world.google.issueRefreshToken(own, client.client_id) };
  }
  world.google.faults.errorRate = 1; // an outage: every API call answers 503
  const started = Date.now();
  const pending = createApp(world.config, { listen: "127.0.0.1:0", adminListen: "127.0.0.1:0" });
  const made = await Promise.race([pending, new Promise<undefined>((r) => setTimeout(r, 5000, undefined))]);
  world.google.faults.errorRate = 0;
  app = await pending;
  expect({ within5s: made !== undefined, ms: Date.now() - started < 5000 }).toEqual({ within5s: true, ms: true });
  // None synced before its calendar is told; once Google answers, each is taken in (their own calendars).
  await app.start();
  await expect
    .poll(() => ["th_1", "th_2", "th_3"].every((t) => app!.sync.mapping.calendarIfAny(t) !== undefined), {
      timeout: 20_000,
    })
    .toBe(true);
}, 60_000);

it("an OAuth therapist with a leftover impersonate is still asked which calendar its primary is", async () => {
  world = await sharedWorld();
  (world.config.therapists[1] as Record<string, unknown>).impersonate = "th_2@clinic.test";
  app = await createApp(world.config, { oneShot: true, listen: "127.0.0.1:0" });
  await app.start();
  expect(app.sync.mapping.calendarIfAny("th_2")).toBeUndefined();
  const th2 = (await app.status()).therapists.find((t) => t.therapistId === "th_2")!;
  expect(th2.credentials.detail).toMatch(/which is also the calendar of th_1/);
});

it("a reload that gives the colleague its own token brings back the therapist refused only because of it", async () => {
  world = await startWorld({ therapists: 2 });
  const client = world.google.registerOAuthClient();
  world.config.google.oauth = client;
  const cal1 = world.calendarOf("th_1");
  const cal2 = world.calendarOf("th_2");
  for (const t of world.config.therapists as Record<string, unknown>[]) {
    t.calendar_id = "primary";
    delete t.impersonate;
    t.auth = { type: "oauth", refresh_token: world.google.issueRefreshToken(cal1, client.client_id) };
  }
  app = await createApp(world.config, { oneShot: true, listen: "127.0.0.1:0" });
  await app.start();
  expect(app.sync.mapping.calendarIfAny("th_1")).toBeUndefined(); // neither names the calendar: both refused
  expect(app.sync.mapping.calendarIfAny("th_2")).toBeUndefined();
  const next = structuredClone(world.config);
  (next.therapists[1] as Record<string, unknown>).auth = {
    type: "oauth",
    refresh_token: world.google.issueRefreshToken(cal2, client.client_id),
  };
  await app.reload(next);
  await expect
    .poll(() => ["th_1", "th_2"].map((t) => app!.sync.mapping.calendarIfAny(t) !== undefined), { timeout: 5000 })
    .toEqual([true, true]);
  const th1 = (await app.status()).therapists.find((t) => t.therapistId === "th_1")!;
  expect(th1.credentials.ok).toBe(true);
});
