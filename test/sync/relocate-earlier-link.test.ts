// An event an earlier build wrote (its link records no times mark); this build writes the clinic's move into it and
// dies before the link records that; the clinic moves the booking again while calbridge is down; the therapist is
// given another calendar. The relocation's re-point saved the link with a new syncedAt, after the mark's moment, and
// lastSynced took the mark for an earlier build's (a link recorded since): calbridge's own lost write read as the
// therapist's move, sent to the booking service (calendar_wins: the customer moved back) or undone with a note
// (booking_wins). Links saved again without recording an event keep when they last recorded one (links.ts, resaved).
import { afterEach, expect, it } from "vitest";
import { TIMES_PROPERTY } from "../../src/calendar/ids.ts";
import type { RenderedEvent } from "../../src/calendar/render.ts";
import { failLinkSaveOnce, restart, untilFired } from "./crash.ts";
import { daemonHarness, type Harness, liveOf, mirrored, patches, settle, startOf } from "./support.ts";

let h: Harness | undefined;
afterEach(async () => {
  await h?.close();
  h = undefined;
});

const HOUR = 3_600_000;
const NEW = "th1.sessions@clinic.test";
const bookedAt = (x: Harness, id: string) => Date.parse(String(x.world.booking.get(id)!.start_time));

for (const conflict of ["calendar_wins", "booking_wins"] as const) {
  for (const repoint of [false, true]) {
    it(`${conflict}${repoint ? ", re-pointed (events.move)" : ""}: lost write over an earlier build's event, booking moved again: nothing sent, no note`, async () => {
      h = await daemonHarness({
        therapists: 2,
        configure: (c) => {
          c.sync = { ...c.sync, conflict, writeback: { cancel_grace_seconds: 0, reschedule_grace_seconds: 0 } };
        },
      });
      // The earlier build wrote the event: no mark, its link none.
      const fx = h.app.sync.fx;
      const write = fx.write.bind(fx);
      fx.write = (therapistId, kind, body, ...rest) => {
        const { [TIMES_PROPERTY]: _, ...marks } = body.extendedProperties.private;
        const old: RenderedEvent = { ...body, extendedProperties: { private: marks } };
        return write(therapistId, kind, old, ...rest);
      };
      const m = await mirrored(h);
      expect((await h.app.sync.links.get(m.id))?.timesMark).toBeUndefined();
      h = await restart(h); // this build
      await new Promise((r) => setTimeout(r, 20));
      // This build writes the clinic's move, and dies as it records it.
      const f = failLinkSaveOnce(h, (l) => l.present && l.eventStart === m.start + HOUR, { die: true });
      h.world.booking.move(m.id, m.start + HOUR, { force: true });
      void h.app.reconcile({ force: true }).catch(() => {});
      await untilFired(h, f);
      await h.app.stop(2000);
      expect(startOf(liveOf(h, m.cal, m.id)[0])).toBe(m.start + HOUR);
      h.world.booking.move(m.id, m.start + 3 * HOUR, { force: true }); // moved again while calbridge is down
      if (repoint) {
        h.world.google.createCalendar(NEW, m.cal, { timeZone: "Europe/Berlin" });
        Object.assign(h.world.config.therapists[0]!, { calendar_id: NEW });
      }
      h = await restart(h);
      await h.app.reconcile({ force: true });
      await settle(h);
      const cal = repoint ? NEW : m.cal;
      const live = liveOf(h, cal, m.id);
      const got = {
        patches: patches(h),
        booked: (bookedAt(h, m.id) - m.start) / HOUR,
        event: live.map((e) => (startOf(e) - m.start) / HOUR),
        note: String(live[0]?.description ?? "").includes("calbridge:"),
      };
      expect(got).toEqual({ patches: 0, booked: 3, event: [3], note: false });
    }, 60_000);
  }
}
