// Full-form fields (notes, phone, add-ons) through the real daemon: an event is written at once from a payload or a
// list item and enriched from GET /v1/appointments/:id with leftover budget, one read per appointment whose templates
// need it; it follows a notes change, never shows less than it did because a later hint was partial, and enrichments
// left by a restart resume.
import { afterEach, describe, expect, it } from "vitest";
import { eventIdFor } from "../../src/calendar/ids.ts";
import type { ConfigInput } from "../../src/config/schema.ts";
import { createApp } from "../../src/daemon/app.ts";
import { silentLogger } from "../../src/log.ts";
import { DAY, daemonHarness, type Harness, harness, iso } from "./support.ts";

let h: Harness | undefined;
afterEach(async () => {
  await h?.close();
  h = undefined;
});

const gets = (x: Harness) => x.world.booking.requests.filter((r) => r.route === "GET /v1/appointments/:id").length;
const HOUR = 3_600_000;

/** A started daemon (leader: it processes webhooks and enriches) that receives the simulator's webhooks. */
async function daemon(configure?: (raw: ConfigInput) => void) {
  return daemonHarness({ therapists: 2, ...(configure ? { configure } : {}) });
}

/** Until webhooks are delivered and processed and the engine (enrichments included) has nothing left. */
async function settled(x: Harness): Promise<void> {
  for (let i = 0; i < 3; i++) {
    await x.world.booking.webhooksIdle();
    await x.app.processor.idle();
    await x.app.engine.drained();
  }
}

const description = (x: Harness, therapist: string, id: unknown) =>
  String(x.world.google.event(x.world.calendarOf(therapist), eventIdFor(String(id)))?.description ?? "");

describe("full-form fields", () => {
  it("a booking created with notes shows them, with one extra read per appointment whose description needs them", async () => {
    h = await daemon();
    const start = (d: number) => iso(Date.now() + d * DAY + 10 * HOUR);
    const withNotes = h.world.booking.create(
      { therapist_id: "th_1", start_time: start(1), notes: "first session, knee surgery in May" },
      { force: true },
    );
    const other = h.world.booking.create(
      { therapist_id: "th_2", start_time: start(2), notes: "bring the MRI <report>" },
      { force: true },
    );
    const without = h.world.booking.create({ therapist_id: "th_1", start_time: start(3) }, { force: true });
    await settled(h);
    expect(description(h, "th_1", withNotes.id)).toBe(`Booking ${withNotes.id}\nfirst session, knee surgery in May`);
    expect(description(h, "th_2", other.id)).toBe(`Booking ${other.id}\nbring the MRI &lt;report&gt;`);
    expect(description(h, "th_1", without.id)).toBe(`Booking ${without.id}`);
    // The description uses {notes}, which only the full form has: one read each, also where the notes are empty.
    expect(gets(h)).toBe(3);
    // Nothing is read again once the events show the full form.
    const before = gets(h);
    const writes = h.writes();
    const report = await h.app.reconcile();
    expect(report.plan).toEqual([]);
    expect(report.enrichment?.pending).toBe(0);
    await settled(h);
    expect(gets(h)).toBe(before);
    expect(h.writes()).toBe(writes);
  });

  it("makes no extra request when the templates use nothing the payload lacks", async () => {
    h = await daemon((c) => {
      c.event = { title: "{service_name}: {customer_name}", description: "Booking {id} with {therapist_id}" };
    });
    const a = h.world.booking.create(
      { therapist_id: "th_1", start_time: iso(Date.now() + DAY), notes: "never shown" },
      { force: true },
    );
    await settled(h);
    expect(description(h, "th_1", a.id)).toBe(`Booking ${a.id} with th_1`);
    expect(gets(h)).toBe(0);
  });

  it("the description follows a notes change (appointment.updated is read in full)", async () => {
    h = await daemon();
    const a = h.world.booking.create(
      { therapist_id: "th_1", start_time: iso(Date.now() + DAY), notes: "first session" },
      { force: true },
    );
    await settled(h);
    h.world.booking.setNotes(String(a.id), "second session: shoulder");
    await settled(h);
    expect(description(h, "th_1", a.id)).toBe(`Booking ${a.id}\nsecond session: shoulder`);
  });

  it("never rewrites an event with less than it showed because a hint was partial", async () => {
    h = await daemon((c) => {
      c.sync = { ...c.sync, cancelled_events: "keep" };
    });
    const a = h.world.booking.create(
      { therapist_id: "th_1", start_time: iso(Date.now() + 2 * DAY + 10 * HOUR), notes: "knee surgery in May" },
      { force: true },
    );
    const b = h.world.booking.create(
      { therapist_id: "th_1", start_time: iso(Date.now() + 3 * DAY + 10 * HOUR), notes: "allergic to lavender" },
      { force: true },
    );
    await settled(h);
    // A move the daemon hears of only from the reconciliation's list item (no notes in it): the event moves and keeps
    // its notes, at the cost of one read.
    const [endpoint] = h.world.booking.webhookEndpoints();
    h.world.booking.setWebhookEndpointEnabled(endpoint!.id, false);
    const to = Math.floor((Date.now() + 4 * DAY) / HOUR) * HOUR;
    h.world.booking.move(String(a.id), to);
    const reads = gets(h);
    const report = await h.app.reconcile();
    expect(report.counts).toEqual({ update: 1 });
    expect(gets(h)).toBe(reads + 1);
    const ev = h.world.google.event(h.world.calendarOf("th_1"), eventIdFor(String(a.id)));
    expect(Date.parse(String((ev?.start as { dateTime?: string } | undefined)?.dateTime))).toBe(to);
    expect(description(h, "th_1", a.id)).toBe(`Booking ${a.id}\nknee surgery in May`);
    // A cancellation's payload has no notes either: the kept "Cancelled" event still shows them.
    h.world.booking.setWebhookEndpointEnabled(endpoint!.id, true);
    h.world.booking.cancel(String(b.id), "changed plans");
    await settled(h);
    const cancelled = h.world.google.event(h.world.calendarOf("th_1"), eventIdFor(String(b.id)));
    expect(cancelled?.summary).toMatch(/^Cancelled: /);
    expect(description(h, "th_1", b.id)).toBe(`Booking ${b.id}\nallergic to lavender`);
  });

  it("enrichments left by a restart resume with the daemon's first reconciliation", async () => {
    h = await harness({ therapists: 2 });
    const now = Date.now();
    const ids = [1, 2, 3].map(
      (i) =>
        h!.world.booking.create(
          { therapist_id: "th_1", start_time: iso(now + i * DAY + 10 * HOUR), notes: `note ${i}` },
          { force: true },
        ).id,
    );
    // A one-shot reconciliation (`calbridge reconcile`) writes the events from list items and enriches nothing.
    const first = await h.app.reconcile();
    expect(first.counts).toEqual({ create: 3 });
    expect(first.enrichment).toMatchObject({ pending: 3 });
    expect(gets(h)).toBe(0);
    expect(description(h, "th_1", ids[0])).toBe(`Booking ${ids[0]}`);
    const dry = await h.app.reconcile({ dryRun: true });
    expect(dry.plan).toEqual([]);
    expect(dry.enrichment).toMatchObject({ pending: 3, minutes: 1 });
    await h.app.stop();

    // The daemon starts on the same store: its first reconciliation queues what the links still ask for.
    const app = await createApp(h.world.config, { logger: silentLogger, listen: "127.0.0.1:0" });
    try {
      await app.start();
      for (let i = 0; i < 100 && gets(h) < 3; i++) await new Promise((r) => setTimeout(r, 50));
      await app.engine.drained();
      for (const [i, id] of ids.entries()) expect(description(h, "th_1", id)).toBe(`Booking ${id}\nnote ${i + 1}`);
      expect(gets(h)).toBe(3);
    } finally {
      await app.stop(2000);
    }
  });
  it("a name or title change only the reconciliation sees reaches events whose description needs the full form", async () => {
    // A missed customer.updated (endpoint disabled for a while), then a title template changed by a reload: the list
    // item shows the change next to notes it lacks, so the reconciliation leaves the rewrite to an enrichment. That
    // enrichment was dropped as "nothing left to enrich", the link not asking for one, and the old name stayed.
    h = await daemon();
    const customer = { name: "Erika Geheim", email: "erika@example.test" };
    const appt = h.world.booking.create(
      { therapist_id: "th_1", start_time: iso(Date.now() + 2 * DAY + 10 * HOUR), customer, notes: "left knee" },
      { force: true },
    );
    await settled(h);
    const title = () =>
      String(h!.world.google.event(h!.world.calendarOf("th_1"), eventIdFor(String(appt.id)))?.summary);
    expect(title()).toBe("Massage 60 min: Erika Geheim");
    for (const e of h.world.booking.webhookEndpoints()) h.world.booking.setWebhookEndpointEnabled(e.id, false);
    h.world.booking.updateCustomer(String(appt.customer_id), { name: "Erika Neuname" });

    const report = await h.app.reconcile();
    expect(report.plan).toEqual([]);
    expect(report.enrichment).toMatchObject({ pending: 1 });
    await settled(h);
    expect(title()).toBe("Massage 60 min: Erika Neuname");
    expect(description(h, "th_1", appt.id)).toBe(`Booking ${appt.id}\nleft knee`);

    const next = structuredClone(h.world.config);
    next.event.title = "{service_name}: {customer_initials}";
    await h.app.reload(next);
    await h.app.reconcile();
    await settled(h);
    expect(title()).toBe("Massage 60 min: E.N.");
    expect(description(h, "th_1", appt.id)).toBe(`Booking ${appt.id}\nleft knee`);
  });
});
