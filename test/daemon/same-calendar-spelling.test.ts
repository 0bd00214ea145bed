// The same Google calendar written another way is no re-point (review18). An OAuth therapist on `primary` given their
// own address (the calendar `primary` is), or an address whose letters only change case: the reload took it for a
// re-point, deleted the sync token and "moved" every event from the calendar to itself; with events.move refused
// (403) the copy path wrote each event into the calendar and then deleted it from the same calendar, so the therapist's
// appointments vanished and no reconciliation brought them back (the links said they were placed).
import { afterEach, expect, it } from "vitest";
import { eventIdFor } from "../../src/calendar/ids.ts";
import type { Config } from "../../src/config/schema.ts";
import { type App, createApp } from "../../src/daemon/app.ts";
import { startWorld, WORLD_WEBHOOK_SECRET, type World } from "../../src/simulator/world.ts";
import { captureLog } from "../support/log-capture.ts";
import { waitFor } from "../support/wait-for.ts";

const DAY = 86_400_000;
const cleanups: (() => Promise<unknown>)[] = [];
afterEach(async () => {
  for (const c of cleanups.splice(0).reverse()) await c().catch(() => {});
});
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

function book(world: World, t: string, n: number): string {
  const start = new Date(Date.now() + (1 + n) * DAY);
  start.setUTCHours(8 + n, 0, 0, 0);
  return String(world.booking.create({ therapist_id: t, start_time: start.toISOString() }, { force: true }).id);
}
const live = (world: World, cal: string) =>
  world.google
    .events(cal)
    .filter((e) => e.status !== "cancelled")
    .map((e) => String(e.id))
    .sort();

/** th_a on OAuth `primary` (their own calendar), two appointments mirrored there. */
async function oauthPrimary() {
  const world = await startWorld({ therapists: ["th_a", "th_b"], webhookTimeScale: 1 / 6000 });
  cleanups.push(() => world.close());
  const client = world.google.registerOAuthClient();
  world.config.google.oauth = client;
  const ta = world.config.therapists[0] as Record<string, unknown>;
  ta.calendar_id = "primary";
  delete ta.impersonate;
  ta.auth = {
    type: "oauth",
    refresh_token: world.google.issueRefreshToken(world.calendarOf("th_a"), client.client_id),
  };
  const ids = [book(world, "th_a", 1), book(world, "th_a", 2)].map((id) => eventIdFor(id)).sort();
  const cal = world.calendarOf("th_a");
  return { world, ids, cal };
}

async function started(world: World, config: Config) {
  const log = captureLog("info");
  const app: App = await createApp(structuredClone(config), {
    logger: log.logger,
    listen: "127.0.0.1:0",
    adminListen: "127.0.0.1:0",
  });
  cleanups.push(() => app.stop(3000));
  await app.start();
  const endpoint = world.booking.addWebhookEndpoint({
    url: `${app.http!.url}/webhooks/booking`,
    secret: WORLD_WEBHOOK_SECRET,
    events: ["*"],
  });
  return { app, log, endpoint };
}

/** The engine drained and two reconciliations run, each step given at most 5 s (a relocation retrying may not end). */
async function settled(app: App) {
  const bounded = (p: Promise<unknown>) => Promise.race([p.catch(() => {}), sleep(5000)]);
  await bounded(app.engine.drained());
  for (let i = 0; i < 2; i++) {
    await bounded(app.reconcile());
    await bounded(app.engine.drained());
    await sleep(200);
  }
}

const writebacks = (world: World) =>
  world.booking.requests.filter((r) => r.route.startsWith("PATCH") || r.route.endsWith("/cancel"));

it("primary → the account's own address is no re-point: nothing moves, nothing is lost, even with events.move refused", async () => {
  const { world, ids, cal } = await oauthPrimary();
  const { app, log } = await started(world, world.config);
  await waitFor("mirrored", () => live(world, cal).length === 2, 20_000);
  await app.engine.drained();
  await sleep(300);
  const writesBefore = world.google.writes;

  const next = structuredClone(world.config) as Config;
  next.therapists[0]!.calendar_id = cal; // the same calendar, by its address
  world.google.faults.next(10, { status: 403, reason: "forbidden", match: /\/move/ });
  const changes = await app.reload(next);
  await sleep(1000);
  await settled(app);

  expect(live(world, cal)).toEqual(ids);
  expect(world.google.writes - writesBefore).toBe(0);
  expect(writebacks(world)).toEqual([]);
  expect(changes.repointed).toEqual([]);
  expect(changes.changed).toEqual([{ therapistId: "th_a", keys: ["calendar_id"] }]);
  expect(log.find((l) => /re-pointed/.test(String(l.msg)))).toBeUndefined();
}, 60_000);

it("an address whose case changed is the same calendar: no re-point, nothing moves", async () => {
  const world = await startWorld({ therapists: ["th_a", "th_b"], webhookTimeScale: 1 / 6000 });
  cleanups.push(() => world.close());
  const cal = world.calendarOf("th_a");
  const ids = [book(world, "th_a", 1), book(world, "th_a", 2)].map((id) => eventIdFor(id)).sort();
  const { app } = await started(world, world.config);
  await waitFor("mirrored", () => live(world, cal).length === 2, 20_000);
  await app.engine.drained();
  await sleep(300);
  const writesBefore = world.google.writes;

  const next = structuredClone(world.config) as Config;
  next.therapists[0]!.calendar_id = cal.toUpperCase();
  world.google.faults.next(10, { status: 403, reason: "forbidden", match: /\/move/ });
  const changes = await app.reload(next);
  await sleep(500);
  await settled(app);

  expect(live(world, cal)).toEqual(ids);
  expect(world.google.writes - writesBefore).toBe(0);
  expect(writebacks(world)).toEqual([]);
  expect(changes.repointed).toEqual([]);
}, 60_000);

it("primary written as the address while the daemon was down: the relocation finds it is one calendar and deletes nothing", async () => {
  const { world, ids, cal } = await oauthPrimary();
  const first = await started(world, world.config);
  await waitFor("mirrored", () => live(world, cal).length === 2, 20_000);
  await first.app.engine.drained();
  await sleep(300);
  await first.app.stop(3000);
  world.booking.removeWebhookEndpoint(first.endpoint.id);
  const writesBefore = world.google.writes;

  // Edited while stopped: the new process never saw `primary` answered, only the links' "primary".
  const next = structuredClone(world.config) as Config;
  next.therapists[0]!.calendar_id = cal;
  world.google.faults.next(10, { status: 403, reason: "forbidden", match: /\/move/ });
  const { app, log } = await started(world, next);
  await sleep(1500);
  await settled(app);

  expect(live(world, cal)).toEqual(ids);
  expect(world.google.writes - writesBefore).toBe(0);
  expect(writebacks(world)).toEqual([]);
  expect(log.find((l) => /written another way: nothing moves/.test(String(l.msg)))).toBeDefined();
  // The links name the calendar as the mapping does now: nothing is pending a move any more.
  const links = await Promise.all(world.booking.all().map((a) => app.sync.links.get(String(a.id))));
  const mine = links.filter((l) => l?.therapistId === "th_a");
  expect(mine.map((l) => [l!.calendarId, l!.present])).toEqual([
    [cal, true],
    [cal, true],
  ]);
}, 60_000);
