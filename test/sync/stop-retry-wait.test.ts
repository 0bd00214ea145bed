// A stop gives up at once the syncs that wait having sent nothing (README, "stop"): their webhook events stay in the
// inbox for the next start. A webhook sync whose booking read failed (503s: nothing sent anywhere) and that waited to
// retry was not among them (only a wait for an unavailable calendar was): the stop waited its whole grace for it.
import { afterEach, expect, it } from "vitest";
import { openStore } from "../../src/store/store.ts";
import { captureLog } from "../support/log-capture.ts";
import { DAY, daemonHarness, type Harness, iso } from "./support.ts";

let h: Harness | undefined;
afterEach(async () => {
  await h?.close();
  h = undefined;
});
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

it("a stop gives up at once a webhook sync waiting to retry after a read that failed (nothing sent)", async () => {
  const log = captureLog();
  const x = await daemonHarness({ therapists: 1, logger: log.logger, engine: { baseMs: 60_000 } });
  h = x;
  const appt = x.world.booking.create({ therapist_id: "th_1", start_time: iso(Date.now() + 3 * DAY) }, { force: true });
  const id = String(appt.id);
  for (let i = 0; i < 2; i++) {
    await x.world.booking.webhooksIdle();
    await x.app.processor.idle();
    await x.app.engine.idle();
  }
  // The appointment changes; the sync of its appointment.updated reads it, and the booking service answers 503.
  x.world.booking.faults.failNext(1000, 503, { method: "GET", path: `/v1/appointments/${id}` });
  x.world.booking.setNotes(id, "changed");
  await x.world.booking.webhooksIdle();
  for (let i = 0; i < 1000 && !log.lines.some((l) => l.msg === "sync failed"); i++) await sleep(20);
  expect(
    log.lines.some((l) => l.msg === "sync failed"),
    "the sync failed once and waits to retry",
  ).toBe(true);
  expect(x.app.engine.queueDepth).toBe(1);
  expect(x.app.engine.load.running).toBe(0);
  const sent = x.world.google.requestLog.length;

  const began = Date.now();
  await x.app.stop(20_000);
  const took = Date.now() - began;
  const exceeded = log.lines.find((l) => String(l.msg).includes("stop grace exceeded"));
  expect(x.world.google.requestLog.length).toBe(sent);
  expect(exceeded?.unfinished ?? [], "work the stop waited for until its grace ran out").toEqual([]);
  // Far below the grace it would have waited out (20 s).
  expect(took, "ms the stop took").toBeLessThan(10_000);
  // The event was not lost: it waits in the inbox for the next start.
  const store = await openStore(x.world.config.store.url);
  const open: string[] = [];
  for await (const [key, entry] of store.table<{ type?: string; doneAt?: string }>("inbox").entries())
    if (entry.doneAt === undefined && entry.type === "appointment.updated") open.push(key);
  await store.close();
  expect(open).toHaveLength(1);
}, 60_000);
