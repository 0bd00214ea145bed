// Tests the emulator's timeMin/timeMax for all-day events through googleapis: Google applies the bounds to an all-day
// date from midnight in the calendar's zone (googleapis/google-api-dotnet-client #1778), not at midnight UTC. In this
// Europe/Berlin calendar, the all-day 24 November runs from 23:00Z on the 23rd to 23:00Z on the 24th.
import { afterEach, beforeEach, expect, it } from "vitest";
import { CALENDAR_ID, type Fixture, setup } from "./helpers.ts";

let f: Fixture;
beforeEach(async () => {
  f = await setup();
  await f.api.events.insert({
    calendarId: CALENDAR_ID,
    requestBody: { id: "abcdef24", summary: "Away", start: { date: "2026-11-24" }, end: { date: "2026-11-25" } },
  });
});
afterEach(async () => {
  await f.close();
});

const listed = async (bounds: { timeMin?: string; timeMax?: string }) =>
  ((await f.api.events.list({ calendarId: CALENDAR_ID, ...bounds })).data.items ?? []).map((e) => e.id);

it("an all-day event ends at midnight in the calendar's zone: not listed from 23:30Z on its day", async () => {
  expect(await listed({ timeMin: "2026-11-24T22:30:00Z" })).toEqual(["abcdef24"]);
  expect(await listed({ timeMin: "2026-11-24T23:30:00Z" })).toEqual([]);
});

it("an all-day event begins at midnight in the calendar's zone: listed up to 23:30Z the evening before", async () => {
  expect(await listed({ timeMax: "2026-11-23T23:30:00Z" })).toEqual(["abcdef24"]);
  expect(await listed({ timeMax: "2026-11-23T22:30:00Z" })).toEqual([]);
});
