// A "Change calendar" to a colleague that is not taken (refused, or writeback.reassign off): the copy in the colleague's
// calendar was removed before the refusal was recorded, so a store write that failed (or a crash) in between left the
// event deleted in the therapist's calendar and nowhere else, and the next sync cancelled the appointment. The refusal
// is now recorded first: whichever step fails, the event comes back in the therapist's calendar and nothing is cancelled.
import { afterEach, expect, it } from "vitest";
import { failLinkSaveOnce, restart, untilFired } from "./crash.ts";
import { cancels, type Harness, liveOf, mirrored, settle, twoWay } from "./support.ts";

let h: Harness | undefined;
afterEach(async () => {
  await h?.close();
  h = undefined;
});

const where = (x: Harness, id: string) => x.world.therapists.filter((t) => liveOf(x, x.world.calendarOf(t), id).length);

it("refused reassignment whose refusal fails to be recorded once: nothing is cancelled, the event is back", async () => {
  h = await twoWay({ reassign: true });
  const m = await mirrored(h);
  h.world.booking.faults.refuseNext(2, "therapist_unavailable", { match: { method: "PATCH" } });
  const f = failLinkSaveOnce(h, (l) => l.removedBy === "refused");
  h.world.google.userMove(m.cal, m.eventId, h.world.calendarOf("th_2"));
  await settle(h);
  expect(f.fired).toBe(true);
  await h.app.reconcile({ force: true });
  await settle(h);
  expect(cancels(h)).toBe(0);
  expect(h.world.booking.get(m.id)).toMatchObject({ status: "confirmed", therapist_id: "th_1" });
  expect(where(h, m.id)).toEqual(["th_1"]);
});

it("reassign off, the process dies recording the refusal: after a restart nothing is cancelled", async () => {
  h = await twoWay({ reassign: false, cancel: true });
  const m = await mirrored(h);
  const f = failLinkSaveOnce(h, (l) => l.removedBy === "refused", { die: true });
  h.world.google.userMove(m.cal, m.eventId, h.world.calendarOf("th_2"));
  await untilFired(h, f);
  h = await restart(h);
  await h.app.reconcile({ force: true });
  await settle(h);
  expect(cancels(h)).toBe(0);
  expect(h.world.booking.get(m.id)).toMatchObject({ status: "confirmed", therapist_id: "th_1" });
  expect(where(h, m.id)).toEqual(["th_1"]);
});

it("reassign off, the copy's removal fails after the refusal is recorded: the event is back, the copy goes", async () => {
  h = await twoWay({ reassign: false, cancel: true });
  const m = await mirrored(h);
  const fx = h.app.sync.fx;
  const remove = fx.remove.bind(fx);
  let failed = false;
  fx.remove = async (therapistId, eventId, tails) => {
    if (!failed && therapistId === "th_2") {
      failed = true;
      throw new Error("simulated crash: the copy's removal failed");
    }
    return remove(therapistId, eventId, tails);
  };
  h.world.google.userMove(m.cal, m.eventId, h.world.calendarOf("th_2"));
  await settle(h);
  expect(failed).toBe(true);
  await h.app.reconcile({ force: true });
  await settle(h);
  expect(cancels(h)).toBe(0);
  expect(h.world.booking.get(m.id)).toMatchObject({ status: "confirmed", therapist_id: "th_1" });
  expect(where(h, m.id)).toEqual(["th_1"]);
});
