// A link whose stored text cannot be read (a truncated write, a damaged page, a hand edit). README (What is stored):
// such a record is left out of every listing, "nothing else is affected". The reconciliation read the links of every
// listed appointment with one getMany, which threw StoreRecordUnreadableError for the damaged one: every
// reconciliation failed, for every therapist, until someone edited the file, so nothing a webhook missed was healed
// anywhere (review22). Now that appointment is left alone each run (no event inserted over it, nothing deleted or
// sent), logged by appointment and key, and the rest is reconciled.
import { afterEach, expect, it } from "vitest";
import { damage, storePath } from "../support/damage-record.ts";
import { captureLog } from "../support/log-capture.ts";
import { DAY, type Harness, mirrored, settle, twoWay } from "./support.ts";

let h: Harness | undefined;
afterEach(async () => {
  await h?.close();
  h = undefined;
});

const mentions = (x: Harness, t: string, id: string) => x.live(t).filter((e) => JSON.stringify(e).includes(id));
/** Requests to the booking service that change something (cancel, reschedule, ...). */
const bookingWrites = (x: Harness) => x.world.booking.requests.filter((r) => r.method !== "GET").length;
const stopWebhooks = (x: Harness) => {
  for (const ep of x.world.booking.webhookEndpoints()) x.world.booking.removeWebhookEndpoint(ep.id);
};

it("one damaged link: the reconciliation heals every other appointment and leaves that one alone", async () => {
  const log = captureLog("info");
  h = await twoWay({}, log.logger);
  const damaged = await mirrored(h);
  const before = h.world.google.event(damaged.cal, damaged.eventId);
  await damage(storePath(h), "links", damaged.id);

  // Changes whose webhooks never arrived (the sender gave up): the reconciliation is what heals them.
  stopWebhooks(h);
  const missed = h.world.booking.create(
    { therapist_id: "th_2", start_time: new Date(Date.now() + 5 * DAY).toISOString() },
    { force: true },
  );
  const sameTherapist = h.world.booking.create(
    { therapist_id: "th_1", start_time: new Date(Date.now() + 6 * DAY).toISOString() },
    { force: true },
  );
  const writesBefore = bookingWrites(h);

  for (let run = 1; run <= 2; run++) {
    const report = await h.app.reconcile();
    expect(report.unreadableLinks).toEqual([damaged.id]);
    expect(report.ok).toBe(false);
    // Every run says so once, by appointment and key, with what to do.
    const told = log.lines.filter((l) => l["appointment_id"] === damaged.id && l["table"] === "links");
    expect(told).toHaveLength(run);
    expect(told[0]).toMatchObject({ level: 40, key: damaged.id });
    expect(String(told[0]!["msg"])).toMatch(/left alone.*restore it from a backup or remove it/);
  }
  expect(mentions(h, "th_2", String(missed.id))).toHaveLength(1);
  expect(mentions(h, "th_1", String(sameTherapist.id))).toHaveLength(1);
  // The damaged one: its event as it was, no second event for it, nothing sent to the booking service.
  expect(h.world.google.event(damaged.cal, damaged.eventId)).toEqual(before);
  expect(mentions(h, "th_1", damaged.id)).toHaveLength(1);
  expect(bookingWrites(h)).toBe(writesBefore);
  // The rest was reconciled: the run counts as the last success (/readyz stays ready).
  expect(await h.app.store.table<number>("meta").get("last_reconcile_success")).toBeGreaterThan(0);
});

it("an event whose appointment left the listing, with a damaged link, is no stray to delete", async () => {
  h = await twoWay();
  const damaged = await mirrored(h);
  const other = await mirrored(h);
  const before = h.world.google.event(damaged.cal, damaged.eventId);
  stopWebhooks(h);
  // Moved far beyond the sync window (no webhook): its event is unclaimed by any listed appointment.
  h.world.booking.move(damaged.id, Date.now() + 2000 * DAY, { force: true });
  h.world.booking.cancel(other.id);
  await damage(storePath(h), "links", damaged.id);
  const writesBefore = bookingWrites(h);

  const report = await h.app.reconcile();
  expect(report.unreadableLinks).toEqual([damaged.id]);
  expect(h.world.google.event(damaged.cal, damaged.eventId)).toEqual(before);
  expect(bookingWrites(h)).toBe(writesBefore);
  // The other appointment's cancellation, which no webhook told, is healed.
  expect(mentions(h, "th_1", other.id)).toHaveLength(0);
});

it("a webhook for an appointment whose link is damaged fails that appointment only, as a dead letter", async () => {
  h = await twoWay();
  const damaged = await mirrored(h);
  const before = h.world.google.event(damaged.cal, damaged.eventId);
  await damage(storePath(h), "links", damaged.id);
  const writesBefore = bookingWrites(h);

  h.world.booking.move(damaged.id, Date.now() + 4 * DAY, { force: true });
  const fine = h.world.booking.create(
    { therapist_id: "th_1", start_time: new Date(Date.now() + 7 * DAY).toISOString() },
    { force: true },
  );
  await settle(h);
  expect(mentions(h, "th_1", String(fine.id))).toHaveLength(1);
  expect(h.world.google.event(damaged.cal, damaged.eventId)).toEqual(before);
  expect(mentions(h, "th_1", damaged.id)).toHaveLength(1);
  expect(bookingWrites(h)).toBe(writesBefore);
  const dead: Record<string, unknown>[] = [];
  for await (const [, v] of h.app.store.table<Record<string, unknown>>("dead").entries()) dead.push(v);
  expect(JSON.stringify(dead)).toContain(`the record links/${damaged.id} cannot be read`);
});

it("a calendar change to an event whose link is damaged fails that appointment only, not the calendar's polls", async () => {
  h = await twoWay();
  const damaged = await mirrored(h);
  const other = await mirrored(h);
  await damage(storePath(h), "links", damaged.id);
  const writesBefore = bookingWrites(h);

  // The therapist deletes the damaged one's event and moves the other one an hour later.
  h.world.google.userDelete(damaged.cal, damaged.eventId);
  const later = (ms: number) => ({ dateTime: new Date(ms).toISOString() });
  h.world.google.userEdit(other.cal, other.eventId, {
    start: later(other.start + 3_600_000),
    end: later(other.start + 2 * 3_600_000),
  });
  for (let i = 0; i < 2; i++) expect(await h.app.poller.poll("th_1").then(() => "polled", String)).toBe("polled");
  await h.app.engine.idle();
  // The move is written back; nothing is sent for the deletion whose link cannot be read: it is a dead letter.
  expect(Date.parse(String(h.world.booking.get(other.id)?.start_time))).toBe(other.start + 3_600_000);
  expect(bookingWrites(h)).toBe(writesBefore + 1);
  expect(h.world.booking.get(damaged.id)?.status).not.toBe("cancelled");
  const dead: Record<string, unknown>[] = [];
  for await (const [, v] of h.app.store.table<Record<string, unknown>>("dead").entries()) dead.push(v);
  expect(JSON.stringify(dead)).toContain(`the record links/${damaged.id} cannot be read`);
});
