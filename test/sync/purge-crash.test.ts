// `calbridge purge` deleted every event first and forgot the links afterwards: a purge of a therapist still mapped (one
// leaving) that died in between (killed, the store failing) left live links to deleted events, which the daemon took
// for the therapist's deletions, and cancelled every appointment. A link is now marked as the purge's before its event
// is deleted, and what finds a purge's calendars (the purge itself, the mapping report) still counts those marked.
import { afterEach, expect, it } from "vitest";
import { systemClock } from "../../src/clock.ts";
import { createApp } from "../../src/daemon/app.ts";
import { silentLogger } from "../../src/log.ts";
import { startWorld, type World } from "../../src/simulator/world.ts";
import { openStore } from "../../src/store/store.ts";
import { LinkStore } from "../../src/sync/links.ts";
import { Mapping } from "../../src/sync/mapping.ts";
import { mappingReport } from "../../src/sync/mapping-report.ts";
import { reconcileOnce, runCli, writeConfig } from "../cli/support.ts";
import { DAY } from "./support.ts";

const cleanups: (() => Promise<unknown>)[] = [];
afterEach(async () => {
  for (const c of cleanups.splice(0).reverse()) await c().catch(() => {});
});

async function mirroredWorld(): Promise<World> {
  const w = await startWorld({
    therapists: ["th_anna", "th_ben"],
    configure: (c) => {
      c.sync = { ...c.sync, writeback: { cancel_grace_seconds: 0, reschedule_grace_seconds: 0 } };
    },
  });
  cleanups.push(() => w.close());
  const now = Date.now();
  w.booking.seed({ therapists: ["th_anna"], count: 3, from: now + DAY, to: now + 9 * DAY });
  w.booking.seed({ therapists: ["th_ben"], count: 6, from: now + DAY, to: now + 9 * DAY });
  await reconcileOnce(w.config);
  return w;
}

const live = (w: World, t: string) => w.google.events(w.calendarOf(t)).filter((e) => e.status !== "cancelled");
const confirmed = (w: World, t: string) =>
  w.booking.all().filter((a) => a.therapist_id === t && a.status === "confirmed").length;

it("a purge of a mapped therapist that dies before forgetting the links cancels nothing", async () => {
  const w = await mirroredWorld();
  const events = live(w, "th_anna").length;
  expect(events).toBeGreaterThan(1);
  const before = confirmed(w, "th_anna");
  // The first forget fails: the purge dies there, its deletions done.
  const forget = LinkStore.prototype.forget;
  cleanups.push(async () => {
    LinkStore.prototype.forget = forget;
  });
  LinkStore.prototype.forget = () => Promise.reject(new Error("simulated crash before the links are forgotten"));
  const res = await runCli("purge", "--therapist", "th_anna", "--force", "--config", writeConfig(w));
  LinkStore.prototype.forget = forget;
  expect(res.code).not.toBe(0);
  expect(live(w, "th_anna")).toHaveLength(0);

  // The daemon runs again, th_anna still mapped: it writes her events again, and sends nothing.
  const d = await createApp(structuredClone(w.config), { logger: silentLogger, oneShot: true, listen: "127.0.0.1:0" });
  cleanups.push(() => d.stop(2000));
  await d.start();
  for (let i = 0; i < 2; i++) {
    await d.reconcile();
    for (const t of ["th_anna", "th_ben"]) await d.poller.poll(t);
    await d.engine.idle();
  }
  expect(w.booking.requests.filter((r) => r.route.endsWith("/cancel"))).toHaveLength(0);
  expect(confirmed(w, "th_anna")).toBe(before);
  expect(live(w, "th_anna")).toHaveLength(events);
});

it("a purge of an unmapped therapist stopped by failed deletions is still reported, and run again finishes", async () => {
  const w = await mirroredWorld();
  const n = live(w, "th_ben").length;
  expect(n).toBeGreaterThan(2);
  const file = writeConfig(w, (c) => {
    c.therapists = c.therapists.filter((t) => t.therapist_id !== "th_ben");
  });
  // Every deletion is refused (403: not tried again): each link is marked as the purge's, its event still there.
  w.google.faults.next(n, { status: 403, reason: "forbidden", match: /^DELETE / });
  const first = await runCli("purge", "--therapist", "th_ben", "--force", "--config", file);
  expect(first.code).toBe(1);
  expect(live(w, "th_ben")).toHaveLength(n);

  const unmapped = structuredClone(w.config);
  unmapped.therapists = unmapped.therapists.filter((t) => t.therapist_id !== "th_ben");
  const store = await openStore(w.config.store.url);
  const mapping = new Mapping(unmapped, new Map());
  const report = await mappingReport(new LinkStore(store, mapping, systemClock), mapping, { all: async () => [] });
  await store.close();
  expect(report.unmapped).toMatchObject([{ therapistId: "th_ben", events: n }]);

  const again = await runCli("purge", "--therapist", "th_ben", "--force", "--config", file);
  expect(again.code, again.stdout + again.stderr).toBe(0);
  expect(again.stdout).toContain(`deleted ${n} events (0 were gone already), forgot ${n} links`);
  expect(live(w, "th_ben")).toHaveLength(0);
  expect(w.booking.requests.filter((r) => r.route.endsWith("/cancel"))).toHaveLength(0);
});
