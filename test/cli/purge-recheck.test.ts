// purge beside a leading daemon asks again before each deletion whether the daemon syncs the calendar: a reload that
// maps the therapist again while the purge runs stops it there (the events left are not deleted and keep their
// links), or the daemon would take the later deletions for the therapist's own and send them as cancellations.
import { afterEach, expect, it } from "vitest";
import { startWorld } from "../../src/simulator/world.ts";
import { leadingDaemon, runCli, writeConfig } from "./support.ts";

const DAY = 86_400_000;
const cleanups: (() => Promise<unknown>)[] = [];
afterEach(async () => {
  for (const c of cleanups.splice(0).reverse()) await c().catch(() => {});
});

it("stops when the daemon beside it maps the therapist again mid-purge: the rest is neither deleted nor forgotten", async () => {
  const w = await startWorld({
    therapists: ["th_anna", "th_ben"],
    configure: (c) => {
      c.sync = { ...c.sync, reconcile_cron: "0 0 1 1 *" };
    },
  });
  cleanups.push(() => w.close());
  const now = Date.now();
  w.booking.seed({ therapists: ["th_anna"], count: 4, from: now + DAY, to: now + 9 * DAY });
  // The daemon runs with (and its reloads change) a configuration of its own.
  const both = structuredClone(w.config);
  const app = await leadingDaemon(structuredClone(w.config), (stop) => cleanups.push(stop));
  const anna = w.calendarOf("th_anna");
  const live = () => w.google.events(anna).filter((e) => e.status !== "cancelled").length;
  const n = live(); // the seed cancels about one in ten
  expect(n).toBeGreaterThanOrEqual(3);
  // th_anna leaves the mapping: the daemon stops syncing her calendar, and purge may clean it beside the daemon.
  const onlyBen = { ...structuredClone(both), therapists: both.therapists.filter((t) => t.therapist_id === "th_ben") };
  await app.reload(onlyBen);
  const file = writeConfig(w, (c) => {
    c.therapists = c.therapists.filter((t) => t.therapist_id === "th_ben");
  });
  // While the first deletion is out, the admin maps th_anna again and reloads: the daemon syncs her calendar from then
  // on (its reload names the calendar in the store's watch ledger before it syncs it).
  let reloaded: Promise<unknown> | undefined;
  w.google.faults.holdNext(/^DELETE /, () => (reloaded = app.reload(structuredClone(both))));
  const res = await runCli("purge", "--therapist", "th_anna", "--force", "--config", file);
  await reloaded;
  expect(res.code, res.stdout + res.stderr).toBe(1);
  expect(res.stdout).toMatch(/deleted 1 events .*forgot \d+ links/);
  expect(res.stdout).toContain(`stopped with ${n - 1} events left (not deleted): a calbridge daemon leads this store`);
  expect(res.stdout).toMatch(/syncs th_anna's calendar/);
  // The one deleted while the reload went on may be put back by the daemon (its deletion fell in the new watch).
  expect(live()).toBeGreaterThanOrEqual(n - 1);
  // The daemon has the ones left, linked: nothing to write back for them.
  await app.reconcile();
  await app.engine.idle();
  expect(w.booking.requests.filter((r) => r.route.endsWith("/cancel"))).toEqual([]);
});
