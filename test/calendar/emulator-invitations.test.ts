// Tests guests' copies of an event in the emulator through googleapis: a guest whose address is a calendar gets the
// event under the organizer's id, with the organizer shown and its own entry marked self, the shared extended
// properties and not the private ones; the copy follows the organizer's changes, deletion, restoring and the guest's
// removal; a guest may change only their own part (403 forbiddenForNonOrganizer otherwise) and deleting the copy
// declines the invitation for good.
import { afterEach, beforeEach, describe, expect, it } from "vitest";
import { body, CALENDAR_ID, expectGoogleError, type Fixture, SUBJECT, setup } from "./helpers.ts";

let f: Fixture;
const calendarId = CALENDAR_ID;
const GUEST = "ben@clinic.example";
beforeEach(async () => {
  f = await setup();
  f.emulator.createCalendar(GUEST, GUEST, { timeZone: "Europe/Berlin" });
  f.emulator.shareCalendar(GUEST, SUBJECT, "writer");
});
afterEach(async () => {
  await f.close();
});

const invited = (extra: object = {}) => ({
  ...body("Session"),
  id: "invite00001",
  attendees: [{ email: GUEST }],
  extendedProperties: { private: { mine: "1" }, shared: { both: "1" } },
  ...extra,
});

describe("invitations: guests' copies", () => {
  it("puts the event in the guest's calendar under the organizer's id: organizer shown, private properties not", async () => {
    const token = (await f.api.events.list({ calendarId: GUEST })).data.nextSyncToken!;
    await f.api.events.insert({ calendarId, requestBody: invited() });
    const copy = (await f.api.events.get({ calendarId: GUEST, eventId: "invite00001" })).data;
    expect(copy).toMatchObject({
      id: "invite00001",
      status: "confirmed",
      summary: "Session",
      organizer: { email: calendarId },
      extendedProperties: { shared: { both: "1" } },
      iCalUID: "invite00001@google.com",
    });
    expect(copy.organizer?.self).toBeUndefined();
    expect(copy.extendedProperties?.private).toBeUndefined();
    expect(copy.attendees).toEqual([expect.objectContaining({ email: GUEST, self: true })]);
    const own = (await f.api.events.get({ calendarId, eventId: "invite00001" })).data;
    expect(own.organizer).toEqual({ email: calendarId, self: true });
    // An incremental sync of the guest's calendar reports it; the organizer's private filter does not find it there.
    const inc = await f.api.events.list({ calendarId: GUEST, syncToken: token });
    expect(inc.data.items?.map((e) => e.id)).toEqual(["invite00001"]);
    const marked = await f.api.events.list({ calendarId: GUEST, privateExtendedProperty: ["mine=1"] });
    expect(marked.data.items).toEqual([]);
    // The id is taken in the guest's calendar.
    await expectGoogleError(
      f.api.events.insert({ calendarId: GUEST, requestBody: { ...body("Own"), id: "invite00001" } }),
      409,
      "duplicate",
    );
  });

  it("follows the organizer: a change, a deletion, an undo, and the guest's removal cancel or bring back the copy", async () => {
    await f.api.events.insert({ calendarId, requestBody: invited() });
    await f.api.events.patch({ calendarId, eventId: "invite00001", requestBody: { location: "Room 2" } });
    expect((await f.api.events.get({ calendarId: GUEST, eventId: "invite00001" })).data.location).toBe("Room 2");
    f.emulator.userDelete(calendarId, "invite00001");
    expect((await f.api.events.get({ calendarId: GUEST, eventId: "invite00001" })).data.status).toBe("cancelled");
    f.emulator.userUndoDelete(calendarId, "invite00001");
    expect((await f.api.events.get({ calendarId: GUEST, eventId: "invite00001" })).data.status).toBe("confirmed");
    await f.api.events.patch({ calendarId, eventId: "invite00001", requestBody: { attendees: [] } });
    expect((await f.api.events.get({ calendarId: GUEST, eventId: "invite00001" })).data.status).toBe("cancelled");
  });

  it("lets a guest change only their own part of the copy; deleting it declines the invitation for good", async () => {
    await f.api.events.insert({ calendarId, requestBody: invited() });
    const patched = await f.api.events.patch({
      calendarId: GUEST,
      eventId: "invite00001",
      requestBody: { colorId: "5", extendedProperties: { private: { theirs: "1" } } },
    });
    expect(patched.data.extendedProperties).toEqual({ shared: { both: "1" }, private: { theirs: "1" } });
    for (const change of [
      { summary: "Mine now" },
      { start: { dateTime: "2026-12-01T08:00:00Z" }, end: { dateTime: "2026-12-01T09:00:00Z" } },
      { extendedProperties: { shared: { both: "2" } } },
    ]) {
      await expectGoogleError(
        f.api.events.patch({ calendarId: GUEST, eventId: "invite00001", requestBody: change }),
        403,
        "forbiddenForNonOrganizer",
      );
    }
    await expectGoogleError(
      f.api.events.move({ calendarId: GUEST, eventId: "invite00001", destination: calendarId }),
      403,
      "forbiddenForNonOrganizer",
    );
    // The organizer's change keeps the guest's own part.
    await f.api.events.patch({ calendarId, eventId: "invite00001", requestBody: { summary: "Session (moved)" } });
    const copy = (await f.api.events.get({ calendarId: GUEST, eventId: "invite00001" })).data;
    expect(copy).toMatchObject({
      summary: "Session (moved)",
      colorId: "5",
      extendedProperties: { private: { theirs: "1" } },
    });

    await f.api.events.delete({ calendarId: GUEST, eventId: "invite00001" });
    const own = (await f.api.events.get({ calendarId, eventId: "invite00001" })).data;
    expect(own.status).toBe("confirmed");
    expect(own.attendees).toEqual([expect.objectContaining({ email: GUEST, responseStatus: "declined" })]);
    await f.api.events.patch({ calendarId, eventId: "invite00001", requestBody: { location: "Room 3" } });
    expect((await f.api.events.get({ calendarId: GUEST, eventId: "invite00001" })).data.status).toBe("cancelled");
  });
});
