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
