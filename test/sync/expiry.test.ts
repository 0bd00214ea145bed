// What the store keeps of appointments, and for how long: links and engine dead letters expire once their
// appointment has left the sync window (the hourly purge removes them), and links an earlier build stored with the
// whole booking snapshot are rewritten without customer details at start, without the events losing anything.
import { afterEach, describe, expect, it, vi } from "vitest";
import { eventIdFor } from "../../src/calendar/ids.ts";
import type { Link } from "../../src/sync/types.ts";
import { DAY, type Harness, harness, iso } from "./support.ts";

let h: Harness | undefined;
afterEach(async () => {
  vi.restoreAllMocks();
  await h?.close();
  h = undefined;
});

const HOUR = 3_600_000;
const rows = async (x: Harness, table: "links" | "eventindex" | "dead") => {
  const out: [string, unknown][] = [];
  for await (const e of x.app.store.table(table).entries()) out.push(e);
  return out;
};

describe("expiry", () => {
  it("removes links and dead letters of appointments that left the window, and keeps the rest", async () => {
    h = await harness({ therapists: 2, engine: { maxAttempts: 1 } });
    const end = Math.floor((Date.now() + 2 * DAY) / HOUR) * HOUR + HOUR;
    const soon = h.world.booking.create({ therapist_id: "th_1", start_time: iso(end - HOUR) }, { force: true });
    const later = h.world.booking.create({ therapist_id: "th_1", start_time: iso(end + 20 * DAY) }, { force: true });
    // th_2's calendar refuses the insert for good: a dead letter.
    h.world.google.faults.next(10, { status: 403, reason: "forbidden", match: /POST .*th_2%40clinic\.test\/events$/ });
    const failing = h.world.booking.create({ therapist_id: "th_2", start_time: iso(end - HOUR) }, { force: true });
    await h.app.reconcile();
    expect((await rows(h, "links")).map(([k]) => k).sort()).toEqual([soon.id, later.id].map(String).sort());
    expect((await rows(h, "dead")).map(([k]) => k)).toEqual([`appt:${failing.id}`]);
    expect(h.app.sync.dead.count).toBe(1);

    // The window keeps 7 days of the past (sync.window.past_days), and a margin of 2 days.
    const outside = end + 9 * DAY;
    vi.spyOn(Date, "now").mockReturnValue(outside - HOUR);
    expect(await h.app.purge()).toBe(0);
    vi.spyOn(Date, "now").mockReturnValue(outside + 60_000);
    expect(await h.app.purge()).toBe(3); // the link, its index entry, the dead letter
    expect((await rows(h, "links")).map(([k]) => k)).toEqual([String(later.id)]);
    expect((await rows(h, "eventindex")).map(([, v]) => v)).toEqual([String(later.id)]);
    expect(await rows(h, "dead")).toEqual([]);
    expect(h.app.sync.dead.count).toBe(0);
  });
});

describe("expiry after a reload", () => {
  it("follows the sync window the reload set, not the one at start", async () => {
    h = await harness({ therapists: 2, engine: { maxAttempts: 1 } });
    const next = structuredClone(h.app.config);
    next.sync.window.past_days = 1;
    await h.app.reload(next);
    const end = Math.floor((Date.now() + 2 * DAY) / HOUR) * HOUR + HOUR;
    h.world.google.faults.next(10, { status: 403, reason: "forbidden", match: /POST .*th_2%40clinic\.test\/events$/ });
    const failing = h.world.booking.create({ therapist_id: "th_2", start_time: iso(end - HOUR) }, { force: true });
    await h.app.reconcile();
    expect((await rows(h, "dead")).map(([k]) => k)).toEqual([`appt:${failing.id}`]);
    // One day of the past now, and the margin of 2 days: gone after 3 days, not 9.
    vi.spyOn(Date, "now").mockReturnValue(end + 3 * DAY + 60_000);
    await h.app.purge();
    expect(await rows(h, "dead")).toEqual([]);
  });
});

describe("links of an earlier build", () => {
  /** The stored link rewritten as an earlier build kept it: the whole booking snapshot, nothing about the event. */
  async function asEarlierBuild(x: Harness, id: string, snapshot: Record<string, unknown>): Promise<void> {
    const table = x.app.store.table<Link>("links");
    const link = (await table.get(id))!;
    const { rendered: _, enrich: __, ...rest } = link;
    await table.set(id, { ...rest, booking: snapshot as Link["booking"] });
  }

  it("are rewritten without customer details at start; an event that shows the notes keeps them", async () => {
    h = await harness({ therapists: 1 });
    const start = iso(Date.now() + 2 * DAY + 10 * HOUR);
    const a = h.world.booking.create(
      {
        therapist_id: "th_1",
        start_time: start,
        notes: "diagnosis: migraine",
        customer: { name: "Erika Mustermann", email: "erika@example.com", phone: "+49 30 5550100" },
      },
      { force: true },
    );
    const b = h.world.booking.create(
      { therapist_id: "th_1", start_time: iso(Date.now() + 3 * DAY + 10 * HOUR), notes: "later note" },
      { force: true },
    );
    const id = String(a.id);
    // The earlier build read a in full (a move, say) and b only from its payload.
    await h.app.engine.settle(id, { reason: "test", priority: "webhook" });
    await h.app.reconcile();
    expect(h.world.google.event(h.world.calendarOf("th_1"), eventIdFor(id))?.description).toBe(
      `Booking ${id}\ndiagnosis: migraine`,
    );
    await asEarlierBuild(h, id, h.world.booking.get(id)!);
    const payload = h.world.booking.events.find(
      (e) => e.type === "appointment.created" && (e.data as { object: { id: string } }).object.id === b.id,
    )!.data as { object: Record<string, unknown> };
    await asEarlierBuild(h, String(b.id), payload.object);

    await h.app.start();
    const stored = new Map((await rows(h, "links")) as [string, Link][]);
    const text = JSON.stringify([...stored.values()]);
    for (const detail of ["Erika", "erika@example.com", "5550100", "migraine", "later note"]) {
      expect(text).not.toContain(detail);
    }
    for (const link of stored.values())
      expect(Object.keys(link.booking).sort()).toEqual(["end_time", "id", "start_time", "status", "therapist_id"]);
    // a's event showed the notes: nothing to enrich; b's never did: its enrichment is due.
    expect(stored.get(id)?.enrich).toBeUndefined();
    expect(stored.get(String(b.id))?.enrich).toBe(true);
    // The list items lack the notes: a reconciliation changes nothing, and a's notes stay.
    const writes = h.writes();
    expect((await h.app.reconcile()).plan).toEqual([]);
    await h.app.engine.drained();
    expect(h.world.google.event(h.world.calendarOf("th_1"), eventIdFor(id))?.description).toBe(
      `Booking ${id}\ndiagnosis: migraine`,
    );
    expect(h.world.google.event(h.world.calendarOf("th_1"), eventIdFor(String(b.id)))?.description).toBe(
      `Booking ${b.id}\nlater note`,
    );
    expect(h.writes()).toBe(writes + 1); // b, enriched
  });
});
