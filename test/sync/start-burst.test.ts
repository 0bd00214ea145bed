// A start reads every calendar in full (each one's first poll, the first reconciliation's listings), a few at once
// (CALENDAR_READS_AT_ONCE) rather than all of them at once: counted as list requests in flight at the emulator.
import { afterEach, describe, expect, it } from "vitest";
import type { RequestLogEntry } from "../../src/simulator/calendar/index.ts";
import { CALENDAR_READS_AT_ONCE } from "../../src/sync/calendar-reads.ts";
import { type Harness, harness } from "./support.ts";

let h: Harness | undefined;
afterEach(async () => {
  h?.app.poller.stop();
  await h?.close();
  h = undefined;
});

const THERAPISTS = 40;

const isList = (r: RequestLogEntry) => r.method === "GET" && /^\/calendar\/v3\/calendars\/[^/]+\/events$/.test(r.path);

/** Runs `work` while counting the emulator's list requests not answered yet; resolves with the most at one time. */
async function mostListsInFlight(log: readonly RequestLogEntry[], work: () => Promise<unknown>): Promise<number> {
  let most = 0;
  const sample = setInterval(() => {
    most = Math.max(most, log.filter((r) => isList(r) && r.status === 0).length);
  }, 2);
  try {
    await work();
  } finally {
    clearInterval(sample);
  }
  return most;
}

describe("the start's calendar reads", () => {
  it("first polls: at most CALENDAR_READS_AT_ONCE at once, and every calendar polled", async () => {
    h = await harness({ therapists: THERAPISTS, google: { latencyMs: 60 } });
    const { app, world } = h;
    const most = await mostListsInFlight(world.google.requestLog, async () => {
      app.poller.start();
      for (let t = 0; t < 20_000 && !world.therapists.every((id) => app.poller.covers(id)); t += 10) {
        await new Promise((r) => setTimeout(r, 10));
      }
    });
    expect(world.therapists.every((id) => app.poller.covers(id))).toBe(true);
    expect(most).toBeGreaterThan(1);
    expect(most).toBeLessThanOrEqual(CALENDAR_READS_AT_ONCE);
  });

  it("a reload during the first polls (the poller stopped and started again): every calendar still polled", async () => {
    h = await harness({ therapists: THERAPISTS, google: { latencyMs: 60 } });
    const { app, world } = h;
    app.poller.start();
    // Some first polls are running, most are queued behind them: the stop drops the queued ones.
    for (let t = 0; t < 5_000 && !world.google.requestLog.some(isList); t += 5) {
      await new Promise((r) => setTimeout(r, 5));
    }
    expect(world.therapists.filter((id) => app.poller.covers(id)).length).toBeLessThan(THERAPISTS);
    app.poller.stop();
    app.poller.start();
    for (let t = 0; t < 20_000 && !world.therapists.every((id) => app.poller.covers(id)); t += 10) {
      await new Promise((r) => setTimeout(r, 10));
    }
    expect(world.therapists.filter((id) => !app.poller.covers(id))).toEqual([]);
  });

  it("the first reconciliation's full listings: at most CALENDAR_READS_AT_ONCE at once, and every calendar listed", async () => {
    h = await harness({ therapists: THERAPISTS, google: { latencyMs: 60 } });
    const { app, world } = h;
    let report: Awaited<ReturnType<typeof app.reconcile>> | undefined;
    const most = await mostListsInFlight(world.google.requestLog, async () => {
      report = await app.reconcile();
    });
    expect(report?.calendarErrors ?? {}).toEqual({});
    const listed = new Set(world.google.requestLog.filter(isList).map((r) => r.path));
    expect(listed.size).toBe(THERAPISTS);
    expect(most).toBeGreaterThan(1);
    expect(most).toBeLessThanOrEqual(CALENDAR_READS_AT_ONCE);
  });
});
