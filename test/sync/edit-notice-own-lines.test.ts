// Tests that an edit notice quotes only what the therapist typed, never calbridge's own old lines (review24). It
// quoted every line of the event's description the new rendering lacked, and the link kept no record of what calbridge
// had written: when the booking's notes or contact details (or the templates) changed while the therapist had edited
// anything in the event (a colour is enough), the customer's old notes came back into the event as "The text you
// added", after they were removed from the booking, and were kept in the link's notice in the store. The link now
// keeps keyed digests of the lines calbridge wrote (never the text); an earlier build's link, which has none, quotes
// only when nothing that shapes the text changed since it was written.
import { afterEach, describe, expect, it } from "vitest";
import { eventIdFor } from "../../src/calendar/ids.ts";
import { DAY, daemonHarness, type Harness, pollAll, quiet, settle } from "./support.ts";

let h: Harness | undefined;
afterEach(async () => {
  await h?.close();
  h = undefined;
});

const QUOTE = "The text you added";
const NOTE = "calbridge: your edit of this event was undone";

async function booked(x: Harness, fields: Record<string, unknown>) {
  const start = new Date(Date.now() + 3 * DAY);
  start.setUTCHours(10, 0, 0, 0);
  const appt = x.world.booking.create(
    { therapist_id: "th_1", start_time: start.toISOString(), ...fields },
    { force: true },
  );
  await settle(x);
  const id = String(appt.id);
  const cal = x.world.calendarOf("th_1");
  const eventId = eventIdFor(id);
  return { id, cal, eventId, desc: () => String(x.world.google.event(cal, eventId)!.description) };
}

describe("the lines an edit notice quotes", () => {
  it("a customer's notes removed from the booking while the therapist changed the colour are not quoted back", async () => {
    h = await daemonHarness({ therapists: 1 });
    const b = await booked(h, { notes: "HIV positive, on PrEP" });
    expect(b.desc()).toContain("HIV positive");
    const stored = JSON.stringify(await h.app.sync.links.get(b.id));
    expect(stored).not.toContain("HIV positive");
    expect(stored).toContain('"lines":[');

    h.world.google.userEdit(b.cal, b.eventId, { colorId: "5" });
    h.world.booking.setNotes(b.id, "");
    await quiet(h);
    await pollAll(h);
    await settle(h);
    expect(b.desc()).toContain(NOTE);
    expect(b.desc()).not.toContain(QUOTE);
    expect(b.desc()).not.toContain("HIV positive");
    expect(JSON.stringify(await h.app.sync.links.get(b.id))).not.toContain("HIV positive");
  });

  it("with the notes changed and a line typed in the same edit, only the typed line is quoted", async () => {
    h = await daemonHarness({ therapists: 1 });
    const b = await booked(h, { notes: "HIV positive, on PrEP" });
    h.world.google.userEdit(b.cal, b.eventId, { description: `${b.desc()}\nsession 3: left shoulder` });
    h.world.booking.setNotes(b.id, "");
    await quiet(h);
    await pollAll(h);
    await settle(h);
    expect(b.desc()).toContain(`${QUOTE}: “session 3: left shoulder”`);
    expect(b.desc()).not.toContain("HIV positive");
    const notice = (await h.app.sync.links.get(b.id))?.notice?.text;
    expect(notice).toContain("left shoulder");
    expect(notice).not.toContain("HIV positive");
  });

  it("include_customer_contact turned off by a reload: an event the therapist touched loses the contact lines", async () => {
    h = await daemonHarness({
      therapists: 1,
      configure: (c) => {
        c.event = { ...c.event, include_customer_contact: true };
      },
    });
    const b = await booked(h, {
      customer: { name: "Maria Muster", email: "maria@example.org", phone: "+49 151 5550123" },
    });
    expect(b.desc()).toContain("maria@example.org");
    h.world.google.userEdit(b.cal, b.eventId, { colorId: "5" });
    const next = structuredClone(h.app.config);
    next.event = { ...next.event, include_customer_contact: false };
    await h.app.reload(next);
    await h.app.reconcile();
    await quiet(h);
    await pollAll(h);
    await settle(h);
    expect(b.desc()).not.toContain("maria@example.org");
    expect(b.desc()).not.toContain("5550123");
    const stored = JSON.stringify(await h.app.sync.links.get(b.id));
    expect(stored).not.toContain("maria@example.org");
    expect(stored).not.toContain("5550123");
  });
});
