// Webhooks that come late, or into a sync already failing: a creation's payload delivered again hours later is never
// applied over what calbridge knows since, and a webhook joining a chain of retries gets tries of its own.
import { afterEach, describe, expect, it } from "vitest";
import { DAY, daemonHarness, type Harness, liveOf, mirrored, quiet, settle } from "./support.ts";

let h: Harness | undefined;
afterEach(async () => {
  await h?.close();
  h = undefined;
});

const HOUR = 3_600_000;
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
const endpoints = (x: Harness, on: boolean) => {
  for (const e of x.world.booking.webhookEndpoints()) x.world.booking.setWebhookEndpointEnabled(e.id, on);
};

it("a late appointment.created does not bring back the customer's old name", async () => {
  h = await daemonHarness({
    therapists: 1,
    configure: (c) => {
      c.event = { ...c.event, preset: "initials" };
    },
  });
  const x = h;
  const cal = x.world.calendarOf("th_1");
  endpoints(x, false);
  const mark = x.world.booking.events.length;
  const start = new Date(Date.now() + 3 * DAY);
  start.setUTCHours(10, 0, 0, 0);
  const booked = x.world.booking.create(
    {
      therapist_id: "th_1",
      start_time: start.toISOString(),
      customer: { name: "Anna Berg", email: "anna@example.test" },
    },
    { force: true },
  );
  const id = String(booked.id);
  const created = x.world.booking.events
    .slice(mark)
    .find((e) => (e as { type?: string }).type === "appointment.created") as Record<string, unknown>;
  expect(created).toBeDefined();
  // The endpoint is down: the reconciliation mirrors it from its list item (no updated_at: the link's clock is 0).
  await x.app.reconcile();
  expect(String(liveOf(x, cal, id)[0]?.summary)).toMatch(/A\.? ?B/);
  endpoints(x, true);
  x.world.booking.updateCustomer(String(booked.customer_id), { name: "Clara Dorn" });
  await quiet(x);
  expect(String(liveOf(x, cal, id)[0]?.summary)).toMatch(/C\.? ?D/);
  // The service's retry of the first delivery, hours later (same id, same created_at): read, not applied.
  x.world.booking.sendEvent(created);
  await quiet(x);
  expect(String(liveOf(x, cal, id)[0]?.summary)).toMatch(/C\.? ?D/);
});

it("a cancellation joining a failing move's retries gets tries of its own: the event goes once the service answers", async () => {
  h = await daemonHarness({
    therapists: 1,
    engine: { maxAttempts: 3, baseMs: 600, maxDelayMs: 5_000 },
    app: { bookingMaxRetries: 0 } as never,
  });
  const x = h;
  const m = await mirrored(x);
  let outage = true;
  x.world.booking.faults.failNext(1000, 503, {
    method: "GET",
    path: new RegExp(`^/v1/appointments/${m.id}$`),
    when: () => outage,
  });
  const failedGets = () =>
    x.world.booking.requests.filter((r) => r.route === "GET /v1/appointments/:id" && r.status === 503).length;
  x.world.booking.move(m.id, new Date(m.start + 2 * HOUR).toISOString(), { force: true });
  for (let i = 0; i < 300 && failedGets() < 2; i++) await sleep(5);
  expect(failedGets()).toBe(2); // the move's sync failed twice; its last try waits out its backoff
  x.world.booking.cancel(m.id, "customer cancelled");
  for (let i = 0; i < 300 && failedGets() < 3; i++) await sleep(5);
  outage = false; // a moment later the service answers again
  await sleep(2_000);
  await quiet(x);
  await x.app.engine.drained();
  expect(x.world.booking.get(m.id)?.status).toBe("cancelled");
  expect(liveOf(x, m.cal, m.id)).toEqual([]);
  expect(await x.app.sync.dead.get(`appt:${m.id}`)).toBeUndefined();
});

describe("a late appointment.created after the appointment went to a therapist calbridge does not sync", () => {
  it.each([false, true])(
    "leaves no event in the first therapist's calendar (cancelled as well: %s)",
    async (cancel) => {
      h = await daemonHarness({
        therapists: 2,
        mapped: ["th_1"],
        configure: (c) => {
          c.event = { ...c.event, preset: "booking_only" }; // the payload covers the templates: no enrichment read
        },
      });
      const x = h;
      endpoints(x, false);
      const mark = x.world.booking.events.length;
      const start = new Date(Date.now() + 3 * DAY);
      start.setUTCHours(10, 0, 0, 0);
      const id = String(
        x.world.booking.create({ therapist_id: "th_1", start_time: start.toISOString() }, { force: true }).id,
      );
      x.world.booking.reassign(id, "th_2", { force: true });
      if (cancel) x.world.booking.cancel(id, "customer cancelled");
      const [created, ...later] = x.world.booking.events.slice(mark) as Record<string, unknown>[];
      expect(created?.type).toBe("appointment.created");
      endpoints(x, true);
      // The creation's first delivery failed; the later ones got through, then the service retried the creation.
      for (const e of later) x.world.booking.sendEvent(e);
      await quiet(x);
      x.world.booking.sendEvent(created!);
      await settle(x);
      await x.app.engine.drained();
      expect(x.world.booking.get(id)?.therapist_id).toBe("th_2");
      expect(liveOf(x, x.world.calendarOf("th_1"), id)).toEqual([]);
    },
  );
});

it.each([
  ["in the sync window", 0],
  ["moved out of the sync window", 120],
])(
  "an event whose record was lost, of an appointment given to a therapist calbridge does not sync (%s), is removed by the reconciliation",
  async (_, days) => {
    // The record of th_1's event is lost (a crash between the calendar write and the store write); the appointment then
    // goes to th_2, whom calbridge does not sync: its webhook's sync records that (a tombstone naming th_2), and the
    // reconciliation still removes th_1's event, as it did with no record at all (out of the window: read by id).
    h = await daemonHarness({ therapists: 2, mapped: ["th_1"] });
    const x = h;
    const m = await mirrored(x);
    const link = await x.app.sync.links.get(m.id);
    expect(link?.present).toBe(true);
    await x.app.sync.links.forget(link!);
    x.world.booking.reassign(m.id, "th_2", { force: true });
    if (days > 0) x.world.booking.move(m.id, new Date(m.start + days * DAY).toISOString(), { force: true });
    await quiet(x);
    expect((await x.app.sync.links.get(m.id))?.present).toBe(false);
    expect(liveOf(x, m.cal, m.id)).toHaveLength(1);
    await x.app.reconcile();
    await quiet(x);
    expect(liveOf(x, m.cal, m.id)).toEqual([]);
    expect(x.world.booking.get(m.id)?.therapist_id).toBe("th_2");
  },
);

it("webhooks arriving often do not keep a failing sync out of the dead letters: one fresh budget per chain", async () => {
  h = await daemonHarness({
    therapists: 1,
    engine: { maxAttempts: 3, baseMs: 200, maxDelayMs: 1_000 }, // a chain of 3 tries lasts at most ~0.6 s
    app: { bookingMaxRetries: 0 } as never,
  });
  const x = h;
  const m = await mirrored(x);
  // From now on the booking service cannot serve this appointment (a 503, every time).
  x.world.booking.faults.failNext(1_000_000, 503, { method: "GET", path: new RegExp(`^/v1/appointments/${m.id}$`) });
  const mark = x.world.booking.events.length;
  // One appointment.updated every 200 ms for 3 s: several times a chain's budget, even refreshed once.
  for (let i = 0; i < 15; i++) {
    x.world.booking.setNotes(m.id, `note ${i}`);
    await sleep(200);
  }
  const first = x.world.booking.events
    .slice(mark)
    .find((e) => (e as { type?: string }).type === "appointment.updated") as { id: string };
  expect(await x.app.sync.dead.get(`appt:${m.id}`)).toBeDefined();
  expect(await x.app.inbox.get(first.id)).toBeUndefined(); // acknowledged: its chain ended
});
