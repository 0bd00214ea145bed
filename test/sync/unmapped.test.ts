// A therapist removed from the mapping (#15): through the real daemon against the simulators, calbridge neither edits
// their events nor writes back for them (a moved or cancelled booking, a deleted event: nothing happens in their
// calendar or the booking service), names them in a log line at start, in /status and in doctor with the command that
// removes the events, and keeps counting their events; an appointment reassigned to a mapped therapist is written
// there, the removed therapist's copy left for the purge.
import { afterEach, describe, expect, it } from "vitest";
import { eventIdFor } from "../../src/calendar/ids.ts";
import { runDoctor } from "../../src/cli/doctor.ts";
import type { Config } from "../../src/config/schema.ts";
import { type App, createApp } from "../../src/daemon/app.ts";
import { silentLogger } from "../../src/log.ts";
import { startWorld, type World } from "../../src/simulator/world.ts";
import { deliver } from "../support/deliver.ts";
import { captureLog } from "../support/log-capture.ts";
import { DAY, iso } from "./support.ts";

const cleanups: (() => Promise<unknown>)[] = [];
afterEach(async () => {
  for (const c of cleanups.splice(0).reverse()) await c().catch(() => {});
});

async function daemon(config: Config, logger = silentLogger): Promise<App> {
  const app = await createApp(config, { logger, listen: "127.0.0.1:0", adminListen: "127.0.0.1:0", oneShot: true });
  cleanups.push(() => app.stop(3000));
  await app.start();
  return app;
}

const live = (world: World, t: string) =>
  world.google.events(world.calendarOf(t)).filter((e) => e.status !== "cancelled");

describe("a therapist removed from the mapping", () => {
  it("is left alone, reported at start, in /status and doctor, and never written back for", async () => {
    const world = await startWorld({
      therapists: ["th_anna", "th_ben"],
      configure: (c) => {
        c.sync = { ...c.sync, writeback: { cancel_grace_seconds: 0, reschedule_grace_seconds: 0 } };
      },
    });
    cleanups.push(() => world.close());
    const slot = (d: number) => iso(Date.now() + d * DAY + 10 * 3_600_000);
    const ids = [1, 2, 3].map((d) =>
      String(world.booking.create({ therapist_id: "th_ben", start_time: slot(d) }, { force: true }).id),
    );
    world.booking.create({ therapist_id: "th_anna", start_time: slot(1) }, { force: true });
    const first = await daemon(world.config);
    await first.reconcile();
    await first.stop(3000);
    expect(live(world, "th_ben")).toHaveLength(3);

    const config = structuredClone(world.config);
    config.therapists = config.therapists.filter((t) => t.therapist_id !== "th_ben");
    const log = captureLog("info");
    const app = await daemon(config, log.logger);
    const line = log.find((l) => l.level === 40 && String(l.msg).startsWith("therapists not in the mapping"));
    expect(line?.msg).toBe(
      "therapists not in the mapping still have calbridge events in their calendars, left alone: th_ben (3 events; `calbridge purge --therapist th_ben`)",
    );

    // The booking changes: moved, cancelled, reassigned; the therapist deletes an event. A reconciliation runs.
    const benCal = world.calendarOf("th_ben");
    const before = structuredClone(live(world, "th_ben"));
    world.booking.move(ids[0]!, slot(5), { force: true });
    world.booking.cancel(ids[1]!);
    world.booking.reassign(ids[2]!, "th_anna", { force: true });
    for (const e of world.booking.events.filter((x) => String(x.type).startsWith("appointment."))) {
      expect((await deliver(app, e)).status).toBe(200);
    }
    world.google.userDelete(benCal, eventIdFor(ids[0]!));
    await app.reconcile();
    await app.engine.drained();

    // Ben's calendar is as it was but for his own deletion; nothing went to the booking service.
    expect(live(world, "th_ben").map((e) => e.id)).toEqual(
      before.filter((e) => e.id !== eventIdFor(ids[0]!)).map((e) => e.id),
    );
    const benNow = world.google.event(benCal, eventIdFor(ids[1]!));
    expect(benNow?.updated).toBe(before.find((e) => e.id === eventIdFor(ids[1]!))?.updated);
    const writebacks = world.booking.requests.filter(
      (r) => r.route === "PATCH /v1/appointments/:id" || r.route === "POST /v1/appointments/:id/cancel",
    );
    expect(writebacks).toEqual([]);
    // The reassigned appointment is Anna's now, in her calendar; Ben's copy stays for the purge.
    expect(live(world, "th_anna").map((e) => e.id)).toContain(eventIdFor(ids[2]!));
    expect(world.google.event(benCal, eventIdFor(ids[2]!))?.status).toBe("confirmed");

    // Reported with the command that cleans up, in /status (JSON and HTML) and doctor.
    const report = await app.mappingReport();
    expect(report.unmapped).toEqual([
      {
        therapistId: "th_ben",
        events: 2,
        calendarIds: [benCal],
        purge: "calbridge purge --therapist th_ben",
      },
    ]);
    const status = (await (await fetch(`${app.admin!.url}/status`)).json()) as {
      mapping: { unmapped: unknown[] };
    };
    expect(status.mapping.unmapped).toEqual(report.unmapped);
    expect(await (await fetch(`${app.admin!.url}/status.html`)).text()).toContain(
      "<code>calbridge purge --therapist th_ben</code>",
    );
    const check = (await runDoctor(app)).find((c) => c.name === "mapping: th_ben");
    expect(check).toMatchObject({
      status: "warn",
      fix: expect.stringContaining("`calbridge purge --therapist th_ben`"),
    });
  });
});
