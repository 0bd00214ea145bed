// Events an earlier build wrote carry no times mark (calbridge_times). The mark stays out of the fingerprint, so a warm
// reconciliation by this build rewrites none of them (the benchmark's warm run writes nothing); the mark comes with the
// next write that happens anyway, and until then the event's times are read against its record, as before.
import { afterEach, expect, it } from "vitest";
import { TIMES_PROPERTY } from "../../src/calendar/ids.ts";
import type { RenderedEvent } from "../../src/calendar/render.ts";
import { restart } from "./crash.ts";
import { DAY, type Harness, harness } from "./support.ts";

let h: Harness | undefined;
afterEach(async () => {
  await h?.close();
  h = undefined;
});

const markOf = (ev: Record<string, unknown> | undefined) =>
  (ev?.extendedProperties as { private?: Record<string, string> } | undefined)?.private?.[TIMES_PROPERTY];
const marked = (ev: Record<string, unknown>) => markOf(ev) !== undefined;

it("a warm reconciliation writes nothing to events without the mark; a booking change writes it with the change", async () => {
  // Templates a listing renders in full: no enrichment writes after it (only what the mark could cause is counted).
  h = await harness({
    therapists: 3,
    configure: (c) => {
      c.event = { preset: "booking_only" };
    },
  });
  const now = Date.now();
  h.world.booking.seed({ therapists: h.world.therapists, count: 200, from: now + DAY, to: now + 30 * DAY });
  // The earlier build: the same events, without the mark.
  const fx = h.app.sync.fx;
  const write = fx.write.bind(fx);
  fx.write = (therapistId, kind, body, ...rest) => {
    const { [TIMES_PROPERTY]: _, ...marks } = body.extendedProperties.private;
    const old: RenderedEvent = { ...body, extendedProperties: { private: marks } };
    return write(therapistId, kind, old, ...rest);
  };
  expect((await h.app.reconcile()).ok).toBe(true);
  expect(h.allLive().length).toBeGreaterThan(150);
  expect(h.allLive().filter(marked)).toEqual([]);

  h = await restart(h); // this build
  const writes = h.writes();
  const warm = await h.app.reconcile();
  expect(warm.ok).toBe(true);
  expect(warm.plan).toEqual([]);
  for (const t of h.world.therapists) await h.app.poller.poll(t);
  await h.app.engine.idle();
  expect(h.writes()).toBe(writes);
  expect(h.allLive().filter(marked)).toEqual([]);

  const appt = h.world.booking.all().find((a) => a.status === "confirmed")!;
  h.world.booking.move(String(appt.id), Date.parse(String(appt.start_time)) + 2 * 3_600_000, { force: true });
  await h.app.reconcile();
  expect(h.writes()).toBe(writes + 1);
  const written = h.allLive().filter(marked);
  expect(written).toHaveLength(1);
  expect(await h.app.sync.links.get(String(appt.id))).toMatchObject({ timesMark: markOf(written[0]) });
});
