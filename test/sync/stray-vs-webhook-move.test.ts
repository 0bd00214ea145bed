// A reconciliation's stray pass against a webhook-driven move of the same appointment. The reconciliation lists the
// booking side (the appointment still th_1's); a reassignment webhook arrives and its sync writes the event in th_2's
// calendar, which th_2's listing (taken after that write) shows; the stray pass reads the link before the move saved
// it (still naming th_1), and the run planned nothing for the appointment (the listing showed th_1): th_2's new event
// looked like a copy left behind. Its deletion was sent outside the appointment's turn and landed after the move linked
// that event (or between the move's write and its link save): the next sync saw the linked event deleted in th_2's
// calendar, th_2's deletion, and cancelled the appointment in the booking service. The deletion now waits for the
// appointment's turn and is sent only while the link is the one the stray pass read (strays.ts, deleteStrayInTurn).
// The hooks only delay: th_2's listing waits for the webhook's write, the move's link save is slow.
import { afterEach, expect, it } from "vitest";
import { waitFor } from "../support/wait-for.ts";
import { cancels, type Harness, liveOf, mirrored, settle, twoWay } from "./support.ts";

let h: Harness | undefined;
afterEach(async () => {
  await h?.close();
  h = undefined;
});

for (const lands of ["after the link save", "before the link save"] as const) {
  it(`a reassignment webhook's move during a reconciliation: th_2's new event is not deleted as a copy, nothing cancelled (the DELETE lands ${lands})`, async () => {
    h = await twoWay({ reassign: true });
    const x = h;
    const m = await mirrored(x);
    const cal2 = x.world.calendarOf("th_2");
    const fx = x.app.sync.fx;

    // The webhook sync's move: its link save (fx.record naming th_2) is slow: it waits until the stray's deletion is
    // under way, or half a second.
    let release!: () => void;
    const released = new Promise<void>((r) => (release = r));
    let th2Written = false;
    const write = fx.write.bind(fx);
    fx.write = async (...a: Parameters<typeof write>) => {
      const w = await write(...a);
      if (a[3].appointmentId === m.id && a[0] === "th_2") th2Written = true;
      return w;
    };
    const record = fx.record.bind(fx);
    fx.record = async (args: Parameters<typeof record>[0]) => {
      if (args.appointmentId === m.id && args.therapistId === "th_2" && args.present)
        await Promise.race([released, new Promise((r) => setTimeout(r, 500))]);
      return record(args);
    };

    // th_2's calendar is listed after the booking listing (many calendars, a few at a time): the webhook comes between.
    const cal2Port = x.app.sync.mapping.calendar("th_2");
    const list = cal2Port.listManaged.bind(cal2Port);
    let reassigned = false;
    cal2Port.listManaged = (...a: Parameters<typeof list>) => {
      const inner = async function* () {
        if (!reassigned) {
          reassigned = true;
          x.world.booking.reassign(m.id, "th_2", { force: true }); // its webhook is delivered to the daemon
          await waitFor("the move to write th_2's event", () => th2Written, 10_000);
        }
        yield* list(...a);
      };
      return inner();
    };
    // The stray deletion in flight (a slow or retried DELETE) while the move saves its link.
    const del = cal2Port.delete.bind(cal2Port);
    let strayDeletes = 0;
    cal2Port.delete = async (eventId: string) => {
      if (eventId !== m.eventId) return del(eventId);
      strayDeletes++;
      if (lands === "before the link save") {
        const r = await del(eventId);
        release();
        return r;
      }
      release();
      await waitFor(
        "the link to name th_2",
        async () => (await x.app.sync.links.get(m.id))?.therapistId === "th_2",
        10_000,
      );
      return del(eventId);
    };

    const report = await x.app.reconcile({ force: true });
    release();
    await settle(x);
    await settle(x);
    expect((await x.app.reconcile({ force: true })).plan.filter((e) => e.kind !== "none")).toEqual([]);

    expect(reassigned).toBe(true);
    expect(report.plan).toMatchObject([
      { kind: "delete", therapistId: "th_2", reason: "copy left behind in another calendar" },
    ]);
    expect(strayDeletes).toBe(0); // left for the next reconciliation: the appointment was synced since
    expect(x.world.booking.get(m.id)).toMatchObject({ status: "confirmed", therapist_id: "th_2" });
    expect(cancels(x)).toBe(0);
    expect(liveOf(x, cal2, m.id)).toHaveLength(1);
    expect(await x.app.sync.links.get(m.id)).toMatchObject({ therapistId: "th_2", present: true });
  });
}
