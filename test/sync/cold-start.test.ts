// A cold start of 1,000 appointments on the Standard plan (60 requests a window; the simulator's minute scaled to a
// second) through the daemon with enrichments on: the reconciliation is not held up by them, they use only leftover
// budget, never a 429, and in the end every event shows its notes with one read per event.
import { afterEach, describe, expect, it } from "vitest";
import { eventIdFor } from "../../src/calendar/ids.ts";
import { DAY, type Harness, harness } from "./support.ts";

let h: Harness | undefined;
afterEach(async () => {
  await h?.close();
  h = undefined;
});

const gets = (x: Harness) => x.world.booking.requests.filter((r) => r.route === "GET /v1/appointments/:id").length;

describe("cold start on the Standard plan", () => {
  it("mirrors 1,000 appointments at once, then enriches them with leftover budget and 0 x 429", async () => {
    h = await harness({ therapists: 10, rateLimit: { limit: 60, windowMs: 1_000 } });
    const now = Date.now();
    h.world.booking.seed({ therapists: h.world.therapists, count: 1000, from: now + 3_600_000, to: now + 60 * DAY });
    const all = h.world.booking.all();
    const live = all.filter((a) => a.status !== "cancelled");
    await h.app.start();

    const report = await h.app.reconcile();
    expect(report.ok).toBe(true);
    expect(report.counts).toEqual({ create: live.length });
    expect(h.world.booking.requests.filter((r) => r.route === "GET /v1/appointments")).toHaveLength(10);
    expect(report.enrichment).toMatchObject({ pending: live.length, perMinute: 54 });
    // Not held up: the run is over while most enrichments still wait (they run on a worker of their own, with what
    // budget is left).
    const readDuringRun = gets(h);
    expect(readDuringRun).toBeLessThan(live.length / 2);

    await h.app.engine.drained();
    const stats = h.world.booking.stats();
    expect(stats.rateLimited).toBe(0);
    expect(stats.maxPerWindow).toBeLessThanOrEqual(60);
    expect(gets(h)).toBe(live.length);
    for (const a of live.filter((x) => x.notes).slice(0, 50)) {
      const ev = h.world.google.event(h.world.calendarOf(String(a.therapist_id)), eventIdFor(String(a.id)));
      expect(ev?.description).toBe(`Booking ${a.id}\n${String(a.notes)}`);
    }
  }, 120_000);
});
