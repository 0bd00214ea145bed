// The keep variant of reassign-cancel-crash.test.ts: the booking service reassigned th_1's appointment to th_2 and
// cancelled it, both before calbridge saw either (a reconciliation finds them at once), under sync.cancelled_events:
// keep. A cancelled appointment's event is kept, marked cancelled, in its therapist's calendar (th_2's); th_1's old
// event is wanted in neither mode. No tombstone is written first here (that is the delete flow): the keep flow is a
// move (apply.ts, "move"): the old event noted as calbridge's leftover, the kept event written in th_2's calendar, the
// link saved naming th_2 (present), then the old event deleted. A process dying anywhere between the first stored
// record (the note) and that deletion leaves th_1's event live; after a restart a reconciliation, normal or forced,
// makes the move again or removes the old event as a copy, and th_2 holds what an uncrashed run leaves there.
// Dying after the kept event was written, before the link named th_2, the reconciliation also planned th_2's kept
// event's deletion as a copy (the link still named th_1); landing after the move, it cleared the marker for good.
import { afterEach, expect, it } from "vitest";
import { restart } from "./crash.ts";
import { cancels, daemonHarness, type Harness, liveOf, mirrored, patches, settle } from "./support.ts";

let h: Harness | undefined;
afterEach(async () => {
  await h?.close();
  h = undefined;
});

const sent = (x: Harness) => ({ cancels: cancels(x), patches: patches(x) });

function keep(): Promise<Harness> {
  return daemonHarness({
    therapists: 2,
    configure: (c) => {
      c.sync = {
        ...c.sync,
        cancelled_events: "keep",
        writeback: { cancel_grace_seconds: 0, reschedule_grace_seconds: 0, reassign: true },
      };
    },
  });
}

/** Reassigned to th_2 and cancelled while calbridge hears nothing of either (webhooks off). */
function reassignAndCancelUnheard(x: Harness, id: string): void {
  for (const e of x.world.booking.webhookEndpoints()) x.world.booking.setWebhookEndpointEnabled(e.id, false);
  x.world.booking.reassign(id, "th_2", { force: true });
  x.world.booking.cancel(id);
}

/** The event's private properties, its times mark without the moment of the write (which differs from run to run). */
const marks = (ev: Record<string, unknown> | undefined) => {
  const own = { ...(ev?.extendedProperties as { private?: Record<string, string> } | undefined)?.private };
  if (own.calbridge_times) own.calbridge_times = own.calbridge_times.split("@")[0]!;
  return own;
};
/** What of an event keep mode decides (its text, times, status, marks), without ids and etags. */
const shown = (ev: Record<string, unknown> | undefined) => ({
  summary: ev?.summary,
  description: ev?.description,
  start: ev?.start,
  end: ev?.end,
  status: ev?.status,
  transparency: ev?.transparency,
  marks: marks(ev),
});

/** What an uncrashed run leaves in th_2's calendar for the reassigned and cancelled appointment. */
async function uncrashed(): Promise<ReturnType<typeof shown>[]> {
  const x = await keep();
  try {
    const m = await mirrored(x);
    reassignAndCancelUnheard(x, m.id);
    await x.app.reconcile({ force: true });
    await settle(x);
    expect(liveOf(x, m.cal, m.id)).toEqual([]);
    expect(sent(x)).toEqual({ cancels: 0, patches: 0 });
    const kept = liveOf(x, x.world.calendarOf("th_2"), m.id);
    expect(kept).toHaveLength(1);
    expect(String(kept[0]?.summary)).toMatch(/^Cancelled: /);
    return kept.map(shown);
  } finally {
    await x.close();
  }
}

/** Where the process dies in the keep flow: after each stored record or write before the old event's deletion. */
const POINTS = {
  note: "after the old event was noted as a leftover, before the kept event was written in th_2's calendar",
  write: "after the kept event was written in th_2's calendar, before the link was saved",
  link: "after the link was saved naming th_2, before the old event's deletion",
} as const;
type Point = keyof typeof POINTS;

/** From the crash point on, nothing of this app reaches the store or a calendar any more. */
function dieAt(x: Harness, id: string, point: Point): { fired: boolean } {
  const flag = { fired: false };
  const die = () => {
    throw new Error("simulated crash: the process is dead");
  };
  const fx = x.app.sync.fx;
  const links = x.app.sync.links;
  const leftovers = fx.leftovers;
  if (!leftovers) throw new Error("no leftovers");
  const note = leftovers.note.bind(leftovers);
  leftovers.note = async (...a: Parameters<typeof note>) => {
    if (flag.fired) die();
    await note(...a);
    if (point === "note" && a[0] === id) flag.fired = true;
  };
  const forget = leftovers.forget.bind(leftovers);
  leftovers.forget = async (...a: Parameters<typeof forget>) => (flag.fired ? die() : forget(...a));
  const write = fx.write.bind(fx);
  fx.write = async (...a: Parameters<typeof write>) => {
    if (flag.fired) die();
    const w = await write(...a);
    if (point === "write" && a[3].appointmentId === id) flag.fired = true;
    return w;
  };
  const save = links.save.bind(links);
  links.save = async (l) => {
    if (flag.fired) die();
    await save(l);
    if (point === "link" && l.appointmentId === id && l.therapistId === "th_2" && l.present) flag.fired = true;
  };
  const remove = fx.remove.bind(fx);
  fx.remove = async (...a: Parameters<typeof remove>) => (flag.fired ? die() : remove(...a));
  return flag;
}

for (const point of Object.keys(POINTS) as Point[]) {
  for (const force of [false, true]) {
    it(`keep: the process dies ${POINTS[point]}; after a restart the reconciliation${force ? " (forced)" : ""} removes th_1's old event`, async () => {
      const want = await uncrashed();
      h = await keep();
      const m = await mirrored(h);
      const cal2 = h.world.calendarOf("th_2");
      reassignAndCancelUnheard(h, m.id);
      const before = sent(h);

      const f = dieAt(h, m.id, point);
      await h.app.reconcile({ force: true }).catch(() => {});
      expect(f.fired).toBe(true);
      expect(liveOf(h, m.cal, m.id)).toHaveLength(1); // the old event, showing an appointment no longer th_1's
      const link = await h.app.sync.links.get(m.id);
      expect(link).toMatchObject(point === "link" ? { therapistId: "th_2", present: true } : { therapistId: "th_1" });

      h = await restart(h);
      const report = await h.app.reconcile(force ? { force: true } : {});
      await settle(h);
      if (point === "link") {
        // The link names th_2: th_1's event is a copy left in another calendar, removed as a stray and counted by the
        // mass-deletion guard like any removal.
        expect(report.plan).toMatchObject([{ kind: "delete", therapistId: "th_1", eventId: m.eventId }]);
        expect(report.guard.destructive).toBe(1);
      } else {
        // The link still names th_1: the move is made again (the old event's deletion is part of it, not a deletion
        // of the appointment's event, so the guard counts none).
        expect(report.plan).toMatchObject([{ kind: "move", from: { therapistId: "th_1", eventId: m.eventId } }]);
        expect(report.guard.destructive).toBe(0);
      }
      expect(liveOf(h, m.cal, m.id)).toEqual([]);
      expect(liveOf(h, cal2, m.id).map(shown)).toEqual(want);
      expect(await h.app.sync.links.get(m.id)).toMatchObject({ therapistId: "th_2", present: true });
      expect(h.world.booking.get(m.id)).toMatchObject({ status: "cancelled", therapist_id: "th_2" });
      expect(sent(h)).toEqual(before);

      const again = await h.app.reconcile({ force: true });
      expect(again.plan.filter((e) => e.kind !== "none")).toEqual([]);
      expect(liveOf(h, cal2, m.id).map(shown)).toEqual(want);
      expect(sent(h)).toEqual(before);
    });
  }
}

/** th_2's calendar deletes only once th_1's old event is gone (the move applied first), counting its deletions. */
function deletesAfterTheMove(x: Harness, m: { id: string; cal: string }): { count: number } {
  const seen = { count: 0 };
  const cal2 = x.app.sync.mapping.calendar("th_2");
  const del = cal2.delete.bind(cal2);
  cal2.delete = async (eventId: string) => {
    seen.count++;
    for (let i = 0; i < 100 && liveOf(x, m.cal, m.id).length > 0; i++) await new Promise((r) => setTimeout(r, 20));
    return del(eventId);
  };
  return seen;
}

it("keep: the process dies after the kept event was written in th_2's calendar; the reconciliation after the restart never deletes it, whichever of its writes lands first", async () => {
  const want = await uncrashed();
  h = await keep();
  const m = await mirrored(h);
  const cal2 = h.world.calendarOf("th_2");
  reassignAndCancelUnheard(h, m.id);
  const f = dieAt(h, m.id, "write");
  await h.app.reconcile({ force: true }).catch(() => {});
  expect(f.fired).toBe(true);
  h = await restart(h);
  // The stray pass took th_2's kept event for a copy (the link still named th_1) and deleted it: landing after the
  // move, it left the link naming a deleted event, taken for th_2 clearing the marker away: gone for good.
  const deletes = deletesAfterTheMove(h, m);
  await h.app.reconcile({ force: true });
  await settle(h);
  await settle(h);
  expect(liveOf(h, m.cal, m.id)).toEqual([]);
  expect(liveOf(h, cal2, m.id).map(shown)).toEqual(want);
  expect(await h.app.sync.links.get(m.id)).toMatchObject({ therapistId: "th_2", present: true });
  expect(cancels(h) + patches(h)).toBe(0);
  expect(deletes.count).toBe(0);
});

it("keep: th_1's old event removed, then brought back from th_1's Bin: removed again; th_2's kept event stays", async () => {
  const want = await uncrashed();
  h = await keep();
  const m = await mirrored(h);
  const cal2 = h.world.calendarOf("th_2");
  reassignAndCancelUnheard(h, m.id);
  await h.app.reconcile({ force: true });
  await settle(h);
  expect(liveOf(h, m.cal, m.id)).toEqual([]);
  h.world.google.userRestoreFromBin(m.cal, m.eventId);
  expect(liveOf(h, m.cal, m.id)).toHaveLength(1);
  await settle(h);
  const report = await h.app.reconcile({ force: true });
  await settle(h);
  expect(report.plan).toMatchObject([{ kind: "delete", therapistId: "th_1", eventId: m.eventId }]);
  expect(report.guard.destructive).toBe(1);
  expect(liveOf(h, m.cal, m.id)).toEqual([]);
  expect(liveOf(h, cal2, m.id).map(shown)).toEqual(want);
  expect(h.world.booking.get(m.id)).toMatchObject({ status: "cancelled", therapist_id: "th_2" });
  expect(cancels(h) + patches(h)).toBe(0);
  expect((await h.app.reconcile({ force: true })).plan.filter((e) => e.kind !== "none")).toEqual([]);
});
