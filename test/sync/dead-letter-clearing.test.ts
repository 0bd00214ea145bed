// A dead letter is cleared by the next successful sync of its key. Two successes did not: a customer's re-render
// (customer:<id> stayed, and with it the dead_letters gauge, /status and the notification, for about 99 days), and
// any sync of a one-shot command such as `calbridge reconcile` (which never counts the dead letters at a start, and
// skipped the delete while its count was 0). And the reconciliation, which "retries it every run" (README), synced only
// appointments with something to change: one whose given-up sync had nothing to change (an update whose read kept
// failing) stayed a dead letter through every run.
import { afterEach, expect, it } from "vitest";
import { eventIdFor } from "../../src/calendar/ids.ts";
import { ManualClock } from "../../src/clock.ts";
import { type App, createApp } from "../../src/daemon/app.ts";
import { silentLogger } from "../../src/log.ts";
import type { SyncOutcome } from "../../src/sync/types.ts";
import { DAY, type Harness, harness, iso } from "./support.ts";

let h: Harness | undefined;
let second: App | undefined;
afterEach(async () => {
  await second?.stop(2000).catch(() => {});
  second = undefined;
  await h?.close();
  h = undefined;
});

const deadKeys = async (app: App) => {
  const out: string[] = [];
  for await (const [k] of app.store.table<Record<string, unknown>>("dead").entries()) out.push(k);
  return out;
};

it("a customer re-render that succeeds clears its earlier dead letter", async () => {
  h = await harness({ therapists: 1, engine: { maxAttempts: 1 } });
  await h.app.sync.dead.load();
  const appt = h.world.booking.create({ therapist_id: "th_1", start_time: iso(Date.now() + 3 * DAY) }, { force: true });
  const customerId = String(appt.customer_id);
  // The customer's listing is refused once (a permanent error): the re-render is given up as a dead letter.
  h.world.booking.faults.refuseNext(1, "invalid_request", {
    status: 400,
    match: { method: "GET", path: "/v1/appointments" },
  });
  const first = await h.app.engine.resyncCustomer(customerId, {
    reason: "customer.updated",
    priority: "webhook",
    origin: "booking",
  });
  expect(first.ok).toBe(false);
  expect(await deadKeys(h.app)).toEqual([`customer:${customerId}`]);
  expect(h.app.sync.dead.count).toBe(1);

  // The next customer.updated for the same customer re-renders fine.
  const second = await h.app.engine.resyncCustomer(customerId, {
    reason: "customer.updated",
    priority: "webhook",
    origin: "booking",
  });
  expect(second.ok).toBe(true);
  expect(
    h.world.google.event(h.world.calendarOf("th_1"), (await h.app.sync.links.get(String(appt.id)))!.eventId)?.status,
  ).toBe("confirmed");
  expect(await deadKeys(h.app)).toEqual([]);
  expect(h.app.sync.dead.count).toBe(0);
});

it("a one-shot reconcile that syncs a dead-lettered appointment clears its dead letter", async () => {
  h = await harness({ therapists: 1, engine: { maxAttempts: 1 } });
  const cal = h.world.calendarOf("th_1");
  const appt = h.world.booking.create({ therapist_id: "th_1", start_time: iso(Date.now() + 3 * DAY) }, { force: true });
  const id = String(appt.id);
  // First process: Google refuses the insert; the sync is given up as a dead letter.
  h.world.google.faults.next(1, { status: 403, reason: "forbidden", match: /POST .*\/events$/ });
  const failed = await h.app.engine.settle(id, {
    reason: "appointment.created",
    priority: "webhook",
    origin: "booking",
  });
  expect(failed.ok).toBe(false);
  expect(await deadKeys(h.app)).toEqual([`appt:${id}`]);
  await h.app.stop(2000);

  // Later, the operator runs `calbridge reconcile` (one-shot app over the same store).
  second = await createApp(h.world.config, { logger: silentLogger, oneShot: true });
  const report = await second.reconcile();
  expect(h.world.google.event(cal, eventIdFor(id))?.status).toBe("confirmed"); // synced fine
  expect(report.ok).toBe(true);
  expect(await deadKeys(second)).toEqual([]);
});

it("the reconciliation retries (and so clears) a dead-lettered appointment that is in sync", async () => {
  const clock = new ManualClock(Date.now());
  h = await harness({ therapists: 1, clock, engine: { maxAttempts: 2, baseMs: 1_000 } });
  await h.app.sync.dead.load();
  const appt = h.world.booking.create(
    { therapist_id: "th_1", start_time: iso(clock.now() + 3 * DAY) },
    { force: true },
  );
  const id = String(appt.id);
  const ok = await h.app.engine.settle(id, { reason: "appointment.created", priority: "webhook", origin: "booking" });
  expect(ok.ok).toBe(true);

  // An appointment.updated webhook (as EngineSink hands it over: no payload, the appointment is read) while the
  // booking service answers 503 to that read: retried, then given up as a dead letter.
  h.world.booking.faults.failNext(1000, 503, { method: "GET", path: `/v1/appointments/${id}` });
  let outcome: SyncOutcome | undefined;
  void h.app.engine
    .settle(id, { reason: "appointment.updated", priority: "webhook", origin: "booking", booking: { at: clock.now() } })
    .then((o) => (outcome = o));
  for (let i = 0; i < 200 && !outcome; i++) {
    await clock.advance(2_000);
    await new Promise((r) => setTimeout(r, 5));
  }
  expect(outcome).toMatchObject({ ok: false, final: true });
  expect(await deadKeys(h.app)).toEqual([`appt:${id}`]);
  expect(h.app.sync.dead.count).toBe(1);

  // The booking service is fine again; the (periodic) reconciliation runs.
  h.world.booking.faults.reset();
  const report = await h.app.reconcile();
  expect(report.ok).toBe(true);
  await h.app.reconcile();
  // The run found it in step: nothing is left to retry.
  expect(await deadKeys(h.app)).toEqual([]);
  expect(h.app.sync.dead.count).toBe(0);
});
