// Tests recurring events in the emulator through googleapis: a person makes an event repeat; singleEvents expands the
// series into instances (ids, recurringEventId, originalStartTime, properties, filters); incremental sync keeps the
// token's expansion; deleting one instance or the series; the rule subset and its clear refusals.
import type { calendar_v3 } from "googleapis/build/src/apis/calendar/v3.js";
import { afterEach, beforeEach, describe, expect, it } from "vitest";
import { body, CALENDAR_ID, expectGoogleError, type Fixture, setup } from "./helpers.ts";

let f: Fixture;
beforeEach(async () => {
  f = await setup();
});
afterEach(async () => {
  await f.close();
});

const calendarId = CALENDAR_ID;
const ids = (r: { data: calendar_v3.Schema$Events }) => (r.data.items ?? []).map((e) => e.id);

/** A managed event on Monday 2026-11-30 10:00 Berlin (09:00Z) that a person then makes weekly, 4 times. */
async function weekly(id = "series0001", rule = "RRULE:FREQ=WEEKLY;COUNT=4") {
  await f.api.events.insert({
    calendarId,
    requestBody: { ...body("Weekly", "2026-11-30T09:00:00Z", "2026-11-30T10:00:00Z"), id },
  });
  return f.emulator.userEdit(calendarId, id, { recurrence: [rule] });
}

describe("a series made by a person", () => {
  it("lists as one master with recurrence by default, and as instances with singleEvents", async () => {
    const master = await weekly();
    expect(master.recurrence).toEqual(["RRULE:FREQ=WEEKLY;COUNT=4"]);
    const plain = await f.api.events.list({ calendarId });
    expect(plain.data.items?.map((e) => [e.id, e.recurrence])).toEqual([["series0001", ["RRULE:FREQ=WEEKLY;COUNT=4"]]]);
    const single = await f.api.events.list({ calendarId, singleEvents: true, orderBy: "startTime" });
    expect(ids(single)).toEqual([
      "series0001_20261130T090000Z",
      "series0001_20261207T090000Z",
      "series0001_20261214T090000Z",
      "series0001_20261221T090000Z",
    ]);
    const second = single.data.items![1]!;
    expect(second).toMatchObject({
      recurringEventId: "series0001",
      originalStartTime: { dateTime: "2026-12-07T10:00:00+01:00", timeZone: "Europe/Berlin" },
      start: { dateTime: "2026-12-07T10:00:00+01:00", timeZone: "Europe/Berlin" },
      end: { dateTime: "2026-12-07T11:00:00+01:00", timeZone: "Europe/Berlin" },
      iCalUID: "series0001@google.com",
      extendedProperties: { private: { calbridge_managed: "1" } },
    });
    expect(second.recurrence).toBeUndefined();
  });

  it("splits on 'this and following events': the series ends before, a new one under <id>_R<time> goes on", async () => {
    await weekly();
    const tail = f.emulator.userSplitSeries(calendarId, "series0001", Date.parse("2026-12-14T09:00:00Z"), {
      summary: "Weekly, renamed",
    });
    expect(tail).toMatchObject({
      id: "series0001_R20261214T090000Z",
      summary: "Weekly, renamed",
      recurrence: ["RRULE:FREQ=WEEKLY"],
      extendedProperties: { private: { calbridge_managed: "1" } },
    });
    const master = (await f.api.events.get({ calendarId, eventId: "series0001" })).data;
    expect(master.recurrence).toEqual(["RRULE:FREQ=WEEKLY;UNTIL=20261214T085959Z"]);
    const single = await f.api.events.list({
      calendarId,
      singleEvents: true,
      orderBy: "startTime",
      timeMax: "2026-12-29T00:00:00Z",
    });
    expect(single.data.items?.map((e) => [e.id, e.recurringEventId, e.summary])).toEqual([
      ["series0001_20261130T090000Z", "series0001", "Weekly"],
      ["series0001_20261207T090000Z", "series0001", "Weekly"],
      ["series0001_R20261214T090000Z_20261214T090000Z", "series0001_R20261214T090000Z", "Weekly, renamed"],
      ["series0001_R20261214T090000Z_20261221T090000Z", "series0001_R20261214T090000Z", "Weekly, renamed"],
      ["series0001_R20261214T090000Z_20261228T090000Z", "series0001_R20261214T090000Z", "Weekly, renamed"],
    ]);
    expect(() => f.emulator.userSplitSeries(calendarId, "series0001_20261130T090000Z", 0)).toThrow(/not a series/);
  });

  it("matches privateExtendedProperty on every instance and filters each by its own times", async () => {
    await weekly();
    const managed = await f.api.events.list({
      calendarId,
      singleEvents: true,
      privateExtendedProperty: ["calbridge_managed=1"],
      timeMin: "2026-12-07T09:30:00Z",
      timeMax: "2026-12-14T09:00:00Z",
    });
    expect(ids(managed)).toEqual(["series0001_20261207T090000Z"]);
    // Without expansion the master comes back when any instance overlaps the window.
    const masters = await f.api.events.list({ calendarId, timeMin: "2026-12-20T00:00:00Z" });
    expect(ids(masters)).toEqual(["series0001"]);
    expect(ids(await f.api.events.list({ calendarId, timeMin: "2026-12-22T00:00:00Z" }))).toEqual([]);
  });

  it("answers events.get and events.instances for instance ids", async () => {
    await weekly();
    const got = await f.api.events.get({ calendarId, eventId: "series0001_20261214T090000Z" });
    expect(got.data).toMatchObject({ recurringEventId: "series0001", status: "confirmed" });
    expect(f.emulator.event(calendarId, "series0001_20261214T090000Z")).toEqual(got.data);
    await expectGoogleError(f.api.events.get({ calendarId, eventId: "series0001_20261215T090000Z" }), 404, "notFound");
    await expectGoogleError(f.api.events.get({ calendarId, eventId: "series0001_20261228T090000Z" }), 404, "notFound");
    const instances = await f.api.events.instances({ calendarId, eventId: "series0001", maxResults: 3 });
    expect(instances.data.items).toHaveLength(3);
    expect(instances.data.nextPageToken).toBeTruthy();
  });

  it("expands DAILY with INTERVAL and UNTIL, WEEKLY with BYDAY, keeping the local time across DST", async () => {
    await f.api.events.insert({
      calendarId,
      requestBody: { ...body("Daily", "2026-10-23T08:00:00Z", "2026-10-23T08:30:00Z"), id: "dai1000001" },
    });
    f.emulator.userEdit(calendarId, "dai1000001", {
      recurrence: ["RRULE:FREQ=DAILY;INTERVAL=2;UNTIL=20261029T235959Z"],
    });
    const daily = await f.api.events.list({ calendarId, singleEvents: true, q: "Daily", orderBy: "startTime" });
    // 10:00 Berlin stays 10:00 after the switch to winter time on 2026-10-25: 08:00Z, then 09:00Z.
    expect(ids(daily)).toEqual([
      "dai1000001_20261023T080000Z",
      "dai1000001_20261025T090000Z",
      "dai1000001_20261027T090000Z",
      "dai1000001_20261029T090000Z",
    ]);
    await weekly("b0da000001", "RRULE:FREQ=WEEKLY;BYDAY=MO,WE;COUNT=3");
    const byday = await f.api.events.instances({ calendarId, eventId: "b0da000001" });
    expect(byday.data.items?.map((e) => e.start?.dateTime)).toEqual([
      "2026-11-30T10:00:00+01:00",
      "2026-12-02T10:00:00+01:00",
      "2026-12-07T10:00:00+01:00",
    ]);
  });

  it("names all-day instances by date", async () => {
    await f.api.events.insert({
      calendarId,
      requestBody: {
        id: "fullda0001",
        summary: "All day",
        start: { date: "2026-12-01" },
        end: { date: "2026-12-02" },
        recurrence: ["RRULE:FREQ=DAILY;COUNT=2"],
      },
    });
    const list = await f.api.events.list({ calendarId, singleEvents: true });
    expect(list.data.items?.map((e) => [e.id, e.start?.date, e.originalStartTime?.date])).toEqual([
      ["fullda0001_20261201", "2026-12-01", "2026-12-01"],
      ["fullda0001_20261202", "2026-12-02", "2026-12-02"],
    ]);
  });
});

describe("deleting instances and series", () => {
  it("makes a deleted instance a cancelled exception, and a deleted master removes the series", async () => {
    await weekly();
    f.emulator.userDelete(calendarId, "series0001_20261207T090000Z");
    expect(ids(await f.api.events.list({ calendarId, singleEvents: true }))).toEqual([
      "series0001_20261130T090000Z",
      "series0001_20261214T090000Z",
      "series0001_20261221T090000Z",
    ]);
    // Google's reference: cancelled instances show without singleEvents even when showDeleted is false.
    const plain = await f.api.events.list({ calendarId });
    expect(plain.data.items?.map((e) => [e.id, e.status])).toEqual([
      ["series0001", "confirmed"],
      ["series0001_20261207T090000Z", "cancelled"],
    ]);
    expect(Object.keys(plain.data.items![1]!).sort()).toEqual(
      ["etag", "id", "kind", "originalStartTime", "recurringEventId", "status"].sort(),
    );
    f.emulator.userDelete(calendarId, "series0001");
    expect(ids(await f.api.events.list({ calendarId, singleEvents: true }))).toEqual([]);
    const deleted = await f.api.events.list({ calendarId, singleEvents: true, showDeleted: true });
    expect(deleted.data.items?.every((e) => e.status === "cancelled")).toBe(true);
    expect(deleted.data.items).toHaveLength(4);
  });

  it("lets the API delete and change single instances", async () => {
    await weekly();
    await f.api.events.delete({ calendarId, eventId: "series0001_20261214T090000Z" });
    const moved = await f.api.events.patch({
      calendarId,
      eventId: "series0001_20261221T090000Z",
      requestBody: { start: { dateTime: "2026-12-22T09:00:00Z" }, end: { dateTime: "2026-12-22T10:00:00Z" } },
    });
    expect(moved.data).toMatchObject({
      id: "series0001_20261221T090000Z",
      originalStartTime: { dateTime: "2026-12-21T10:00:00+01:00" },
      start: { dateTime: "2026-12-22T10:00:00+01:00" },
    });
    const list = await f.api.events.list({ calendarId, singleEvents: true, orderBy: "startTime" });
    expect(list.data.items?.map((e) => e.start?.dateTime)).toEqual([
      "2026-11-30T10:00:00+01:00",
      "2026-12-07T10:00:00+01:00",
      "2026-12-22T10:00:00+01:00",
    ]);
  });
});

describe("a series made single again", () => {
  it("keeps an exception stored before: Google removes none when the rule changes", async () => {
    // Reported by a project that met it (BuilderIO/agent-native #3488, 2026): "Truncating the master does not remove
    // a previously materialized exception ... nor materialized exceptions after the cutoff"; it deletes them itself.
    // The emulator keeps them too: a client that makes a series single again must remove the moved occurrences.
    await weekly();
    f.emulator.userEdit(calendarId, "series0001_20261207T090000Z", {
      start: { dateTime: "2026-12-07T10:00:00Z" },
      end: { dateTime: "2026-12-07T11:00:00Z" },
    });
    await f.api.events.patch({ calendarId, eventId: "series0001", requestBody: { recurrence: null } });
    const kept = await f.api.events.get({ calendarId, eventId: "series0001_20261207T090000Z" });
    expect(kept.data).toMatchObject({ status: "confirmed", recurringEventId: "series0001" });
    expect(ids(await f.api.events.list({ calendarId }))).toEqual(["series0001", "series0001_20261207T090000Z"]);
  });
});

describe("incremental sync of series", () => {
  it("reports changes as the token's listing was made: instances with singleEvents, the master without", async () => {
    await f.api.events.insert({
      calendarId,
      requestBody: { ...body("Weekly", "2026-11-30T09:00:00Z", "2026-11-30T10:00:00Z"), id: "series0002" },
    });
    const expanded = (await f.api.events.list({ calendarId, singleEvents: true })).data.nextSyncToken!;
    const plain = (await f.api.events.list({ calendarId })).data.nextSyncToken!;
    f.emulator.userEdit(calendarId, "series0002", { recurrence: ["RRULE:FREQ=WEEKLY;COUNT=2"] });
    const incExpanded = await f.api.events.list({ calendarId, singleEvents: true, syncToken: expanded });
    // The expanded listing held the single event, which is gone from it now: reported as deleted, id only.
    expect(incExpanded.data.items?.map((e) => [e.id, e.status])).toEqual([
      ["series0002", "cancelled"],
      ["series0002_20261130T090000Z", "confirmed"],
      ["series0002_20261207T090000Z", "confirmed"],
    ]);
    expect(Object.keys(incExpanded.data.items![0]!).sort()).toEqual(["etag", "id", "kind", "status"]);
    const incPlain = await f.api.events.list({ calendarId, syncToken: plain });
    expect(incPlain.data.items?.map((e) => [e.id, e.recurrence])).toEqual([
      ["series0002", ["RRULE:FREQ=WEEKLY;COUNT=2"]],
    ]);
    const next = incExpanded.data.nextSyncToken!;
    f.emulator.userDelete(calendarId, "series0002_20261207T090000Z");
    const deletion = await f.api.events.list({ calendarId, singleEvents: true, syncToken: next });
    expect(deletion.data.items).toEqual([
      expect.objectContaining({
        id: "series0002_20261207T090000Z",
        status: "cancelled",
        recurringEventId: "series0002",
      }),
    ]);
    // A shorter rule: the instance it drops is reported as deleted.
    const shorter = deletion.data.nextSyncToken!;
    f.emulator.userEdit(calendarId, "series0002", { recurrence: ["RRULE:FREQ=WEEKLY;COUNT=1"] });
    const dropped = await f.api.events.list({ calendarId, singleEvents: true, syncToken: shorter, showDeleted: true });
    expect(dropped.data.items?.map((e) => [e.id, e.status, e.summary])).toEqual([
      ["series0002_20261207T090000Z", "cancelled", undefined],
      ["series0002_20261130T090000Z", "confirmed", "Weekly"],
    ]);
    // Google: "All other query parameters should be the same as for the initial synchronization".
    await expectGoogleError(f.api.events.list({ calendarId, syncToken: plain, singleEvents: true }), 400, "invalid");
  });
});

describe("rules outside the supported subset", () => {
  it("answers 400 with a clear message instead of expanding something else", async () => {
    await f.api.events.insert({ calendarId, requestBody: { ...body("x"), id: "rules00001" } });
    for (const rule of [
      "RRULE:FREQ=MONTHLY;COUNT=3",
      "RRULE:FREQ=WEEKLY;BYMONTH=1",
      "RRULE:FREQ=DAILY;BYDAY=MO",
      "RRULE:FREQ=WEEKLY;COUNT=2;UNTIL=20270101T000000Z",
      "RRULE:FREQ=WEEKLY;BYDAY=TU;COUNT=2", // the first instance (a Monday) is not a Tuesday
      "EXDATE:20261207T090000Z",
    ]) {
      const err = await f.api.events
        .patch({ calendarId, eventId: "rules00001", requestBody: { recurrence: [rule] } })
        .then(
          () => undefined,
          (e: { status?: number; message?: string }) => e,
        );
      expect(err?.status, rule).toBe(400);
      expect(err?.message, rule).toMatch(/Invalid recurrence rule: .*the emulator expands RRULE/);
    }
    expect(() => f.emulator.userEdit(calendarId, "rules00001", { recurrence: ["RRULE:FREQ=YEARLY"] })).toThrow(
      /FREQ=YEARLY is not supported/,
    );
  });

  it("requires a time zone for a timed series created through the API", async () => {
    await expectGoogleError(
      f.api.events.insert({
        calendarId,
        requestBody: {
          summary: "no zone",
          start: { dateTime: "2026-11-30T09:00:00Z" },
          end: { dateTime: "2026-11-30T10:00:00Z" },
          recurrence: ["RRULE:FREQ=DAILY;COUNT=2"],
        },
      }),
      400,
      "invalid",
    );
  });

  it("expands an open-ended series up to timeMax", async () => {
    await weekly("open000001", "RRULE:FREQ=WEEKLY");
    const list = await f.api.events.list({ calendarId, singleEvents: true, timeMax: "2027-03-01T00:00:00Z" });
    expect(list.data.items).toHaveLength(13);
  });
});
