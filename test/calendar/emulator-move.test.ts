// Tests events.move and the UI's "Change calendar" through googleapis: the event appears in the destination under the
// same id, the source keeps an id-only cancelled entry, access and Google's restrictions.
import { afterEach, beforeEach, describe, expect, it } from "vitest";
import { body, CALENDAR_ID, expectGoogleError, type Fixture, SUBJECT, setup } from "./helpers.ts";

let f: Fixture;
const calendarId = CALENDAR_ID;
const OTHER = "private@clinic.example";
beforeEach(async () => {
  f = await setup();
  f.emulator.createCalendar(OTHER, OTHER, { timeZone: "Europe/Berlin" });
  f.emulator.shareCalendar(OTHER, SUBJECT, "writer");
});
afterEach(async () => {
  await f.close();
});

describe("events.move", () => {
  it("moves the event under its id; the source's incremental sync reports an id-only deletion", async () => {
    await f.api.events.insert({ calendarId, requestBody: { ...body("Session"), id: "move000001", location: "Room" } });
    const token = (await f.api.events.list({ calendarId })).data.nextSyncToken!;
    const moved = await f.api.events.move({ calendarId, eventId: "move000001", destination: OTHER });
    expect(moved.data).toMatchObject({ id: "move000001", status: "confirmed", organizer: { email: OTHER } });
    expect((await f.api.events.get({ calendarId: OTHER, eventId: "move000001" })).data.location).toBe("Room");
    const inc = await f.api.events.list({ calendarId, syncToken: token });
    expect(inc.data.items).toEqual([expect.objectContaining({ id: "move000001", status: "cancelled" })]);
    expect(Object.keys(inc.data.items![0]!).sort()).toEqual(["etag", "id", "kind", "status"]);
    // Unlike a deletion, the entry left behind has no details even for showDeleted.
    const full = await f.api.events.list({ calendarId, showDeleted: true });
    expect(full.data.items?.[0]?.summary).toBeUndefined();
    await expectGoogleError(
      f.api.events.update({ calendarId, eventId: "move000001", requestBody: { ...body("x"), status: "confirmed" } }),
      403,
      "forbidden",
    );
    await expectGoogleError(
      f.api.events.move({ calendarId: OTHER, eventId: "move000001", destination: calendarId }),
      409,
      "duplicate",
    );
    expect(f.emulator.counters.moves).toBe(1);
  });

  it("needs writer access on both calendars and a destination", async () => {
    await f.api.events.insert({ calendarId, requestBody: { ...body("x"), id: "move000002" } });
    f.emulator.createCalendar("readonly@clinic.example", "readonly@clinic.example");
    f.emulator.shareCalendar("readonly@clinic.example", SUBJECT, "reader");
    await expectGoogleError(
      f.api.events.move({ calendarId, eventId: "move000002", destination: "readonly@clinic.example" }),
      403,
      "requiredAccessLevel",
    );
    await expectGoogleError(
      f.api.events.move({ calendarId, eventId: "move000002", destination: "nobody@clinic.example" }),
      404,
      "notFound",
    );
    await expectGoogleError(f.api.events.move({ calendarId, eventId: "move000002", destination: "" }), 400, "required");
    expect(f.emulator.event(calendarId, "move000002")?.status).toBe("confirmed");
  });

  it("moves only default events, and a series only as a whole", async () => {
    f.emulator.userInsert(calendarId, { ...body("Focus"), id: "focus00001", eventType: "focusTime" });
    await expectGoogleError(
      f.api.events.move({ calendarId, eventId: "focus00001", destination: OTHER }),
      400,
      "eventTypeRestriction",
    );
    await f.api.events.insert({
      calendarId,
      requestBody: { ...body("Weekly"), id: "moveser001", recurrence: ["RRULE:FREQ=WEEKLY;COUNT=2"] },
    });
    await expectGoogleError(
      f.api.events.move({ calendarId, eventId: "moveser001_20261123T090000Z", destination: OTHER }),
      400,
      "cannotChangeOrganizerOfInstance",
    );
    await f.api.events.move({ calendarId, eventId: "moveser001", destination: OTHER });
    const instances = await f.api.events.list({ calendarId: OTHER, singleEvents: true });
    expect(instances.data.items).toHaveLength(2);
  });
});

describe("what the calendars show after a move", () => {
  it("events.get on the source answers the entry a move left: status cancelled, no details", async () => {
    await f.api.events.insert({ calendarId, requestBody: { ...body("Session"), id: "move000003", location: "Room" } });
    f.emulator.userMove(calendarId, "move000003", OTHER);
    const left = (await f.api.events.get({ calendarId, eventId: "move000003" })).data;
    expect(Object.keys(left).sort()).toEqual(["etag", "id", "kind", "status"]);
    expect(left.status).toBe("cancelled");
    // The destination has the event under the same id, with its details.
    const there = (await f.api.events.get({ calendarId: OTHER, eventId: "move000003" })).data;
    expect(there).toMatchObject({ id: "move000003", status: "confirmed", location: "Room" });
    // A deletion reads the same way through events.get's status; only the move's entry lacks the details.
    await f.api.events.insert({ calendarId, requestBody: { ...body("x"), id: "dele000001" } });
    await f.api.events.delete({ calendarId, eventId: "dele000001" });
    expect((await f.api.events.get({ calendarId, eventId: "dele000001" })).data).toMatchObject({
      status: "cancelled",
      summary: "x",
    });
  });

  it("calendarList.list answers the account's calendars with its access role, filtered and paged", async () => {
    f.emulator.createCalendar("readonly@clinic.example", "someone@clinic.example", { summary: "Team" });
    f.emulator.shareCalendar("readonly@clinic.example", SUBJECT, "reader");
    f.emulator.createCalendar("elsewhere@clinic.example", "someone@clinic.example");
    const all = (await f.api.calendarList.list()).data;
    const roles = Object.fromEntries((all.items ?? []).map((e) => [e.id, e.accessRole]));
    expect(roles).toEqual({ [CALENDAR_ID]: "owner", [OTHER]: "writer", "readonly@clinic.example": "reader" });
    expect(all.items?.find((e) => e.id === CALENDAR_ID)?.primary).toBe(true);
    const writable = (await f.api.calendarList.list({ minAccessRole: "writer" })).data.items ?? [];
    expect(writable.map((e) => e.id).sort()).toEqual([CALENDAR_ID, OTHER].sort());
    const first = (await f.api.calendarList.list({ maxResults: 2 })).data;
    expect(first.items).toHaveLength(2);
    const rest = (await f.api.calendarList.list({ maxResults: 2, pageToken: first.nextPageToken! })).data;
    expect(rest.items).toHaveLength(1);
    expect(rest.nextSyncToken).toBeDefined();
    f.emulator.removeFromCalendarList(OTHER, SUBJECT);
    f.emulator.deleteCalendar("readonly@clinic.example");
    expect(((await f.api.calendarList.list()).data.items ?? []).map((e) => e.id)).toEqual([CALENDAR_ID]);
  });

  it("the gateway reads and moves an event in another calendar of the account without touching its own standing", async () => {
    await f.api.events.insert({ calendarId, requestBody: { ...body("Session"), id: "move000004" } });
    f.emulator.userMove(calendarId, "move000004", OTHER);
    expect(await f.gateway.getIn(OTHER, "nothere001")).toBeNull();
    expect((await f.gateway.getIn(OTHER, "move000004"))?.status).toBe("confirmed");
    // The source keeps the id: moving it back there is refused (409), and a calendar the account may only read is
    // refused as Google refuses it (403 requiredAccessLevel): neither marks the credentials broken.
    await expect(f.gateway.moveFrom(OTHER, "move000004", calendarId)).rejects.toMatchObject({ kind: "duplicate" });
    f.emulator.shareCalendar(OTHER, SUBJECT, "reader");
    await expect(f.gateway.moveFrom(OTHER, "move000004", calendarId)).rejects.toMatchObject({ kind: "auth" });
    expect(f.gateway.health().credentials).not.toBe("broken");
    f.emulator.shareCalendar(OTHER, SUBJECT, "writer");
    f.emulator.purgeDeleted(calendarId);
    expect(await f.gateway.moveFrom(OTHER, "move000004", calendarId)).toMatchObject({ id: "move000004" });
    expect(f.emulator.event(calendarId, "move000004")?.status).toBe("confirmed");
    const list = await f.gateway.calendarList("writer");
    expect(list.map((e) => [e.id, e.accessRole, e.primary])).toEqual([
      [CALENDAR_ID, "owner", true],
      [OTHER, "writer", false],
    ]);
  });
});

describe("userMove (Change calendar in the UI)", () => {
  it("does what events.move does, without access checks", async () => {
    await f.api.events.insert({ calendarId, requestBody: { ...body("x"), id: "umove00001" } });
    const moved = f.emulator.userMove(calendarId, "umove00001", "private@clinic.example");
    expect(moved).toMatchObject({ id: "umove00001", status: "confirmed" });
    expect(f.emulator.event(calendarId, "umove00001")?.status).toBe("cancelled");
    expect(() => f.emulator.userUndoDelete(calendarId, "umove00001")).toThrow(/not deleted/);
  });
});
