// The booking service reassigned th_1's appointment to th_2 and cancelled it, both before calbridge saw either (a
// reconciliation finds them at once): calbridge deletes the old event from th_1's calendar, recording the tombstone
// first (apply.ts, "delete"). That tombstone names th_2, the appointment's therapist now, so a process dying between it
// and the deletion left the old event live in th_1's calendar for good: th_1 went on seeing a cancelled appointment,
// and no reconciliation removed it, not even one listing every calendar in full (the event was a stray of a link not
// present, which the stray pass left alone). It is now removed as the stray it is; nothing is sent to the booking.
import { afterEach, expect, it } from "vitest";
import { failLinkSaveOnce, restart } from "./crash.ts";
import { cancels, type Harness, liveOf, mirrored, settle, twoWay } from "./support.ts";

let h: Harness | undefined;
afterEach(async () => {
  await h?.close();
  h = undefined;
});

const patches = (x: Harness) => x.world.booking.requests.filter((r) => r.method === "PATCH").length;

for (const force of [false, true]) {
  it(`the process dies between the tombstone and the old event's deletion; after a restart the reconciliation${force ? " (forced: full listing)" : ""} removes it`, async () => {
    h = await twoWay({ reassign: true });
    const m = await mirrored(h);
    expect(liveOf(h, m.cal, m.id)).toHaveLength(1);
    // Both changes happen while calbridge hears nothing of them: the reconciliation finds them at once.
    for (const e of h.world.booking.webhookEndpoints()) h.world.booking.setWebhookEndpointEnabled(e.id, false);
    h.world.booking.reassign(m.id, "th_2", { force: true });
    h.world.booking.cancel(m.id);
    const sentBefore = { cancels: cancels(h), patches: patches(h) };

    // The tombstone is written, then the process dies before the old event's deletion: nothing after it is stored.
    const f = failLinkSaveOnce(h, () => false, { die: true });
    const fx = h.app.sync.fx;
    fx.remove = async () => {
      f.fired = true;
      throw new Error("simulated crash before the old event's deletion");
    };
    await h.app.reconcile({ force: true });
    expect(f.fired).toBe(true);
    expect(await h.app.sync.links.get(m.id)).toMatchObject({ present: false, removedBy: "booking" });
    expect(liveOf(h, m.cal, m.id)).toHaveLength(1); // the old event, showing a cancelled appointment

    h = await restart(h);
    const report = await h.app.reconcile(force ? { force: true } : {});
    await settle(h);
    // Removed as the stray it is, and counted by the mass-deletion guard like any removal.
    expect(report.plan).toMatchObject([{ kind: "delete", therapistId: "th_1", eventId: m.eventId }]);
    expect(report.guard.destructive).toBe(1);
    expect(liveOf(h, m.cal, m.id)).toEqual([]);
    expect(liveOf(h, h.world.calendarOf("th_2"), m.id)).toEqual([]);
    expect(h.world.booking.get(m.id)).toMatchObject({ status: "cancelled", therapist_id: "th_2" });
    expect({ cancels: cancels(h), patches: patches(h) }).toEqual(sentBefore);

    const again = await h.app.reconcile({ force: true });
    expect(again.plan.filter((e) => e.kind !== "none")).toEqual([]);
    expect({ cancels: cancels(h), patches: patches(h) }).toEqual(sentBefore);
  });
}

it("the old event removed, then brought back from th_1's Bin: removed again, as a cancelled appointment's event brought back is", async () => {
  h = await twoWay({ reassign: true });
  const m = await mirrored(h);
  for (const e of h.world.booking.webhookEndpoints()) h.world.booking.setWebhookEndpointEnabled(e.id, false);
  h.world.booking.reassign(m.id, "th_2", { force: true });
  h.world.booking.cancel(m.id);
  await h.app.reconcile({ force: true });
  expect(liveOf(h, m.cal, m.id)).toEqual([]);
  h.world.google.userRestoreFromBin(m.cal, m.eventId);
  expect(liveOf(h, m.cal, m.id)).toHaveLength(1);
  await settle(h);
  await h.app.reconcile({ force: true });
  await settle(h);
  expect(liveOf(h, m.cal, m.id)).toEqual([]);
  expect(liveOf(h, h.world.calendarOf("th_2"), m.id)).toEqual([]);
  expect(h.world.booking.get(m.id)).toMatchObject({ status: "cancelled", therapist_id: "th_2" });
  expect(cancels(h) + patches(h)).toBe(0);
  expect((await h.app.reconcile({ force: true })).plan.filter((e) => e.kind !== "none")).toEqual([]);
});
