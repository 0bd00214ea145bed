// A calendar handed over: th_anna leaves the mapping and her calendar is mapped to th_cleo. `purge --therapist
// th_anna` must never delete th_cleo's events there: beside a daemon that syncs the calendar for th_cleo it is refused
// (it checked th_anna's own entry of the watch ledger only, and deleted beside it); with no daemon, it deletes th_anna's
// events and leaves th_cleo's, also a past one whose link has expired (links are kept past_days + 2 days after the end),
// which it took for th_anna's because nothing recorded it.
import { afterEach, describe, expect, it } from "vitest";
import { eventIdFor } from "../../src/calendar/ids.ts";
import type { Config } from "../../src/config/schema.ts";
import { createApp } from "../../src/daemon/app.ts";
import { silentLogger } from "../../src/log.ts";
import { startWorld, type World } from "../../src/simulator/world.ts";
import { openStore } from "../../src/store/store.ts";
import { leadingDaemon, runCli, writeConfig } from "./support.ts";

const DAY = 86_400_000;
const iso = (ms: number) => new Date(ms).toISOString();
const cleanups: (() => Promise<unknown>)[] = [];
afterEach(async () => {
  for (const c of cleanups.splice(0).reverse()) await c().catch(() => {});
});

interface HandedOver {
  w: World;
  /** th_anna's calendar, th_cleo's now. */
  cal: string;
  /** The mapping after the hand-over: th_cleo on th_anna's calendar. */
  handed: Config;
  anna: string[];
  cleoPast: string;
  cleoNext: string;
}

/** th_anna's two appointments mirrored in her calendar; then th_cleo is mapped to it (th_anna removed). */
async function handedOver(): Promise<HandedOver> {
  const w = await startWorld({
    therapists: ["th_anna", "th_cleo"],
    mapped: ["th_anna"],
    configure: (c) => {
      c.sync = { ...c.sync, reconcile_cron: "0 0 1 1 *", window: { past_days: 30, future_days: 90 } };
    },
  });
  cleanups.push(() => w.close());
  const book = (t: string, at: number) =>
    String(w.booking.create({ therapist_id: t, start_time: iso(at) }, { force: true }).id);
  // One of th_anna's sessions is 60 days ahead: beyond th_cleo's window (below), the daemon leaves its event alone.
  const anna = [1, 60].map((d) => book("th_anna", Date.now() + d * DAY));
  const cleoPast = book("th_cleo", Date.now() - 20 * DAY);
  const cleoNext = book("th_cleo", Date.now() + 3 * DAY);
  await reconcileOnce(w.config);
  const handed = structuredClone(w.config);
  handed.therapists = [{ ...handed.therapists[0]!, therapist_id: "th_cleo" }];
  handed.sync.window = { past_days: 30, future_days: 30 };
  return { w, cal: w.calendarOf("th_anna"), handed, anna, cleoPast, cleoNext };
}

/** One reconciliation by a one-shot daemon on `config`. */
async function reconcileOnce(config: Config): Promise<void> {
  const app = await createApp(structuredClone(config), { logger: silentLogger, oneShot: true, listen: "127.0.0.1:0" });
  await app.reconcile();
  await app.stop(2000);
}

const live = (w: World, cal: string) =>
  w.google
    .events(cal)
    .filter((e) => e.status !== "cancelled")
    .map((e) => String(e.id));

/** th_cleo's past session has left the links (expired): nothing records whose it is. */
async function expireLink(w: World, appointmentId: string): Promise<void> {
  const store = await openStore(w.config.store.url);
  await store.table("links").delete(appointmentId);
  await store.close();
}

describe("purge in a calendar handed over to another therapist", () => {
  it("is refused beside a daemon that syncs the calendar for th_cleo: nothing deleted", async () => {
    const h = await handedOver();
    await leadingDaemon(structuredClone(h.handed), (stop) => cleanups.push(stop));
    const before = live(h.w, h.cal);
    expect(before).toEqual(expect.arrayContaining([eventIdFor(h.cleoPast), eventIdFor(h.cleoNext)]));
    await expireLink(h.w, h.cleoPast);
    const file = writeConfig(h.w, (c) => {
      c.therapists = h.handed.therapists;
    });

    const res = await runCli("purge", "--therapist", "th_anna", "--force", "--config", file);

    expect(res.code).toBe(1);
    expect(res.stderr).toContain(`a calbridge daemon leads this store`);
    expect(res.stderr).toContain(`syncs th_cleo's calendar ${h.cal}`);
    expect(res.stderr).toContain("nothing was deleted");
    expect(live(h.w, h.cal).sort()).toEqual(before.sort());
  });

  it("with no daemon, deletes th_anna's event and leaves th_cleo's, also one no link records", async () => {
    const h = await handedOver();
    await reconcileOnce(h.handed);
    await expireLink(h.w, h.cleoPast);
    const file = writeConfig(h.w, (c) => {
      c.therapists = h.handed.therapists;
    });

    const res = await runCli("purge", "--therapist", "th_anna", "--force", "--config", file);

    // The daemon took th_anna's event in its window for a copy left behind and removed it; the other one is purged.
    expect(res.code, res.stdout + res.stderr).toBe(0);
    expect(res.stdout).toContain(`1 calbridge events to delete (past and future), 2 links to forget`);
    expect(res.stdout).toContain(eventIdFor(h.anna[1]!));
    expect(res.stdout).toContain(`left alone: ${eventIdFor(h.cleoPast)}: no record; this calendar is th_cleo's now`);
    expect(res.stdout).toContain("deleted 1 events (0 were gone already), forgot 2 links");
    expect(live(h.w, h.cal).sort()).toEqual([eventIdFor(h.cleoPast), eventIdFor(h.cleoNext)].sort());
  });
});
