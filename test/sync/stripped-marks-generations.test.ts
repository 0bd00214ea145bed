// calbridge's marks stripped (another client's full update, kewisch/gdata-provider #747) from a later generation of an
// appointment's event (eventIdFor(id, g + 1): the event Google's refusal to restore a person-deleted id made calbridge
// put back under the next id), and from a series Google split off the event ("This and following events"). Under
// calbridge's own id, an event naming no appointment is still the appointment's (as stripped-marks.test.ts): the later
// generation is adopted (not a deletion written back as a cancellation), and the split-off series goes like a marked one.
import { afterEach, expect, it } from "vitest";
import { eventIdFor } from "../../src/calendar/ids.ts";
import { cancels, DAY, type Harness, iso, mirrored, settle, twoWay } from "./support.ts";

let h: Harness | undefined;
afterEach(async () => {
  await h?.close();
  h = undefined;
});

const HOUR = 3_600_000;

const strip = (x: Harness, cal: string, eventId: string) =>
  x.world.google.userEdit(cal, eventId, {
    extendedProperties: {
      private: { calbridge_appointment_id: null, calbridge_managed: null, "X-MOZ-LASTACK": "20260101T000000Z" },
    },
  });

const privateOf = (x: Harness, cal: string, eventId: string) =>
  (x.world.google.event(cal, eventId)?.extendedProperties as { private?: Record<string, string> } | undefined)?.private;
const liveIds = (x: Harness, cal: string) =>
  x.world.google
    .events(cal)
    .filter((e) => e.status !== "cancelled")
    .map((e) => String(e.id));

/** The event deleted by a person and the link lost: calbridge puts it back under generation 1, then marks go. */
async function laterGenerationStripped(x: Harness) {
  const m = await mirrored(x);
  const stale = (await x.app.sync.links.get(m.id))!;
  x.world.google.userDelete(m.cal, m.eventId);
  await x.app.sync.links.forget(stale);
  await x.app.reconcile();
  await settle(x);
  const later = eventIdFor(m.id, 1);
  expect(liveIds(x, m.cal)).toEqual([later]);
  strip(x, m.cal, later);
  return { ...m, stale, later };
}

it("a store put back from before a later generation whose marks were stripped: adopted, nothing cancelled", async () => {
  h = await twoWay();
  const m = await laterGenerationStripped(h);
  // The backup's link names the deleted generation 0.
  await h.app.sync.links.save(m.stale);
  await h.app.reconcile();
  await settle(h);
  await h.app.reconcile();
  await settle(h);
  expect({ cancels: cancels(h), status: h.world.booking.get(m.id)!.status }).toEqual({
    cancels: 0,
    status: "confirmed",
  });
  expect(liveIds(h, m.cal)).toEqual([m.later]);
  expect(await h.app.sync.links.get(m.id)).toMatchObject({ eventId: m.later, generation: 1, present: true });
  expect(privateOf(h, m.cal, m.later)).toMatchObject({ calbridge_appointment_id: m.id, calbridge_managed: "1" });
});

it("a link lost again after that: the stripped later generation is written to, no second event", async () => {
  h = await twoWay();
  const m = await laterGenerationStripped(h);
  await h.app.sync.links.forget((await h.app.sync.links.get(m.id))!);
  await h.app.reconcile();
  await settle(h);
  expect({ cancels: cancels(h), status: h.world.booking.get(m.id)!.status }).toEqual({
    cancels: 0,
    status: "confirmed",
  });
  expect(liveIds(h, m.cal)).toEqual([m.later]);
  expect(privateOf(h, m.cal, m.later)).toMatchObject({ calbridge_appointment_id: m.id, calbridge_managed: "1" });
});

it("a series split off an event whose marks were stripped goes when calbridge makes the event single again", async () => {
  h = await twoWay();
  const m = await mirrored(h);
  strip(h, m.cal, m.eventId);
  h.world.google.userEdit(m.cal, m.eventId, { recurrence: ["RRULE:FREQ=WEEKLY;COUNT=6"] });
  const tail = String(
    h.world.google.userSplitSeries(m.cal, m.eventId, m.start + 14 * DAY, {
      start: { dateTime: iso(m.start + 14 * DAY + HOUR) },
      end: { dateTime: iso(m.start + 14 * DAY + 2 * HOUR) },
    }).id,
  );
  await settle(h);
  await h.app.reconcile();
  await settle(h);
  expect(h.world.google.event(m.cal, m.eventId)?.recurrence ?? []).toEqual([]);
  expect(h.world.google.event(m.cal, tail)?.status).toBe("cancelled");
  expect(liveIds(h, m.cal)).toEqual([m.eventId]);
  expect(cancels(h)).toBe(0);
});

it("a split-off series whose own marks were stripped goes when calbridge makes the event single again; one naming another appointment stays, also when the booking is cancelled", async () => {
  h = await twoWay();
  const m = await mirrored(h);
  h.world.google.userEdit(m.cal, m.eventId, { recurrence: ["RRULE:FREQ=WEEKLY;COUNT=8"] });
  const tail = String(h.world.google.userSplitSeries(m.cal, m.eventId, m.start + 14 * DAY).id);
  const other = String(h.world.google.userSplitSeries(m.cal, tail, m.start + 35 * DAY).id);
  // Another client's full update stripped the tail's marks; the next split names another appointment (it stays).
  strip(h, m.cal, tail);
  h.world.google.userEdit(m.cal, other, { extendedProperties: { private: { calbridge_appointment_id: "other" } } });
  await settle(h);
  expect(liveIds(h, m.cal).sort()).toEqual([m.eventId, other].sort());

  h.world.booking.cancel(m.id, "customer moved away");
  await settle(h);
  expect(liveIds(h, m.cal)).toEqual([other]);
  expect(cancels(h)).toBe(0);
});
