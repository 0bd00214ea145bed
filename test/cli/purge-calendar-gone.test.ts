// A therapist leaves and their Google calendar is deleted. doctor (and the start's log, /status) recommend `calbridge
// purge --therapist th_ben` for calbridge's events there, but that purge failed with Google's raw 404 (`events.list
// ...: 404 notFound`) and a log line to check therapists[].calendar_id (th_ben is in no mapping), and forgot nothing:
// the same advice came back until the links expired. Now purge says the calendar is not found and deletes nothing;
// `--forget-links` (only for a calendar Google does not find) forgets its links and the record of events left there.
import { afterEach, describe, expect, it } from "vitest";
import { systemClock } from "../../src/clock.ts";
import { startWorld, type World } from "../../src/simulator/world.ts";
import { openStore } from "../../src/store/store.ts";
import { LeftBehindEvents } from "../../src/sync/left-behind.ts";
import type { Link } from "../../src/sync/types.ts";
import { reconcileOnce, runCli, writeConfig } from "./support.ts";

const DAY = 86_400_000;
const iso = (ms: number) => new Date(ms).toISOString();
const cleanups: (() => Promise<unknown>)[] = [];
afterEach(async () => {
  for (const c of cleanups.splice(0).reverse()) await c().catch(() => {});
});

/** Anna and Ben with three appointments each, mirrored; then th_ben leaves the mapping (the file written). */
async function benLeft(): Promise<{ w: World; file: string; cal: string }> {
  const w = await startWorld({ therapists: ["th_anna", "th_ben"] });
  cleanups.push(() => w.close());
  for (const t of ["th_anna", "th_ben"]) {
    for (const d of [1, 2, 3]) {
      w.booking.create({ therapist_id: t, start_time: iso(Date.now() + d * DAY) }, { force: true });
    }
  }
  await reconcileOnce(w.config);
  const file = writeConfig(w, (c) => {
    c.therapists = c.therapists.filter((t) => t.therapist_id !== "th_ben");
  });
  return { w, file, cal: w.calendarOf("th_ben") };
}

async function stored(w: World): Promise<{ links: Link[]; leftBehind: number }> {
  const store = await openStore(w.config.store.url);
  try {
    const links: Link[] = [];
    for await (const [, l] of store.table<Link>("links").entries()) links.push(l);
    return { links, leftBehind: (await new LeftBehindEvents(store, systemClock).all()).length };
  } finally {
    await store.close();
  }
}

const linksOf = (links: Link[], t: string) => links.filter((l) => l.therapistId === t).length;

describe("purge of a calendar Google no longer finds", () => {
  it("deletes nothing and says so; --forget-links forgets the links and the record, and doctor stops advising it", async () => {
    const { w, file, cal } = await benLeft();
    w.google.deleteCalendar(cal);
    const store = await openStore(w.config.store.url);
    await new LeftBehindEvents(store, systemClock).add("th_ben", cal, "notFound");
    await store.close();
    const doctor = await runCli("doctor", "--config", file);
    expect(doctor.stdout).toContain("fix: remove them with `calbridge purge --therapist th_ben`");
    expect(doctor.stdout).toContain(
      "if their calendar no longer exists, `calbridge purge --therapist th_ben --forget-links`",
    );

    const r = await runCli("purge", "--therapist", "th_ben", "--force", "--config", file);
    expect(r.code).toBe(1);
    expect(r.stdout).toContain(
      `calendar ${cal} not found (deleted, or not shared with these credentials): nothing deleted`,
    );
    expect(r.stdout).toContain(
      `if it was deleted, \`calbridge purge --therapist th_ben --calendar ${cal} --forget-links\` forgets its 3 links`,
    );
    expect(r.stderr).not.toContain("therapists[].calendar_id");
    expect(r.stderr).not.toContain("404");
    const dry = await runCli("purge", "--therapist", "th_ben", "--forget-links", "--dry-run", "--config", file);
    expect(dry.code, dry.stdout + dry.stderr).toBe(0);
    expect(dry.stdout).toContain("--forget-links: 3 links to forget, and the record of events left there");
    expect(await stored(w)).toMatchObject({ leftBehind: 1 });
    expect(linksOf((await stored(w)).links, "th_ben")).toBe(3);

    const forgot = await runCli("purge", "--therapist", "th_ben", "--forget-links", "--config", file);
    expect(forgot.code, forgot.stdout + forgot.stderr).toBe(0);
    expect(forgot.stdout).toContain("forgot 3 links and the record of events left there; nothing was deleted");
    const after = await stored(w);
    expect([linksOf(after.links, "th_ben"), linksOf(after.links, "th_anna"), after.leftBehind]).toEqual([0, 3, 0]);
    const doctorAfter = await runCli("doctor", "--config", file);
    expect(doctorAfter.stdout).not.toContain("calbridge purge --therapist th_ben");
    expect(w.google.events(w.calendarOf("th_anna")).filter((e) => e.status !== "cancelled")).toHaveLength(3);
  });

  it("--forget-links on a calendar that answers deletes and forgets nothing", async () => {
    const { w, file, cal } = await benLeft();
    const r = await runCli("purge", "--therapist", "th_ben", "--forget-links", "--force", "--config", file);
    expect(r.code).toBe(1);
    expect(r.stdout).toContain(
      `--forget-links is for a calendar Google does not find; ${cal} answers: nothing was deleted or forgotten`,
    );
    expect(w.google.events(cal).filter((e) => e.status !== "cancelled")).toHaveLength(3);
    expect(linksOf((await stored(w)).links, "th_ben")).toBe(3);
  });
});
