// A therapist moved her event in the old calendar, then the administrator gave her another calendar: the relocation
// takes the event there with her move (events.move, or a copy at her times: keptMove), the link still names the times
// last synced, so the move is hers and sent. Had the process died (or the link's store write failed) once Google had
// the event in the new calendar but before the link named it, the next start found the old event gone and wrote the
// booking over the new one: her move was lost without a PATCH or a note. The event is now taken as it is
// (relocate-rules.ts movedUnrecorded), and the move sent.
import { afterEach, expect, it } from "vitest";
import { APPOINTMENT_ID_PROPERTY, eventIdFor, MANAGED_PROPERTY } from "../../src/calendar/ids.ts";
import type { Config } from "../../src/config/schema.ts";
import { failLinkSaveOnce, restart, untilFired } from "./crash.ts";
import { DAY, daemonHarness, type Harness, iso, liveOf, mirrored, patches, settle, startOf } from "./support.ts";

let h: Harness | undefined;
afterEach(async () => {
  await h?.close();
  h = undefined;
});

const HOUR = 3_600_000;
const NEW = "th1.sessions@clinic.test";

const cases = [
  { how: "copied", grace: 0 },
  { how: "events.move", grace: 0 },
  // Seen before the re-pointing, waiting out its grace period: the old event gone is no deletion to tell about either.
  { how: "copied", grace: 2 },
] as const;

for (const { how, grace } of cases) {
  const waited = grace ? ", seen and waiting out its grace period" : "";
  it(`${how}${waited}: the process dies before the re-pointed link is saved; the therapist's move is still sent`, async () => {
    h = await daemonHarness({
      therapists: 2,
      configure: (c) => {
        c.sync = { ...c.sync, writeback: { cancel_grace_seconds: grace, reschedule_grace_seconds: grace } };
      },
    });
    const m = await mirrored(h);
    // The therapist drags the event two hours later (not read yet); the admin gives her a new calendar: of another
    // account (events.move not allowed: copied), or of her own (events.move).
    const moved = m.start + 2 * HOUR;
    h.world.google.userEdit(m.cal, m.eventId, {
      start: { dateTime: iso(moved) },
      end: { dateTime: iso(moved + HOUR) },
    });
    if (grace) await h.app.poller.poll("th_1");
    const other = how === "copied";
    h.world.google.createCalendar(NEW, other ? NEW : m.cal, { timeZone: "Europe/Berlin" });
    const next = structuredClone(h.world.config) as Config;
    Object.assign(next.therapists[0]!, other ? { calendar_id: NEW, impersonate: NEW } : { calendar_id: NEW });
    const f = failLinkSaveOnce(h, (l) => l.appointmentId === m.id && l.calendarId === NEW, { die: true });
    await h.app.reload(structuredClone(next));
    await h.app.reconcile({ force: true }).catch(() => {}); // relocates: the save of the re-pointed link fails
    await untilFired(h, f);
    await h.app.stop(2000);
    // Google has the event in the new calendar at her time; the link still names the old calendar.
    expect(liveOf(h, m.cal, m.id)).toHaveLength(0);
    expect(liveOf(h, NEW, m.id).map(startOf)).toEqual([moved]);
    expect(h.world.google.requestLog.some((r) => r.path.endsWith("/move") && r.status === 200)).toBe(!other);

    Object.assign(h.world.config.therapists[0]!, next.therapists[0]);
    h = await restart(h);
    expect((await h.app.sync.links.get(m.id))?.calendarId).toBe(m.cal);
    await h.app.reconcile({ force: true });
    await settle(h);
    if (grace) await new Promise((r) => setTimeout(r, (grace + 1) * 1000));
    await settle(h);
    expect(patches(h)).toBe(1);
    expect(Date.parse(String(h.world.booking.get(m.id)!.start_time))).toBe(moved);
    const live = liveOf(h, NEW, m.id);
    expect(live.map(startOf)).toEqual([moved]);
    expect(String(live[0]?.description ?? "")).not.toContain("calbridge:");
    expect(await h.app.sync.links.get(m.id)).toMatchObject({ calendarId: NEW, present: true, eventStart: moved });
  }, 60_000);
}

// What else the relocation may find in the new calendar under the event's id, the old event gone: never adopted, so
// its time is never sent as the therapist's move.
for (const found of ["left there before the last sync", "without calbridge's marks"] as const) {
  it(`an event ${found} is written over, nothing sent`, async () => {
    h = await daemonHarness({
      therapists: 2,
      configure: (c) => {
        c.sync = { ...c.sync, writeback: { cancel_grace_seconds: 0, reschedule_grace_seconds: 0 } };
      },
    });
    const start = new Date(Date.now() + 3 * DAY);
    start.setUTCHours(10, 0, 0, 0);
    const id = String(h.world.booking.create({ therapist_id: "th_1", start_time: iso(+start) }, { force: true }).id);
    const cal = h.world.calendarOf("th_1");
    h.world.google.createCalendar(NEW, NEW, { timeZone: "Europe/Berlin" });
    const marked = found === "left there before the last sync";
    const other = () =>
      h!.world.google.userInsert(NEW, {
        id: eventIdFor(id),
        summary: "elsewhere",
        start: { dateTime: iso(+start + 5 * HOUR) },
        end: { dateTime: iso(+start + 6 * HOUR) },
        ...(marked
          ? { extendedProperties: { private: { [APPOINTMENT_ID_PROPERTY]: id, [MANAGED_PROPERTY]: "1" } } }
          : {}),
      });
    if (marked) other(); // before calbridge last synced the appointment
    await settle(h);
    expect(liveOf(h, cal, id)).toHaveLength(1);
    await h.app.stop(2000);
    if (!marked) other(); // after: newer than the link, but not calbridge's
    h.world.google.userDelete(cal, eventIdFor(id)); // nothing reads that calendar any more when it is seen
    Object.assign(h.world.config.therapists[0]!, { calendar_id: NEW, impersonate: NEW });
    h = await restart(h);
    await h.app.reconcile({ force: true });
    await settle(h);
    expect(h.world.booking.requests.filter((r) => r.method !== "GET").map((r) => r.route)).toEqual([]);
    expect(Date.parse(String(h.world.booking.get(id)!.start_time))).toBe(+start);
    expect(h.world.booking.get(id)!.status).toBe("confirmed");
    const live = h.world.google.events(NEW).filter((e) => e.status !== "cancelled");
    expect(live.map(startOf)).toEqual([+start]);
  }, 60_000);
}
