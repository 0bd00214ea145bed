// Tests how the emulator's events.patch treats start and end: merged field by field, as Google's patch semantics merge
// every object ("The modified data you send is merged into the data for the parent object"), instead of replaced whole.
// A new dateTime keeps the stored timeZone; an all-day event made timed (or back) without the other field sent as null
// carries both and is refused 400 "Invalid start time." (n8n-io/n8n #35800, googleapis #740/#1559); and a date at one
// end with a dateTime at the other is refused on every write ("Start and end times must either both be date or both be
// dateTime.", t4t5/caldir #20). The emulator replaced start and end whole and took the mix: a patch of the time alone
// dropped the event's zone, and a toggle by patch worked that fails on Google.
import type { calendar_v3 } from "googleapis/build/src/apis/calendar/v3.js";
import { afterEach, beforeEach, describe, expect, it } from "vitest";
import { CALENDAR_ID, expectGoogleError, type Fixture, setup } from "./helpers.ts";

let f: Fixture;
beforeEach(async () => {
  f = await setup();
});
afterEach(async () => {
  await f.close();
});

const calendarId = CALENDAR_ID;
const NY = "America/New_York";

/** Google's message of a refused call (its reason is checked by expectGoogleError). */
async function googleMessage(promise: Promise<unknown>): Promise<string | undefined> {
  const err = (await promise.then(
    () => expect.fail("expected a refusal"),
    (e: unknown) => e,
  )) as { response?: { data?: { error?: { message?: string; errors?: { domain?: string; reason?: string }[] } } } };
  expect(err.response?.data?.error?.errors?.[0]).toMatchObject({ domain: "global", reason: "invalid" });
  return err.response?.data?.error?.message;
}

async function timed(id: string, zone = NY): Promise<calendar_v3.Schema$Event> {
  const { data } = await f.api.events.insert({
    calendarId,
    requestBody: {
      id,
      summary: "Session",
      start: { dateTime: "2026-11-23T09:00:00-05:00", timeZone: zone },
      end: { dateTime: "2026-11-23T10:00:00-05:00", timeZone: zone },
    },
  });
  return data;
}

async function allDay(id: string): Promise<calendar_v3.Schema$Event> {
  const { data } = await f.api.events.insert({
    calendarId,
    requestBody: { id, summary: "Day off", start: { date: "2026-11-23" }, end: { date: "2026-11-24" } },
  });
  return data;
}

describe("events.patch of start and end: merged field by field", () => {
  it("a new dateTime keeps the event's timeZone, and is shown in it", async () => {
    await timed("patch00001");
    const { data } = await f.api.events.patch({
      calendarId,
      eventId: "patch00001",
      requestBody: { start: { dateTime: "2026-11-23T16:00:00Z" }, end: { dateTime: "2026-11-23T17:00:00Z" } },
    });
    // Replaced whole, the zone was gone and the time shown in the calendar's (17:00+01:00, Berlin).
    expect(data.start).toEqual({ dateTime: "2026-11-23T11:00:00-05:00", timeZone: NY });
    expect(data.end).toEqual({ dateTime: "2026-11-23T12:00:00-05:00", timeZone: NY });
  });

  it("a wall time without offset is read in the stored zone; timeZone null takes the zone away", async () => {
    await timed("patch00002");
    const { data } = await f.api.events.patch({
      calendarId,
      eventId: "patch00002",
      requestBody: { start: { dateTime: "2026-11-23T08:00:00" } },
    });
    // Replaced whole, it had no zone to be read in: 400 "Missing time zone definition for start time."
    expect(data.start).toEqual({ dateTime: "2026-11-23T08:00:00-05:00", timeZone: NY });
    expect(data.end).toEqual({ dateTime: "2026-11-23T10:00:00-05:00", timeZone: NY });
    const { data: zoneless } = await f.api.events.patch({
      calendarId,
      eventId: "patch00002",
      requestBody: { start: { timeZone: null }, end: { timeZone: null } },
    });
    expect(zoneless.start).toEqual({ dateTime: "2026-11-23T14:00:00+01:00" });
    expect(zoneless.end).toEqual({ dateTime: "2026-11-23T16:00:00+01:00" });
  });

  it("a series moved by a patch of its times keeps the zone its recurrence is expanded in", async () => {
    await f.api.events.insert({
      calendarId,
      requestBody: {
        id: "patch00003",
        summary: "Weekly",
        start: { dateTime: "2026-11-23T09:00:00", timeZone: NY },
        end: { dateTime: "2026-11-23T10:00:00", timeZone: NY },
        recurrence: ["RRULE:FREQ=WEEKLY;COUNT=3"],
      },
    });
    const { data } = await f.api.events.patch({
      calendarId,
      eventId: "patch00003",
      requestBody: { start: { dateTime: "2026-11-23T15:00:00Z" }, end: { dateTime: "2026-11-23T16:00:00Z" } },
    });
    // Replaced whole: 400 "Missing time zone definition for start time.", as for a series written without one.
    expect(data.start).toEqual({ dateTime: "2026-11-23T10:00:00-05:00", timeZone: NY });
  });

  it("an all-day event made timed needs date: null; without it start carries both and Google refuses it", async () => {
    await allDay("patch00004");
    const times = {
      start: { dateTime: "2026-11-23T09:00:00Z", timeZone: "Europe/Berlin" },
      end: { dateTime: "2026-11-23T10:00:00Z", timeZone: "Europe/Berlin" },
    };
    const refused = f.api.events.patch({ calendarId, eventId: "patch00004", requestBody: times });
    expect(await googleMessage(refused)).toBe("Invalid start time.");
    expect(f.emulator.event(calendarId, "patch00004")?.start).toEqual({ date: "2026-11-23" });
    const { data } = await f.api.events.patch({
      calendarId,
      eventId: "patch00004",
      requestBody: { start: { ...times.start, date: null }, end: { ...times.end, date: null } },
    });
    expect(data.start).toEqual({ dateTime: "2026-11-23T10:00:00+01:00", timeZone: "Europe/Berlin" });
    expect(data.end).toEqual({ dateTime: "2026-11-23T11:00:00+01:00", timeZone: "Europe/Berlin" });
  });

  it("a timed event made all-day needs dateTime: null, the same in the other direction", async () => {
    await timed("patch00005");
    const dates = { start: { date: "2026-11-23" }, end: { date: "2026-11-24" } };
    const refused = f.api.events.patch({ calendarId, eventId: "patch00005", requestBody: dates });
    expect(await googleMessage(refused)).toBe("Invalid start time.");
    const { data } = await f.api.events.patch({
      calendarId,
      eventId: "patch00005",
      requestBody: { start: { ...dates.start, dateTime: null }, end: { ...dates.end, dateTime: null } },
    });
    expect(data.start).toEqual({ date: "2026-11-23" });
    expect(data.end).toEqual({ date: "2026-11-24" });
  });
});

describe("a date at one end and a dateTime at the other", () => {
  it("is refused on insert and on update", async () => {
    const mixed = { summary: "x", start: { date: "2026-11-23" }, end: { dateTime: "2026-11-23T10:00:00Z" } };
    const message = "Start and end times must either both be date or both be dateTime.";
    expect(await googleMessage(f.api.events.insert({ calendarId, requestBody: { ...mixed, id: "patch00006" } }))).toBe(
      message,
    );
    await timed("patch00007");
    expect(await googleMessage(f.api.events.update({ calendarId, eventId: "patch00007", requestBody: mixed }))).toBe(
      message,
    );
  });

  it("is refused when a patch turns one end alone to all day", async () => {
    await timed("patch00008");
    const oneEnd = f.api.events.patch({
      calendarId,
      eventId: "patch00008",
      requestBody: { end: { date: "2026-11-24", dateTime: null } },
    });
    expect(await googleMessage(oneEnd)).toBe("Start and end times must either both be date or both be dateTime.");
    await expectGoogleError(
      f.api.events.patch({ calendarId, eventId: "patch00008", requestBody: { start: { date: "2026-11-23" } } }),
      400,
      "invalid",
    );
    expect(f.emulator.event(calendarId, "patch00008")?.end).toEqual({
      dateTime: "2026-11-23T10:00:00-05:00",
      timeZone: NY,
    });
  });

  it("a start with both date and dateTime is refused on insert too", async () => {
    const both = f.api.events.insert({
      calendarId,
      requestBody: {
        id: "patch00009",
        summary: "x",
        start: { date: "2026-11-23", dateTime: "2026-11-23T09:00:00Z" },
        end: { dateTime: "2026-11-23T10:00:00Z" },
      },
    });
    expect(await googleMessage(both)).toBe("Invalid start time.");
  });
});
