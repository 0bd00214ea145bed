// An authentic webhook larger than webhooks.max_body_bytes, end to end: the booking service's own deliveries to the
// real daemon. The spec names no limit on body or field sizes, and a refused delivery is retried 7 times before the
// endpoint is disabled; so each such delivery is acknowledged (and kept in the dead letters, never read as an
// event), the endpoint stays enabled, and the reconciliation, which reads the bookings itself, mirrors them.
import { afterEach, describe, expect, it } from "vitest";
import { ManualClock } from "../../src/clock.ts";
import { daemonHarness, type Harness } from "../sync/support.ts";

let x: Harness | undefined;
afterEach(async () => {
  await x?.close();
  x = undefined;
});

const DAY = 86_400_000;

describe("a correctly signed webhook over webhooks.max_body_bytes", () => {
  it("is acknowledged and set aside, the endpoint stays enabled, and the reconciliation mirrors its appointment", async () => {
    const clock = new ManualClock(Date.parse("2026-11-23T08:00:00Z"));
    x = await daemonHarness({
      clock,
      therapists: 1,
      // Smaller than any appointment event the simulator sends: every delivery is "too large".
      configure: (c) => {
        c.webhooks = { ...c.webhooks, max_body_bytes: 64 };
      },
    });
    const start = new Date(clock.now() + 2 * DAY);
    start.setUTCHours(10, 0, 0, 0);
    const appt = x.world.booking.create({ therapist_id: "th_1", start_time: start.toISOString() }, { force: true });
    await x.world.booking.webhooksIdle();
    await x.app.processor.idle();
    await x.app.engine.idle();

    const deliveries = x.world.booking.deliveries;
    expect(deliveries.length).toBeGreaterThan(0);
    for (const d of deliveries) {
      expect(d.state).toBe("delivered");
      expect(d.attempts.map((a) => a.status)).toEqual([200]);
      expect(Buffer.byteLength(d.body)).toBeGreaterThan(64);
    }
    for (const ep of x.world.booking.webhookEndpoints()) expect(ep.enabled).toBe(true);
    // Not read as an event: nothing in the calendar yet.
    expect(x.live("th_1")).toEqual([]);
    const letters: string[] = [];
    for await (const [key] of x.app.inbox.deadLetters()) letters.push(key);
    expect(letters).toHaveLength(deliveries.length);
    for (const key of letters) expect(key).toMatch(/^oversized:/);

    await x.app.reconcile();
    await x.app.engine.idle();
    const live = x.live("th_1");
    expect(live).toHaveLength(1);
    expect(Date.parse((live[0]!.start as { dateTime: string }).dateTime)).toBe(start.getTime());
    expect(appt.status).toBe("confirmed");
  });
});
