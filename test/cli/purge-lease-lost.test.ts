// purge with no daemon beside it holds the store's leader lease while it deletes; a lease it loses meanwhile (a
// renewal that did not reach the store in time, and another process took the lease) stops it before its next
// deletion: a daemon may lead now and sync the calendar, and would take the deletions for the therapist's own.
import { afterEach, expect, it } from "vitest";
import { createApp } from "../../src/daemon/app.ts";
import { startWorld } from "../../src/simulator/world.ts";
import { LEASE_ROW_KEY, openStore } from "../../src/store/store.ts";
import { captureLog } from "../support/log-capture.ts";
import { runCli, writeConfig } from "./support.ts";

const DAY = 86_400_000;
const cleanups: (() => Promise<unknown>)[] = [];
afterEach(async () => {
  for (const c of cleanups.splice(0).reverse()) await c().catch(() => {});
});

it("stops before the next deletion once the command has lost the lease: the rest is neither deleted nor forgotten", async () => {
  const w = await startWorld({
    therapists: ["th_anna", "th_ben"],
    configure: (c) => {
      c.store = { ...c.store, lease_seconds: 2 };
    },
  });
  cleanups.push(() => w.close());
  const now = Date.now();
  w.booking.seed({ therapists: ["th_anna"], count: 4, from: now + DAY, to: now + 9 * DAY });
  // A run mirrored th_anna's bookings; then she left the mapping, and no daemon runs.
  const app = await createApp(structuredClone(w.config), { logger: captureLog("error").logger, oneShot: true });
  await app.reconcile();
  await app.stop(2000);
  const anna = w.calendarOf("th_anna");
  const live = () => w.google.events(anna).filter((e) => e.status !== "cancelled").length;
  const n = live();
  expect(n).toBeGreaterThanOrEqual(3);
  const file = writeConfig(w, (c) => {
    c.therapists = c.therapists.filter((t) => t.therapist_id === "th_ben");
  });

  // While the first deletion is out, another process takes the lease (the command's renewal then finds it gone).
  const store = await openStore(w.config.store.url);
  cleanups.push(() => store.close());
  w.google.faults.holdNext(/^DELETE /, async () => {
    const meta = store.table<Record<string, unknown>>("meta");
    const held = await meta.get(LEASE_ROW_KEY);
    expect(held).toBeDefined();
    // A daemon on another host: its liveness cannot be told from here, so the lease is not taken back.
    const thief = { holder: "other-host:4242:thief", host: "other-host", pid: 4242, until: Date.now() + 60_000 };
    await meta.set(LEASE_ROW_KEY, { ...held, ...thief });
    await new Promise((r) => setTimeout(r, 1500)); // past the command's next renewal (every 667 ms)
  });
  const res = await runCli("purge", "--therapist", "th_anna", "--force", "--config", file);
  expect(res.code, res.stdout + res.stderr).toBe(1);
  expect(res.stdout).toMatch(/deleted 1 events /);
  expect(res.stdout).toContain(
    `stopped with ${n - 1} events left (not deleted): this command no longer holds the store's leader lease`,
  );
  expect(live()).toBe(n - 1);
});
