// calbridge keeps a record of an appointment of a therapist it does not sync when a webhook touches it (a tombstone
// naming that therapist and no calendar, apply.ts). `calbridge purge` of such a therapist forgot these records, deleting
// nothing, but counted them as "links to forget" ("forgot 2 links"), which told an admin calbridge had mirrored a
// therapist it never synced. They are counted apart now, as records of appointments calbridge never mirrored; links
// keep their wording, and the total forgotten is the same.
import { afterEach, describe, expect, it } from "vitest";
import type { Config } from "../../src/config/schema.ts";
import { createApp } from "../../src/daemon/app.ts";
import { silentLogger } from "../../src/log.ts";
import { startWorld, WORLD_WEBHOOK_SECRET, type World } from "../../src/simulator/world.ts";
import { openStore } from "../../src/store/store.ts";
import type { Link } from "../../src/sync/types.ts";
import { reconcileOnce, runCli, writeConfig } from "./support.ts";

const DAY = 86_400_000;
const iso = (ms: number) => new Date(ms).toISOString();
const cleanups: (() => Promise<unknown>)[] = [];
afterEach(async () => {
  for (const c of cleanups.splice(0).reverse()) await c().catch(() => {});
});

async function world(therapists: string[], mapped: string[]): Promise<World> {
  const w = await startWorld({ therapists, mapped });
  cleanups.push(() => w.close());
  return w;
}

/** A daemon on `config` receiving webhooks while `therapistId` gets appointments `days` ahead; then stopped. */
async function booked(w: World, config: Config, therapistId: string, days: number[]): Promise<void> {
  const app = await createApp(structuredClone(config), {
    logger: silentLogger,
    oneShot: true,
    listen: "127.0.0.1:0",
  });
  try {
    await app.start();
    w.booking.addWebhookEndpoint({
      url: `${app.http!.url}${config.webhooks.path}`,
      secret: WORLD_WEBHOOK_SECRET,
      events: ["*"],
    });
    for (const d of days) {
      w.booking.create({ therapist_id: therapistId, start_time: iso(Date.now() + d * DAY) }, { force: true });
    }
    for (let i = 0; i < 2; i++) {
      await w.booking.webhooksIdle();
      await app.processor.idle();
      await app.engine.idle();
    }
  } finally {
    await app.stop(2000);
  }
}

async function linksOf(w: World, therapistId: string): Promise<Link[]> {
  const store = await openStore(w.config.store.url);
  try {
    const out: Link[] = [];
    for await (const [, l] of store.table<Link>("links").entries()) if (l.therapistId === therapistId) out.push(l);
    return out;
  } finally {
    await store.close();
  }
}

const live = (w: World, cal: string) => w.google.events(cal).filter((e) => e.status !== "cancelled");

describe("calbridge purge of a therapist calbridge never synced", () => {
  it("counts the records its webhooks left apart, as never mirrored, not as links; deletes nothing", async () => {
    const w = await world(["th_anna", "th_cleo"], ["th_anna"]);
    const cal = w.calendarOf("th_cleo");
    const own = w.google.userInsert(cal, {
      summary: "dentist",
      start: { dateTime: iso(Date.now() + DAY) },
      end: { dateTime: iso(Date.now() + DAY + 3_600_000) },
    });
    await booked(w, w.config, "th_cleo", [1, 2]);
    const records = await linksOf(w, "th_cleo");
    expect(records.map((l) => [l.calendarId, l.present, l.removedBy])).toEqual([
      ["", false, "booking"],
      ["", false, "booking"],
    ]);
    const file = writeConfig(w);
    const writes = w.google.writes;
    const asked = w.booking.requests.length;

    // No link names a calendar of th_cleo's: the calendar is given.
    const none = await runCli("purge", "--therapist", "th_cleo", "--config", file);
    expect(none.code).toBe(2);
    expect(none.stderr).toContain("not in the configuration, and no links name a calendar of theirs; give --calendar");

    const dry = await runCli("purge", "--therapist", "th_cleo", "--calendar", cal, "--dry-run", "--config", file);
    expect(dry.code, dry.stderr).toBe(0);
    expect(dry.stdout.split("\n")).toEqual([
      `calbridge purge th_cleo: calendar ${cal}, as ${cal}; the booking service is not called`,
      "  0 calbridge events to delete (past and future), 0 links to forget",
      "  and 2 records to forget of appointments calbridge saw while th_cleo was not mapped: it never mirrored them",
      "  dry run: nothing was deleted or forgotten.",
      "",
    ]);
    expect(await linksOf(w, "th_cleo")).toHaveLength(2);

    const done = await runCli("purge", "--therapist", "th_cleo", "--calendar", cal, "--config", file);
    expect(done.code, done.stderr).toBe(0);
    expect(done.stdout.split("\n")).toEqual([
      `calbridge purge th_cleo: calendar ${cal}, as ${cal}; the booking service is not called`,
      "  0 calbridge events to delete (past and future), 0 links to forget",
      "  and 2 records to forget of appointments calbridge saw while th_cleo was not mapped: it never mirrored them",
      "  deleted 0 events (0 were gone already), forgot 0 links and 2 records of appointments calbridge never mirrored",
      "",
    ]);
    // Forgotten, and nothing written in Google nor asked of the booking service.
    expect(await linksOf(w, "th_cleo")).toEqual([]);
    expect(live(w, cal).map((e) => e.id)).toEqual([own.id]);
    expect(w.google.writes).toBe(writes);
    expect(w.booking.requests.length).toBe(asked);
  });

  it("in a calendar Google does not find, --forget-links counts them apart too", async () => {
    const w = await world(["th_anna", "th_cleo"], ["th_anna"]);
    const cal = w.calendarOf("th_cleo");
    await booked(w, w.config, "th_cleo", [1, 2]);
    w.google.deleteCalendar(cal);
    const file = writeConfig(w);
    const base = ["purge", "--therapist", "th_cleo", "--calendar", cal];

    const r = await runCli(...base, "--config", file);
    expect(r.code).toBe(1);
    expect(r.stdout.split("\n")[2]).toBe(
      `  if it was deleted, \`calbridge purge --therapist th_cleo --calendar ${cal} --forget-links\` forgets its 0 links and 2 records of appointments calbridge never mirrored, and the record of events left there, deleting nothing; if it still exists, share it with ${cal} (or give --impersonate) and run it again`,
    );
    const dry = await runCli(...base, "--forget-links", "--dry-run", "--config", file);
    expect(dry.code, dry.stderr).toBe(0);
    expect(dry.stdout.split("\n")[2]).toBe(
      "  --forget-links: 0 links and 2 records of appointments calbridge never mirrored to forget, and the record of events left there",
    );
    const forgot = await runCli(...base, "--forget-links", "--config", file);
    expect(forgot.code, forgot.stderr).toBe(0);
    expect(forgot.stdout.split("\n")[2]).toBe(
      "  forgot 0 links and 2 records of appointments calbridge never mirrored, and the record of events left there; nothing was deleted",
    );
    expect(await linksOf(w, "th_cleo")).toEqual([]);
  });
});

it("a therapist mirrored, then unmapped: their links keep the wording, appointments booked since are records apart", async () => {
  const w = await world(["th_anna", "th_ben"], ["th_anna", "th_ben"]);
  for (const [t, d] of [
    ["th_anna", 1],
    ["th_ben", 1],
    ["th_ben", 2],
  ] as const) {
    w.booking.create({ therapist_id: t, start_time: iso(Date.now() + d * DAY) }, { force: true });
  }
  await reconcileOnce(w.config);
  const file = writeConfig(w, (c) => {
    c.therapists = c.therapists.filter((t) => t.therapist_id !== "th_ben");
  });
  const unmapped = { ...w.config, therapists: w.config.therapists.filter((t) => t.therapist_id !== "th_ben") };
  await booked(w, unmapped, "th_ben", [3]);
  const cal = w.calendarOf("th_ben");
  expect(live(w, cal)).toHaveLength(2);
  expect((await linksOf(w, "th_ben")).map((l) => l.calendarId).sort()).toEqual(["", cal, cal]);

  const dry = await runCli("purge", "--therapist", "th_ben", "--dry-run", "--config", file);
  expect(dry.code, dry.stderr).toBe(0);
  expect(dry.stdout.split("\n").slice(1, 3)).toEqual([
    "  2 calbridge events to delete (past and future), 2 links to forget",
    "  and 1 records to forget of appointments calbridge saw while th_ben was not mapped: it never mirrored them",
  ]);
  const done = await runCli("purge", "--therapist", "th_ben", "--config", file);
  expect(done.code, done.stderr).toBe(0);
  expect(done.stdout.split("\n").at(-2)).toBe(
    "  deleted 2 events (0 were gone already), forgot 2 links and 1 records of appointments calbridge never mirrored",
  );
  expect(live(w, cal)).toEqual([]);
  expect(await linksOf(w, "th_ben")).toEqual([]);
  expect(live(w, w.calendarOf("th_anna"))).toHaveLength(1);
});
