// Tests what the emulator stores of an event through googleapis: PUT replaces the whole event, PATCH changes only what
// it names; location, reminders, attendees, attachments and conference data as Google treats them.
import { calendar_v3 } from "googleapis/build/src/apis/calendar/v3.js";
import { afterEach, beforeEach, describe, expect, it } from "vitest";
import { ServiceAccountCredentials } from "../../src/calendar/service-account.ts";
import { body, CALENDAR_ID, expectGoogleError, type Fixture, setup } from "./helpers.ts";

let f: Fixture;
beforeEach(async () => {
  f = await setup();
});
afterEach(async () => {
  await f.close();
});

const calendarId = CALENDAR_ID;
const rich: calendar_v3.Schema$Event = {
  location: "Room 3",
  colorId: "5",
  reminders: { useDefault: false, overrides: [{ method: "popup", minutes: 15 }] },
  attendees: [{ email: "guest@example.com" }],
  attachments: [{ fileUrl: "https://drive.google.com/file/d/abc", title: "Notes" }],
  conferenceData: { createRequest: { requestId: "req-1", conferenceSolutionKey: { type: "hangoutsMeet" } } },
};

/** The calbridge event, then what a person adds in the UI. */
async function eventWithPersonAdditions(id: string) {
  await f.api.events.insert({ calendarId, requestBody: { ...body("Session"), id } });
  return f.emulator.userEdit(calendarId, id, rich);
}

describe("PUT and PATCH", () => {
  it("PUT removes every field the body leaves out (attachments and conference data only when declared)", async () => {
    const before = await eventWithPersonAdditions("put0000001");
    expect(before).toMatchObject({ location: "Room 3", colorId: "5", hangoutLink: expect.any(String) });
    expect(before.attendees).toEqual([{ email: "guest@example.com", responseStatus: "needsAction" }]);
    const put = await f.api.events.update({ calendarId, eventId: "put0000001", requestBody: body("Moved") });
    expect(put.data.location).toBeUndefined();
    expect(put.data.colorId).toBeUndefined();
    expect(put.data.attendees).toBeUndefined();
    expect(put.data.reminders).toEqual({ useDefault: true });
    // Google's reference: without supportsAttachments / conferenceDataVersion=1 the request cannot modify them.
    expect(put.data.attachments).toHaveLength(1);
    expect(put.data.conferenceData?.conferenceId).toBeTruthy();
    const declared = await f.api.events.update({
      calendarId,
      eventId: "put0000001",
      supportsAttachments: true,
      conferenceDataVersion: 1,
      requestBody: body("Moved"),
    });
    expect(declared.data.attachments).toBeUndefined();
    expect(declared.data.conferenceData).toBeUndefined();
    expect(declared.data.hangoutLink).toBeUndefined();
    // Extended properties are replaced whole: another client's PUT without calbridge's marks strips them
    // (kewisch/gdata-provider #747: Thunderbird kept only its own X-MOZ-LASTACK).
    const other = body("Moved", undefined, undefined, { "X-MOZ-LASTACK": "20260101T000000Z" });
    const stripped = await f.api.events.update({ calendarId, eventId: "put0000001", requestBody: other });
    expect(stripped.data.extendedProperties).toEqual({ private: { "X-MOZ-LASTACK": "20260101T000000Z" } });
  });

  it("PATCH leaves unnamed fields alone, replaces arrays it names, merges extended properties per key", async () => {
    await eventWithPersonAdditions("patch00001");
    await f.api.events.patch({
      calendarId,
      eventId: "patch00001",
      requestBody: { extendedProperties: { private: { extra: "1" } } },
    });
    const patched = await f.api.events.patch({
      calendarId,
      eventId: "patch00001",
      requestBody: {
        summary: "Moved",
        start: { dateTime: "2026-11-24T09:00:00Z", timeZone: "Europe/Berlin" },
        end: { dateTime: "2026-11-24T10:00:00Z", timeZone: "Europe/Berlin" },
        attendees: [{ email: "other@example.com" }],
        extendedProperties: { private: { extra: null as unknown as string } },
      },
    });
    expect(patched.data).toMatchObject({ summary: "Moved", location: "Room 3", colorId: "5" });
    expect(patched.data.reminders).toEqual({ useDefault: false, overrides: [{ method: "popup", minutes: 15 }] });
    expect(patched.data.attendees?.map((a) => a.email)).toEqual(["other@example.com"]);
    expect(patched.data.attachments).toHaveLength(1);
    expect(patched.data.extendedProperties?.private).toEqual({ calbridge_managed: "1" });
    // Without conferenceDataVersion=1 a patch's conference data is ignored.
    const ignored = await f.api.events.patch({
      calendarId,
      eventId: "patch00001",
      requestBody: { conferenceData: null as unknown as calendar_v3.Schema$ConferenceData },
    });
    expect(ignored.data.conferenceData).toBeTruthy();
  });
});

describe("a person's edit in the UI", () => {
  it("keeps the private extended properties when the event is moved: they are hidden, and no UI edits them", async () => {
    // Google's extended-properties guide: "hidden key-value pairs" an application sets with an event through insert,
    // update and patch requests; the Calendar UI neither shows nor edits them. calbridge lists a moved event by its
    // mark, and reads its times mark (calbridge_times) against the times the person gave it.
    const marks = { calbridge_appointment_id: "apt_1", calbridge_managed: "1", calbridge_times: "t" };
    await f.api.events.insert({
      calendarId,
      requestBody: { ...body("Session", undefined, undefined, marks), id: "drag000001" },
    });
    const moved = f.emulator.userEdit(calendarId, "drag000001", {
      start: { dateTime: "2026-11-24T09:00:00Z", timeZone: "Europe/Berlin" },
      end: { dateTime: "2026-11-24T10:00:00Z", timeZone: "Europe/Berlin" },
    });
    expect(moved.extendedProperties).toEqual({ private: marks });
    const read = await f.api.events.get({ calendarId, eventId: "drag000001" });
    expect(read.data.start?.dateTime).toBe("2026-11-24T10:00:00+01:00");
    expect(read.data.extendedProperties).toEqual({ private: marks });
  });
});

describe("reminders", () => {
  it("validates as Google does: at most 5 overrides, not with useDefault; minutes clamped, unknown methods dropped", async () => {
    await f.api.events.insert({ calendarId, requestBody: { ...body("x"), id: "remind0001" } });
    const six = Array.from({ length: 6 }, (_, i) => ({ method: "popup", minutes: i }));
    const tooMany = await f.api.events
      .patch({ calendarId, eventId: "remind0001", requestBody: { reminders: { useDefault: false, overrides: six } } })
      .catch((e: { response: { data: unknown } }) => e.response.data);
    expect(tooMany).toMatchObject({
      error: { code: 400, errors: [{ domain: "calendar", reason: "eventRemindersCountExceedsLimit" }] },
    });
    await expectGoogleError(
      f.api.events.patch({
        calendarId,
        eventId: "remind0001",
        requestBody: { reminders: { useDefault: true, overrides: [{ method: "popup", minutes: 5 }] } },
      }),
      400,
      "cannotUseDefaultRemindersAndSpecifyOverride",
    );
    const stored = await f.api.events.patch({
      calendarId,
      eventId: "remind0001",
      requestBody: {
        reminders: {
          useDefault: false,
          overrides: [
            { method: "popup", minutes: 10 },
            { method: "sms", minutes: 5 },
            { method: "email", minutes: 50_000 },
            { method: "popup", minutes: -3 },
          ],
        },
      },
    });
    expect(stored.data.reminders).toEqual({
      useDefault: false,
      overrides: [
        { method: "email", minutes: 40_320 },
        { method: "popup", minutes: 10 },
        { method: "popup", minutes: 0 },
      ],
    });
  });

  it("a patch merges into the stored reminders object (Google's patch semantics for nested objects)", async () => {
    await f.api.events.insert({ calendarId, requestBody: { ...body("x"), id: "remind0003" } });
    // The stored useDefault:true stays, so overrides alone conflict with it.
    await expectGoogleError(
      f.api.events.patch({
        calendarId,
        eventId: "remind0003",
        requestBody: { reminders: { overrides: [{ method: "popup", minutes: 5 }] } },
      }),
      400,
      "cannotUseDefaultRemindersAndSpecifyOverride",
    );
  });

  it("a change of reminders alone changes the etag but not updated", async () => {
    const { data: before } = await f.api.events.insert({ calendarId, requestBody: { ...body("x"), id: "remind0002" } });
    await new Promise((r) => setTimeout(r, 5));
    const { data: after } = await f.api.events.patch({
      calendarId,
      eventId: "remind0002",
      requestBody: { reminders: { useDefault: false, overrides: [{ method: "popup", minutes: 15 }] } },
    });
    expect(after.etag).not.toBe(before.etag);
    expect(after.updated).toBe(before.updated);
    await new Promise((r) => setTimeout(r, 5));
    const { data: moved } = await f.api.events.patch({
      calendarId,
      eventId: "remind0002",
      requestBody: { summary: "y" },
    });
    expect(Date.parse(moved.updated!)).toBeGreaterThan(Date.parse(after.updated!));
  });
});

describe("attendees, attachments, event types", () => {
  it("refuses attendees without an e-mail, more than 25 attachments, and a changed event type", async () => {
    await expectGoogleError(
      f.api.events.insert({ calendarId, requestBody: { ...body("x"), attendees: [{ displayName: "No mail" }] } }),
      400,
      "required",
    );
    const many = Array.from({ length: 26 }, (_, i) => ({ fileUrl: `https://example.com/${i}` }));
    await expectGoogleError(
      f.api.events.insert({ calendarId, supportsAttachments: true, requestBody: { ...body("x"), attachments: many } }),
      400,
      "invalid",
    );
    await f.api.events.insert({ calendarId, requestBody: { ...body("x"), id: "etppe00001" } });
    await expectGoogleError(
      f.api.events.patch({ calendarId, eventId: "etppe00001", requestBody: { eventType: "focusTime" } }),
      400,
      "invalid",
    );
  });

  it("refuses attendees to a service account acting as itself (403 forbiddenForServiceAccounts)", async () => {
    const key = f.emulator.registerServiceAccount({ clientEmail: "robot@clinic.iam.gserviceaccount.com" });
    f.emulator.shareCalendar(calendarId, key.client_email, "writer");
    const robot = new calendar_v3.Calendar({
      auth: new ServiceAccountCredentials({ key, tokenUrl: f.emulator.tokenUrl }),
      rootUrl: f.emulator.rootUrl,
      retry: false,
    });
    await expectGoogleError(
      robot.events.insert({ calendarId, requestBody: { ...body("x"), attendees: [{ email: "guest@example.com" }] } }),
      403,
      "forbiddenForServiceAccounts",
    );
    expect((await robot.events.insert({ calendarId, requestBody: body("x") })).status).toBe(200);
  });

  it("refuses a UTC offset as an event's timeZone (400 invalid): Google takes only IANA names", async () => {
    // EventDateTime.timeZone is "an IANA Time Zone Database name"; Google answers an offset with 400 "Invalid time zone
    // definition for start time." (n8n-io/n8n#2995, phw198/OutlookGoogleCalendarSync#1525). Node's Intl takes it.
    for (const timeZone of ["+01:00", "-05:00", "+0100"]) {
      const requestBody = {
        ...body("offset"),
        start: { dateTime: "2026-11-23T09:00:00Z", timeZone },
        end: { dateTime: "2026-11-23T10:00:00Z", timeZone },
      };
      await expectGoogleError(f.api.events.insert({ calendarId, requestBody }), 400, "invalid");
    }
    const named = { ...body("named"), start: { dateTime: "2026-11-23T09:00:00Z", timeZone: "Etc/GMT-1" } };
    expect((await f.api.events.insert({ calendarId, requestBody: named })).data.start?.timeZone).toBe("Etc/GMT-1");
  });

  it("refuses a dateTime with neither an offset nor a timeZone (400), not read in the calendar's zone", async () => {
    // EventDateTime.dateTime: "A time zone offset is required unless a time zone is explicitly specified in timeZone".
    const bare = {
      ...body("bare"),
      start: { dateTime: "2026-11-23T09:00:00" },
      end: { dateTime: "2026-11-23T10:00:00" },
    };
    await expectGoogleError(f.api.events.insert({ calendarId, requestBody: bare }), 400, "invalid");
    const zoned = {
      ...body("zoned"),
      start: { dateTime: "2026-11-23T09:00:00", timeZone: "Europe/Berlin" },
      end: { dateTime: "2026-11-23T10:00:00", timeZone: "Europe/Berlin" },
    };
    const { data } = await f.api.events.insert({ calendarId, requestBody: zoned });
    expect(Date.parse(String(data.start?.dateTime))).toBe(Date.parse("2026-11-23T08:00:00Z"));
  });
});
