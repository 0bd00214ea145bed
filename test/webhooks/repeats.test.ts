// The spec: "Deliveries may repeat, so receivers must handle duplicates (event `id` identifies an event)." With the
// booking simulator sending every successful delivery twice, each event is applied once: the second copy is
// acknowledged as a duplicate, and the calendar sees one write per change.
import { afterEach, expect, it } from "vitest";
import { eventIdFor } from "../../src/calendar/ids.ts";
import { DAY, daemonHarness, type Harness } from "../sync/support.ts";

let h: Harness | undefined;
afterEach(async () => {
  await h?.close();
  h = undefined;
});

it("a delivery the service repeats is applied once and acknowledged as a duplicate", async () => {
  h = await daemonHarness({ therapists: 1 });
  h.world.booking.webhookRepeatRate = 1;
  const settle = async () => {
    for (let i = 0; i < 2; i++) {
      await h!.world.booking.webhooksIdle();
      await h!.app.processor.idle();
      await h!.app.engine.idle();
    }
  };
  const start = new Date(Date.now() + 2 * DAY);
  start.setUTCHours(9, 0, 0, 0);
  const ids: string[] = [];
  for (let i = 0; i < 3; i++) {
    const at = new Date(start.getTime() + i * 3_600_000).toISOString();
    ids.push(String(h.world.booking.create({ therapist_id: "th_1", start_time: at }, { force: true }).id));
  }
  await settle();
  const before = h.writes();
  h.world.booking.move(ids[0]!, new Date(start.getTime() + 5 * 3_600_000).toISOString());
  await settle();

  const deliveries = h.world.booking.deliveries;
  expect(deliveries.length).toBe(4);
  for (const d of deliveries) expect(d.attempts.map((a) => a.status)).toEqual([200, 200]);
  const bodies = deliveries.flatMap((d) => d.attempts.map((a) => a.responseBody ?? ""));
  expect(bodies.filter((b) => b.includes('"duplicate":true'))).toHaveLength(4);
  // One calendar write for the one change, and each appointment's one event in place.
  expect(h.writes() - before).toBe(1);
  const cal = h.world.calendarOf("th_1");
  for (const id of ids) expect(h.world.google.event(cal, eventIdFor(id))?.status).toBe("confirmed");
  expect(h.live("th_1")).toHaveLength(3);
});
