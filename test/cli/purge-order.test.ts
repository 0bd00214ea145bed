// Tests the order of `calbridge purge --dry-run`'s list of events to delete: by start time. It sorted Google's dateTime
// strings as text, and Google writes each with the offset in force at that instant (or of the event's own zone), so
// on the night the clocks go back a later appointment (02:00+01:00) was listed before an earlier one (02:15+02:00).
import { afterEach, expect, it } from "vitest";
import { eventIdFor } from "../../src/calendar/ids.ts";
import { createApp } from "../../src/daemon/app.ts";
import { silentLogger } from "../../src/log.ts";
import { startWorld, type World } from "../../src/simulator/world.ts";
import { runCli, writeConfig } from "./support.ts";

let world: World | undefined;
afterEach(async () => {
  await world?.close();
  world = undefined;
});

it("purge's dry run lists events in time order on the fall-back night (Europe/Berlin)", async () => {
  world = await startWorld({
    therapists: ["th_anna"],
    configure: (c) => {
      c.sync = { ...c.sync, window: { past_days: 60, future_days: 90 } };
    },
  });
  // 02:15 CEST (00:15Z), then 02:00 CET (01:00Z) an hour later in real time.
  const first = String(
    world.booking.create({ therapist_id: "th_anna", start_time: "2026-10-25T00:15:00Z" }, { force: true }).id,
  );
  const second = String(
    world.booking.create({ therapist_id: "th_anna", start_time: "2026-10-25T01:00:00Z" }, { force: true }).id,
  );
  const app = await createApp(world.config, { logger: silentLogger, oneShot: true, listen: "127.0.0.1:0" });
  await app.reconcile();
  await app.engine.idle();
  await app.stop(2000);
  const file = writeConfig(world);
  const dry = await runCli("purge", "--therapist", "th_anna", "--dry-run", "--config", file);
  expect(dry.code, dry.stderr).toBe(0);
  const a = dry.stdout.indexOf(eventIdFor(first));
  const b = dry.stdout.indexOf(eventIdFor(second));
  expect(a).toBeGreaterThan(-1);
  expect(b).toBeGreaterThan(-1);
  // The earlier appointment first.
  expect({ earlierListedFirst: a < b, out: dry.stdout }).toMatchObject({ earlierListedFirst: true });
});
