// The booking service showing null for a field the sync decides by (an unassigned appointment, one without a fixed
// end): null is read as "not known", never as a reason to fail the whole listing, nor as a reassignment away from
// the linked therapist (which would delete the event, or take its absence for a cancellation).
import { afterEach, describe, expect, it } from "vitest";
import { eventIdFor } from "../../src/calendar/ids.ts";
import { cancels, DAY, daemonHarness, type Harness, iso, pollAll, quiet } from "./support.ts";

let h: Harness | undefined;
afterEach(async () => {
  await h?.close();
  h = undefined;
});

const at10 = (days: number) => {
  const d = new Date(Date.now() + days * DAY);
  d.setUTCHours(10, 0, 0, 0);
  return d.getTime();
};

describe("a field the sync decides by shown as null", () => {
  for (const field of ["therapist_id", "start_time", "end_time", "status"] as const) {
    it(`one list item with ${field}: null does not stop the reconciliation of the other appointments`, async () => {
      h = await daemonHarness({ therapists: 2 });
      const sim = h.world.booking;
      // Appointments calbridge never heard of (bulk data, no webhooks): only a reconciliation brings their events.
      const missed = sim.seed({ therapists: ["th_1"], count: 3, from: Date.now() + DAY, to: Date.now() + 5 * DAY });
      const odd = sim.create({ therapist_id: "th_2", start_time: iso(at10(3)) }, { force: true });
      await quiet(h);
      sim.showNull(String(odd.id), [field]);
      const report = await h.app.reconcile();
      expect(report.ok).toBe(true);
      const cal = h.world.calendarOf("th_1");
      for (const id of missed) expect(h.world.google.event(cal, eventIdFor(id))?.status, id).toBe("confirmed");
      // Nothing of the odd one's was removed or cancelled because of the null.
      expect(h.live("th_2").map((e) => e.id)).toEqual([eventIdFor(String(odd.id))]);
      expect(report.plan.filter((e) => e.appointmentId === odd.id && e.kind === "delete")).toEqual([]);
      expect(cancels(h)).toBe(0);
    });
  }

  it("an appointment only ever shown with status null: its event's deletion is put back, nothing is cancelled", async () => {
    h = await daemonHarness({
      therapists: 1,
      configure: (c) => {
        c.sync = { ...c.sync, writeback: { cancel_grace_seconds: 0, reschedule_grace_seconds: 0 } };
      },
    });
    const sim = h.world.booking;
    const [id] = sim.seed({ therapists: ["th_1"], count: 1, from: Date.now() + DAY, to: Date.now() + 2 * DAY });
    sim.showNull(id!, ["status"]);
    await h.app.reconcile();
    const cal = h.world.calendarOf("th_1");
    expect(h.world.google.event(cal, eventIdFor(id!))?.status).toBe("confirmed");
    h.world.google.userDelete(cal, eventIdFor(id!));
    await pollAll(h);
    await quiet(h);
    // Not known to be confirmed: a cancellation would be sent on a guess.
    expect(cancels(h)).toBe(0);
    const back = h.live("th_1");
    expect(back).toHaveLength(1);
    expect(String(back[0]!.description)).toContain("not shown as confirmed by the booking service");
  });

  it("an appointment calbridge never linked, listed with therapist_id null, is skipped as unmapped", async () => {
    h = await daemonHarness({ therapists: 2 });
    const sim = h.world.booking;
    const [mine] = sim.seed({ therapists: ["th_1"], count: 1, from: Date.now() + DAY, to: Date.now() + 2 * DAY });
    const [unassigned] = sim.seed({ therapists: ["th_2"], count: 1, from: Date.now() + DAY, to: Date.now() + 2 * DAY });
    sim.showNull(unassigned!, ["therapist_id"]);
    const report = await h.app.reconcile();
    expect(report).toMatchObject({ ok: true, failed: 0, skippedUnmapped: 1 });
    expect(h.live("th_1").map((e) => e.id)).toEqual([eventIdFor(mine!)]);
    expect(h.world.google.events(h.world.calendarOf("th_2"))).toEqual([]);
  });

  it("a linked appointment whose list item (and full form) has therapist_id null keeps its event: nothing deleted, nothing cancelled", async () => {
    h = await daemonHarness({
      therapists: 2,
      configure: (c) => {
        c.sync = { ...c.sync, writeback: { cancel_grace_seconds: 0, reschedule_grace_seconds: 0 } };
      },
    });
    const sim = h.world.booking;
    const appt = sim.create({ therapist_id: "th_1", start_time: iso(at10(3)) }, { force: true });
    const id = String(appt.id);
    await quiet(h);
    const cal = h.world.calendarOf("th_1");
    expect(h.world.google.event(cal, eventIdFor(id))?.status).toBe("confirmed");
    const writes = h.writes();

    sim.showNull(id, ["therapist_id"]);
    const report = await h.app.reconcile();
    expect(report.ok).toBe(true);
    expect(report.failed).toBe(0);
    expect(report.plan.filter((e) => e.appointmentId === id)).toEqual([]);
    await quiet(h);
    await pollAll(h);
    expect(h.world.google.event(cal, eventIdFor(id))?.status).toBe("confirmed");
    expect(h.writes()).toBe(writes);

    // A webhook about it (its payload and full form show the null too) is applied to the linked therapist's event.
    sim.setNotes(id, "bring a towel");
    await quiet(h);
    await pollAll(h);
    await h.app.reconcile();
    await quiet(h);
    expect(h.world.google.event(cal, eventIdFor(id))?.status).toBe("confirmed");
    expect(h.world.google.event(cal, eventIdFor(id))?.description).toContain("bring a towel");
    expect(h.world.google.events(h.world.calendarOf("th_2"))).toEqual([]);
    expect(cancels(h)).toBe(0);
    expect(sim.get(id)?.status).toBe("confirmed");
    expect(h.app.sync.dead.count).toBe(0);
  });
});
