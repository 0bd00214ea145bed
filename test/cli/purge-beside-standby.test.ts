// purge beside a leading daemon is refused in a calendar the leader still syncs. The check reads the store's watch
// ledger, which only the leader writes (watched.ts): a standby started with an edited file (a therapist removed; the
// rolling update's new replica, or a second `calbridge run` on the SQLite file) must not take the therapist out of it
// while the leader still maps and syncs them, or purge would delete in that calendar and the leader would take the
// deletions for the therapist's own: cancellations.
import { afterEach, describe, expect, it } from "vitest";
import type { Config } from "../../src/config/schema.ts";
import type { App } from "../../src/daemon/app.ts";
import { startWorld } from "../../src/simulator/world.ts";
import { runCliProcess as cli, leadingDaemon, startedDaemon, writeConfig } from "./support.ts";

const DAY = 86_400_000;
const cleanups: (() => Promise<unknown>)[] = [];
afterEach(async () => {
  for (const c of cleanups.splice(0).reverse()) await c().catch(() => {});
});

const daemon = (config: Config, lead: boolean): Promise<App> =>
  (lead ? leadingDaemon : startedDaemon)(config, (stop) => cleanups.push(stop));

describe("purge beside a leader: the watch ledger a standby wrote", () => {
  it("refuses purge in a calendar the LEADER still syncs after a standby started with the edited file", async () => {
    const w = await startWorld({
      therapists: ["th_anna", "th_ben"],
      configure: (c) => {
        c.store = { ...c.store, lease_seconds: 2 };
        c.sync = {
          ...c.sync,
          reconcile_cron: "0 0 1 1 *",
          writeback: { cancel_grace_seconds: 0, reschedule_grace_seconds: 0 },
        };
      },
    });
    cleanups.push(() => w.close());
    const now = Date.now();
    w.booking.seed({ therapists: ["th_anna"], count: 2, from: now + DAY, to: now + 5 * DAY });

    // The leader: runs with both therapists mapped.
    const leader = await daemon(w.config, true);
    expect(w.google.events(w.calendarOf("th_anna")).filter((e) => e.status !== "cancelled").length).toBe(2);

    // Ops edit the file (th_anna leaves) and the second replica is (re)started with it first: it stands by.
    const onlyBen = { ...w.config, therapists: w.config.therapists.filter((t) => t.therapist_id === "th_ben") };
    const standby = await daemon(onlyBen, false);
    expect([leader.lease.isLeader, standby.lease.isLeader]).toEqual([true, false]);
    const file = writeConfig(w, (c) => {
      c.therapists = c.therapists.filter((t) => t.therapist_id === "th_ben");
    });

    const res = await cli(["purge", "--therapist", "th_anna", "--force", "--config", file]);
    // The leader still maps and syncs th_anna: the purge must be refused (README: "In a calendar the leading daemon
    // still syncs ... purge refuses (exit 1, nothing deleted").
    const cancelsBefore = w.booking.requests.filter((r) => r.route.endsWith("/cancel")).length;
    await leader.reconcile().catch(() => {});
    await leader.engine.idle();
    const cancels = w.booking.requests.filter((r) => r.route.endsWith("/cancel")).length - cancelsBefore;
    const live = w.google.events(w.calendarOf("th_anna")).filter((e) => e.status !== "cancelled").length;
    expect(live).toBe(2); // the leader wrote them again: the purge was for nothing
    expect({ code: res.code, stdout: res.stdout, cancels }).toEqual({ code: 1, stdout: "", cancels: 0 });
  });
});
