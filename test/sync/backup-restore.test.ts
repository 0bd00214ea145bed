// The SQLite store put back from an older backup, through the real daemon on the manual clock. A therapist deleted
// events; the write-back guard held them; an administrator restored them, so they live on under the next generation
// of their ids (Google refuses to restore an id a person deleted). The backup, taken before all this, names the
// deleted generation-0 ids: neither the reconciliation nor a single sync (the calendar poll) may take those deletions
// for new ones and cancel the appointments the administrator kept; the live later generation is adopted instead.
import { copyFileSync, existsSync, mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { basename, join } from "node:path";
import { afterEach, expect, it } from "vitest";
import { eventIdFor } from "../../src/calendar/ids.ts";
import { writebackHeld } from "../../src/cli/writeback-held.ts";
import { ManualClock } from "../../src/clock.ts";
import type { Config } from "../../src/config/schema.ts";
import { type App, createApp } from "../../src/daemon/app.ts";
import { WORLD_WEBHOOK_SECRET } from "../../src/simulator/world.ts";
import { captureLog } from "../support/log-capture.ts";
import { cancels, DAY, daemonHarness, type Harness, liveOf, pass, pollAll, quiet } from "./support.ts";

let h: Harness | undefined;
let dirs: string[] = [];
afterEach(async () => {
  await h?.close();
  h = undefined;
  for (const d of dirs) rmSync(d, { recursive: true, force: true });
  dirs = [];
});

const HOUR = 3_600_000;
const SUFFIXES = ["", "-wal", "-shm"];

function storeFile(x: Harness): string {
  const url = x.world.config.store.url;
  expect(url.startsWith("sqlite://")).toBe(true);
  return url.slice("sqlite://".length);
}

/** Stops the daemon (an orderly stop: the store is closed), to copy or replace its store. */
async function stop(x: Harness) {
  await x.app.stop(2000);
  for (const ep of x.world.booking.webhookEndpoints()) x.world.booking.removeWebhookEndpoint(ep.id);
}

/** A new daemon on the same configuration, world and clock, receiving the simulator's webhooks. */
async function start(x: Harness, clock: ManualClock, config: Config = x.world.config) {
  const app = await createApp(config, {
    clock,
    logger: captureLog().logger,
    oneShot: true,
    listen: "127.0.0.1:0",
  });
  await app.start();
  (x as { app: App }).app = app;
  x.world.booking.addWebhookEndpoint({
    url: `${app.http!.url}${x.world.config.webhooks.path}`,
    secret: WORLD_WEBHOOK_SECRET,
    events: ["*"],
  });
}

/** Last night's backup: the store's files copied while the daemon is stopped. */
async function backup(x: Harness, clock: ManualClock): Promise<string> {
  await stop(x);
  const file = storeFile(x);
  const dir = mkdtempSync(join(tmpdir(), "calbridge-backup-"));
  dirs.push(dir);
  for (const s of SUFFIXES) if (existsSync(file + s)) copyFileSync(file + s, join(dir, basename(file) + s));
  await start(x, clock);
  return dir;
}

/** The disk is lost: the daemon stops, the backup is put back in place of the store, a new daemon starts. */
async function putBack(x: Harness, clock: ManualClock, dir: string) {
  await stop(x);
  const file = storeFile(x);
  for (const s of SUFFIXES) rmSync(file + s, { force: true });
  for (const s of SUFFIXES)
    if (existsSync(join(dir, basename(file) + s))) copyFileSync(join(dir, basename(file) + s), file + s);
  await start(x, clock);
}

/**
 * Ten appointments of th_1 mirrored, backed up; then a phone app deletes four events, the guard holds them, and an
 * administrator restores two (they come back under generation 1) and applies two. Hours pass.
 */
async function keptAfterTheBackup(clock: ManualClock) {
  const x = await daemonHarness({ therapists: 2, clock, logger: captureLog().logger });
  h = x;
  const ids: string[] = [];
  for (let i = 0; i < 10; i++) {
    const begin = new Date(clock.now() + (i + 2) * DAY);
    begin.setUTCHours(9 + (i % 8), 0, 0, 0);
    ids.push(
      String(x.world.booking.create({ therapist_id: "th_1", start_time: begin.toISOString() }, { force: true }).id),
    );
  }
  await quiet(x);
  await x.app.reconcile();
  await pollAll(x);
  const cal = x.world.calendarOf("th_1");
  const nightly = await backup(x, clock);
  await x.app.reconcile();
  await pollAll(x);

  const deleted = ids.slice(0, 4);
  for (const id of deleted) x.world.google.userDelete(cal, eventIdFor(id));
  await pollAll(x);
  await pass(x, clock, 90_000);
  expect((await x.app.sync.guard.held("th_1")).length).toBe(4);
  for (const id of deleted.slice(0, 2)) await writebackHeld(x.app, { appointmentId: id, decision: "apply" });
  for (const id of deleted.slice(2)) await writebackHeld(x.app, { appointmentId: id, decision: "restore" });
  await quiet(x);
  expect(cancels(x)).toBe(2);
  const kept = deleted.slice(2);
  for (const id of kept) expect(liveOf(x, cal, id).map((e) => e.id)).toEqual([eventIdFor(id, 1)]);
  await pass(x, clock, 2 * HOUR, 60_000);
  return { x, cal, kept, nightly };
}

/** The kept appointments are booked, each with its generation-1 event alone, and their links name it. */
async function stillKept(x: Harness, cal: string, kept: string[]) {
  expect(cancels(x)).toBe(2);
  for (const id of kept) {
    expect(x.world.booking.get(id)!.status).toBe("confirmed");
    expect(liveOf(x, cal, id).map((e) => e.id)).toEqual([eventIdFor(id, 1)]);
    expect(await x.app.sync.links.get(id)).toMatchObject({ eventId: eventIdFor(id, 1), generation: 1, present: true });
  }
}

it("a backup put back: the reconciliation adopts the live later generation and cancels nothing the admin kept", async () => {
  const clock = new ManualClock(Date.now());
  const { x, cal, kept, nightly } = await keptAfterTheBackup(clock);

  await putBack(x, clock, nightly);
  // What a person would look at first plans no cancellation.
  const dry = await x.app.reconcile({ dryRun: true });
  expect(dry.plan.filter((p) => p.kind === "writeback_cancel")).toEqual([]);
  await x.app.reconcile();
  await pollAll(x);
  await pass(x, clock, 120_000);
  await x.app.reconcile();
  await pollAll(x);
  await pass(x, clock, 120_000);

  await stillKept(x, cal, kept);
});

it("a backup put back: a single sync of the deleted old generation (the calendar poll) sends nothing either", async () => {
  const clock = new ManualClock(Date.now());
  const { x, cal, kept, nightly } = await keptAfterTheBackup(clock);

  await putBack(x, clock, nightly);
  // The backup's sync token: the poll reports the deletions of the generation-0 events, named by the links.
  await pollAll(x);
  await pass(x, clock, 120_000);
  await pollAll(x);
  await pass(x, clock, 120_000);

  await stillKept(x, cal, kept);
});

it("a backup from before a therapist was unmapped: an event deleted meanwhile, put back under generation 1, stays", async () => {
  const clock = new ManualClock(Date.now());
  const x = await daemonHarness({ therapists: 2, clock, logger: captureLog().logger });
  h = x;
  const begin = new Date(clock.now() + 2 * DAY);
  begin.setUTCHours(10, 0, 0, 0);
  const id = String(
    x.world.booking.create({ therapist_id: "th_1", start_time: begin.toISOString() }, { force: true }).id,
  );
  await quiet(x);
  await x.app.reconcile();
  await pollAll(x);
  const cal = x.world.calendarOf("th_1");
  const nightly = await backup(x, clock);

  // th_1 is taken out of the mapping; meanwhile the event is deleted. Mapped again, calbridge puts it back (a change
  // made while it was not watching is never written back): under generation 1, Google refusing the deleted id.
  await stop(x);
  const unmapped = structuredClone(x.world.config);
  unmapped.therapists = unmapped.therapists.filter((t) => t.therapist_id !== "th_1");
  await start(x, clock, unmapped);
  x.world.google.userDelete(cal, eventIdFor(id));
  await pass(x, clock, HOUR, 60_000);
  await stop(x);
  await start(x, clock);
  await x.app.reconcile();
  await pollAll(x);
  await pass(x, clock, 120_000);
  expect(liveOf(x, cal, id).map((e) => e.id)).toEqual([eventIdFor(id, 1)]);
  expect(cancels(x)).toBe(0);

  // The backup, taken while th_1 was watched, is put back: its link names the deleted generation-0 event.
  await putBack(x, clock, nightly);
  await x.app.reconcile();
  await pollAll(x);
  await pass(x, clock, 120_000);
  await x.app.reconcile();
  await quiet(x);

  expect(cancels(x)).toBe(0);
  expect(x.world.booking.get(id)!.status).toBe("confirmed");
  expect(liveOf(x, cal, id).map((e) => e.id)).toEqual([eventIdFor(id, 1)]);
  expect(await x.app.sync.links.get(id)).toMatchObject({ eventId: eventIdFor(id, 1), generation: 1, present: true });
});
