// Reminders through the daemon and the emulator (which validates and reads them back as Google does): calbridge owns
// them only where configured (event.reminders, a therapist's own), keeps them as configured, and otherwise leaves a
// therapist's reminders alone.
import { afterEach, describe, expect, it } from "vitest";
import { eventIdFor } from "../../src/calendar/ids.ts";
import { DAY, type Harness, harness, iso } from "./support.ts";

let h: Harness | undefined;
afterEach(async () => {
  await h?.close();
  h = undefined;
});

const HOUR = 3_600_000;
const remindersOf = (x: Harness, t: string, id: unknown) =>
  x.world.google.event(x.world.calendarOf(t), eventIdFor(String(id)))?.reminders;

describe("reminders", () => {
  it("are written as configured, per therapist, and put back when a therapist changes them", async () => {
    h = await harness({
      therapists: 3,
      configure: (c) => {
        c.event = {
          reminders: [
            { method: "popup", minutes: 30 },
            { method: "email", minutes: 1440 },
          ],
        };
        c.therapists[1]!.reminders = "none";
        c.therapists[2]!.reminders = "default";
      },
    });
    const start = iso(Date.now() + 2 * DAY + 10 * HOUR);
    const [a, b, c] = ["th_1", "th_2", "th_3"].map((t) =>
      h!.world.booking.create({ therapist_id: t, start_time: start }, { force: true }),
    );
    await h.app.reconcile();
    expect(remindersOf(h, "th_1", a!.id)).toEqual({
      useDefault: false,
      overrides: [
        { method: "email", minutes: 1440 },
        { method: "popup", minutes: 30 },
      ],
    });
    expect(remindersOf(h, "th_2", b!.id)).toEqual({ useDefault: false });
    expect(remindersOf(h, "th_3", c!.id)).toEqual({ useDefault: true });
    // Read back in Google's order and shape: nothing to write the next time.
    const writes = h.writes();
    expect((await h.app.reconcile()).plan).toEqual([]);
    expect(h.writes()).toBe(writes);

    // The therapist changes them (only the etag changes, not `updated`): put back, as any owned field.
    h.world.google.userEdit(h.world.calendarOf("th_2"), eventIdFor(String(b!.id)), {
      reminders: { useDefault: false, overrides: [{ method: "popup", minutes: 5 }] },
    });
    const report = await h.app.reconcile();
    expect(report.counts).toEqual({ update: 1 });
    expect(remindersOf(h, "th_2", b!.id)).toEqual({ useDefault: false });
  });

  it("are the therapist's own when not configured: they survive calbridge's updates", async () => {
    h = await harness({ therapists: 1 });
    const a = h.world.booking.create(
      { therapist_id: "th_1", start_time: iso(Date.now() + 2 * DAY + 10 * HOUR) },
      { force: true },
    );
    await h.app.reconcile();
    const own = { useDefault: false, overrides: [{ method: "popup", minutes: 5 }] };
    h.world.google.userEdit(h.world.calendarOf("th_1"), eventIdFor(String(a.id)), { reminders: own });
    // Nothing calbridge owns changed: the new etag is taken as it is, nothing is written.
    const writes = h.writes();
    expect((await h.app.reconcile()).counts).toEqual({ adopt: 1 });
    expect(h.writes()).toBe(writes);
    h.world.booking.move(String(a.id), Date.now() + 3 * DAY + 10 * HOUR);
    const report = await h.app.reconcile();
    expect(report.counts).toEqual({ update: 1 });
    expect(remindersOf(h, "th_1", a.id)).toEqual(own);
  });
});
