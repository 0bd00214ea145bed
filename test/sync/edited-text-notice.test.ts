// Tests a therapist's edit of the text calbridge owns (title, description, colour): it is written over from the
// booking, as before, but no longer silently. Session notes typed into the description vanished at the next poll
// without a word, while every other change calbridge undoes (a move, a deletion, a refusal) leaves a note. The event
// now says what was undone and quotes the lines the therapist added; a second edit keeps the first one's quote. A
// template changed by a reload is no edit of theirs: the events are rewritten without a note. A time zone changed
// alone (the same instants) is set back with a note of its own: the one about the text named nothing they touched.
import { afterEach, describe, expect, it } from "vitest";
import { eventIdFor } from "../../src/calendar/ids.ts";
import { daemonHarness, type Harness, mirrored, pollAll, quiet } from "./support.ts";

let h: Harness | undefined;
afterEach(async () => {
  await h?.close();
  h = undefined;
});

const NOTE = "calbridge: your edit of this event was undone";

describe("an edit of an event's owned text", () => {
  it("is undone with a note quoting the lines the therapist added, and a second edit keeps the first quote", async () => {
    h = await daemonHarness({ therapists: 1 });
    const m = await mirrored(h);
    const description = () => String(h!.world.google.event(m.cal, m.eventId)!.description);
    const before = description();
    expect(before).not.toContain(NOTE);

    h.world.google.userEdit(m.cal, m.eventId, { description: `${before}\nwants to work on the left shoulder` });
    await pollAll(h);
    const after = description();
    expect(after.startsWith(before)).toBe(true); // calbridge's text is back
    expect(after).toContain(`${NOTE}: its title, description and colour are written from the booking service`);
    expect(after).toContain("The text you added: “wants to work on the left shoulder”");

    // As Google's web UI stores an edited description: HTML.
    h.world.google.userEdit(m.cal, m.eventId, {
      description: `${after.replaceAll("\n", "<br>")}<br><b>bring the referral</b>`,
    });
    await pollAll(h);
    expect(description()).toContain("The text you added: “wants to work on the left shoulder / bring the referral”");
    expect(h.world.google.event(m.cal, m.eventId)!.status).toBe("confirmed");
    expect(h.world.booking.requests.filter((r) => r.method !== "GET")).toEqual([]);
  });

  it("a colour or title changed alone is undone with the note, without a quote", async () => {
    h = await daemonHarness({ therapists: 1 });
    const m = await mirrored(h);
    const title = String(h.world.google.event(m.cal, m.eventId)!.summary);
    h.world.google.userEdit(m.cal, m.eventId, { summary: "Lunch", colorId: "5" });
    await pollAll(h);
    const ev = h.world.google.event(m.cal, m.eventId)!;
    expect(ev.summary).toBe(title);
    expect(String(ev.description)).toContain(NOTE);
    expect(String(ev.description)).not.toContain("The text you added");
  });

  it("the time zone changed alone (same instants): set back with a note that says so, not one about the text", async () => {
    h = await daemonHarness({ therapists: 1 });
    const m = await mirrored(h);
    const ev0 = h.world.google.event(m.cal, m.eventId)!;
    const zone = String((ev0.start as { timeZone: string }).timeZone);
    expect(zone).not.toBe("America/New_York");
    const at = (ms: number) => ({ dateTime: new Date(ms).toISOString(), timeZone: "America/New_York" });
    h.world.google.userEdit(m.cal, m.eventId, { start: at(m.start), end: at(m.start + 3_600_000) });
    expect(h.world.google.event(m.cal, m.eventId)!.start).toMatchObject({ timeZone: "America/New_York" });
    await pollAll(h);
    const ev = h.world.google.event(m.cal, m.eventId)!;
    expect(ev.start).toMatchObject({ timeZone: zone });
    expect(ev.summary).toBe(ev0.summary);
    expect(String(ev.description)).toContain(
      `calbridge: the time zone of this event was set back to ${zone}, the one calbridge writes appointments in; its time did not change.`,
    );
    expect(String(ev.description)).not.toContain(NOTE);
    expect(h.world.booking.requests.filter((r) => r.method !== "GET")).toEqual([]);

    // The zone and the title changed together: the note about the text, as for any edit of it.
    h.world.google.userEdit(m.cal, m.eventId, { summary: "Lunch", start: at(m.start), end: at(m.start + 3_600_000) });
    await pollAll(h);
    const ev2 = h.world.google.event(m.cal, m.eventId)!;
    expect(ev2.summary).toBe(ev0.summary);
    expect(ev2.start).toMatchObject({ timeZone: zone });
    expect(String(ev2.description)).toContain(`${NOTE}: its title, description and colour`);
    expect(h.world.booking.requests.filter((r) => r.method !== "GET")).toEqual([]);
  });

  it("a template changed by a reload rewrites the events without a note", async () => {
    h = await daemonHarness({ therapists: 1 });
    const m = await mirrored(h);
    const next = structuredClone(h.app.config);
    next.event = { ...next.event, description: "Session {id}" };
    await h.app.reload(next);
    await h.app.reconcile();
    await quiet(h);
    const description = String(h.world.google.event(m.cal, eventIdFor(m.id))!.description);
    expect(description).toContain(`Session ${m.id}`);
    expect(description).not.toContain("calbridge:");
  });
});
