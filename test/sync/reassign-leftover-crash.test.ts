// The booking service reassigns th_1's appointment to th_2: calbridge writes the event in th_2's calendar, saves the link,
// then deletes the old event from th_1's. The old event was noted as calbridge's leftover (leftovers.ts) only when that
// deletion failed, and a note that failed was only logged; a process dying between the link save and the deletion
// noted nothing. The copy left unnoted in th_1's calendar was then taken for where th_2 had moved the event when th_2
// deleted it: the appointment was reassigned back to th_1 (reassign on) or the deletion undone (off) instead of
// cancelled. The leftover is now noted before the link moves on, and a note that fails fails the sync (retried).
import { afterEach, expect, it } from "vitest";
import { restart } from "./crash.ts";
import { cancels, type Harness, liveOf, mirrored, settle, twoWay } from "./support.ts";

let h: Harness | undefined;
afterEach(async () => {
  await h?.close();
  h = undefined;
});

const inPath = (calendarId: string) => encodeURIComponent(calendarId).replace(/\./g, "\\.");
const patches = (x: Harness) => x.world.booking.requests.filter((r) => r.method === "PATCH").length;

/** th_2 deletes the appointment's event: meant as a cancellation, never as a move back to th_1. */
async function th2Deletes(x: Harness, m: { id: string; cal: string }) {
  const cal2 = x.world.calendarOf("th_2");
  expect(liveOf(x, m.cal, m.id)).toHaveLength(1); // the old event is still in th_1's calendar
  const ev2 = liveOf(x, cal2, m.id);
  expect(ev2).toHaveLength(1);
  x.world.google.userDelete(cal2, String(ev2[0]?.id));
  await settle(x);
  await settle(x);
  expect(x.world.booking.get(m.id)).toMatchObject({ status: "cancelled", therapist_id: "th_2" });
  expect(cancels(x)).toBe(1);
  expect(patches(x)).toBe(0);
}

for (const reassign of [true, false]) {
  it(`the old event's deletion and its note both fail: th_2's deletion cancels (reassign ${reassign})`, async () => {
    h = await twoWay({ reassign });
    const m = await mirrored(h);
    h.world.google.faults.next(1, {
      status: 400, // refused at once (not retried), as a 503 is after its retries
      reason: "badRequest",
      match: new RegExp(`DELETE .*/calendars/${inPath(m.cal)}/events/${m.eventId}`),
    });
    const leftovers = h.app.sync.fx.leftovers;
    if (!leftovers) throw new Error("no leftovers");
    const note = leftovers.note.bind(leftovers);
    let failed = 0;
    leftovers.note = async (...a: Parameters<typeof note>) => {
      if (failed++ === 0) throw new Error("simulated: store write failed");
      return note(...a);
    };
    h.world.booking.reassign(m.id, "th_2", { force: true });
    await settle(h);
    h.world.google.faults.reset();
    expect(failed).toBeGreaterThan(0);
    await th2Deletes(h, m);
    expect(liveOf(h, m.cal, m.id)).toEqual([]); // the old event goes with the cancellation
  });

  it(`the process dies after the link moved to th_2, before the old event's deletion (reassign ${reassign})`, async () => {
    h = await twoWay({ reassign });
    const m = await mirrored(h);
    const fx = h.app.sync.fx;
    const links = h.app.sync.links;
    let dead = false;
    const die = () => {
      throw new Error("simulated crash: the process is dead");
    };
    const save = links.save.bind(links);
    links.save = async (l) => {
      if (dead) die();
      await save(l);
      if (l.appointmentId === m.id && l.therapistId === "th_2" && l.present) dead = true;
    };
    const remove = fx.remove.bind(fx);
    fx.remove = async (...a: Parameters<typeof remove>) => (dead ? die() : remove(...a));
    const write = fx.write.bind(fx);
    fx.write = async (...a: Parameters<typeof write>) => (dead ? die() : write(...a));
    const leftovers = fx.leftovers;
    if (!leftovers) throw new Error("no leftovers");
    const note = leftovers.note.bind(leftovers);
    leftovers.note = async (...a: Parameters<typeof note>) => (dead ? die() : note(...a));
    h.world.booking.reassign(m.id, "th_2", { force: true });
    await settle(h);
    expect(dead).toBe(true);
    h = await restart(h);
    await th2Deletes(h, m);
  });
}

// The process dies after the event was written in th_2's calendar, before the link was saved: the link still names
// th_1. The reconciliation after the restart planned the move again and, beside it, the deletion of th_2's event as a
// copy left in another calendar. Landing after the move, that deletion left the link naming a deleted event in th_2's
// calendar: taken for th_2's deletion, it cancelled the appointment in the booking service. The move takes the event
// over; the stray pass leaves it alone.
it("the process dies after the new event was written in th_2's calendar, before the link was saved: nothing is cancelled", async () => {
  h = await twoWay({ reassign: true });
  const m = await mirrored(h);
  const cal2 = h.world.calendarOf("th_2");
  for (const e of h.world.booking.webhookEndpoints()) h.world.booking.setWebhookEndpointEnabled(e.id, false);
  h.world.booking.reassign(m.id, "th_2", { force: true }); // calbridge hears of it from the reconciliation
  const fx = h.app.sync.fx;
  let dead = false;
  const die = () => {
    throw new Error("simulated crash: the process is dead");
  };
  const write = fx.write.bind(fx);
  fx.write = async (...a: Parameters<typeof write>) => {
    if (dead) die();
    const w = await write(...a);
    if (a[3].appointmentId === m.id && a[0] === "th_2") dead = true;
    return w;
  };
  const links = h.app.sync.links;
  const save = links.save.bind(links);
  links.save = async (l) => (dead ? die() : save(l));
  const remove = fx.remove.bind(fx);
  fx.remove = async (...a: Parameters<typeof remove>) => (dead ? die() : remove(...a));
  await h.app.reconcile({ force: true }).catch(() => {});
  expect(dead).toBe(true);
  expect(liveOf(h, cal2, m.id)).toHaveLength(1);
  expect(await h.app.sync.links.get(m.id)).toMatchObject({ therapistId: "th_1", present: true });

  h = await restart(h);
  // th_2's calendar deletes only once the move is done (th_1's old event gone): the order in which the harm showed.
  const cal2Port = h.app.sync.mapping.calendar("th_2");
  const del = cal2Port.delete.bind(cal2Port);
  let deletes = 0;
  cal2Port.delete = async (eventId: string) => {
    deletes++;
    for (let i = 0; i < 100 && liveOf(h!, m.cal, m.id).length > 0; i++) await new Promise((r) => setTimeout(r, 20));
    return del(eventId);
  };
  const report = await h.app.reconcile({ force: true });
  await settle(h);
  await settle(h);
  expect(h.world.booking.get(m.id)).toMatchObject({ status: "confirmed", therapist_id: "th_2" });
  expect(cancels(h) + patches(h)).toBe(0);
  expect(liveOf(h, m.cal, m.id)).toEqual([]);
  expect(liveOf(h, cal2, m.id)).toHaveLength(1);
  expect(await h.app.sync.links.get(m.id)).toMatchObject({ therapistId: "th_2", present: true });
  expect(report.plan).toMatchObject([{ kind: "move", to: { therapistId: "th_2", eventId: m.eventId } }]);
  expect(report.guard.destructive).toBe(0);
  expect(deletes).toBe(0);
  expect((await h.app.reconcile({ force: true })).plan.filter((e) => e.kind !== "none")).toEqual([]);
});
