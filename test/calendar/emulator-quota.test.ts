// Tests the emulator's quotas and answer delay through googleapis: Google's per-minute sliding windows per user and
// per project (on by default), whom a request is charged to, what a PATCH costs, the usage counters, latency.
import { calendar_v3 } from "googleapis/build/src/apis/calendar/v3.js";
import { afterEach, describe, expect, it } from "vitest";
import { ServiceAccountCredentials } from "../../src/calendar/service-account.ts";
import { ManualClock } from "../../src/clock.ts";
import type { CalendarEmulatorOptions } from "../../src/simulator/calendar/index.ts";
import { body, CALENDAR_ID, expectGoogleError, type Fixture, SUBJECT, setup } from "./helpers.ts";

let f: Fixture | undefined;
afterEach(async () => {
  await f?.close();
  f = undefined;
});

const calendarId = CALENDAR_ID;
const clock = () => new ManualClock(Date.now());
/** What the real service says of each minute quota (see src/simulator/calendar/quota.ts for the sources). */
const PER_USER = "limit 'Queries per minute per user' of service 'calendar-json.googleapis.com'";
const PER_PROJECT = "limit 'Queries per minute' of service 'calendar-json.googleapis.com'";

async function start(options: CalendarEmulatorOptions = {}) {
  f = await setup({}, options);
  return f;
}

describe("Google's quotas, on by default", () => {
  it("has Google's numbers and refuses the 601st request of a user within a minute, 403 rateLimitExceeded naming the per-user limit", async () => {
    const c = clock();
    const { api, emulator } = await start({ clock: c });
    expect(emulator.limits).toMatchObject({ perUserPerMinute: 600, perProjectPerMinute: 10_000, patchCost: 3 });
    for (let i = 0; i < 600; i += 50) {
      await Promise.all(Array.from({ length: 50 }, () => api.calendars.get({ calendarId, quotaUser: "th_1" })));
    }
    const refused = await api.calendars
      .get({ calendarId, quotaUser: "th_1" })
      .catch((e: { response: { status: number; data: unknown } }) => e.response);
    expect(refused.status).toBe(403);
    expect(refused.data).toMatchObject({
      error: {
        errors: [{ domain: "usageLimits", reason: "rateLimitExceeded", message: expect.stringContaining(PER_USER) }],
      },
    });
    expect((await api.calendars.get({ calendarId, quotaUser: "th_2" })).status).toBe(200);
    await c.advance(60_001);
    expect((await api.calendars.get({ calendarId, quotaUser: "th_1" })).status).toBe(200);
  });

  it("slides: what was spent 30 s ago still counts, what was spent over a minute ago does not", async () => {
    const c = clock();
    const { api } = await start({ clock: c, limits: { perUserPerMinute: 4 } });
    await api.calendars.get({ calendarId });
    await api.calendars.get({ calendarId });
    await c.advance(30_000);
    await api.calendars.get({ calendarId });
    await api.calendars.get({ calendarId });
    await c.advance(20_000);
    await expectGoogleError(api.calendars.get({ calendarId }), 403, "rateLimitExceeded");
    await c.advance(10_001); // the first two are now more than a minute old; the refused one never counted
    await api.calendars.get({ calendarId });
    await api.calendars.get({ calendarId });
    await expectGoogleError(api.calendars.get({ calendarId }), 403, "rateLimitExceeded");
  });

  it("counts failed requests, charges a PATCH three units, and answers 429 over the project's quota", async () => {
    const c = clock();
    const { api, emulator } = await start({ clock: c, limits: { perUserPerMinute: 5, perProjectPerMinute: 8 } });
    await expectGoogleError(api.events.get({ calendarId, eventId: "missing001" }), 404, "notFound");
    await api.events.insert({ calendarId, requestBody: { ...body("x"), id: "quota00001" } });
    await api.events.patch({ calendarId, eventId: "quota00001", requestBody: { summary: "y" } }); // 3 units: 5 used
    await expectGoogleError(api.calendars.get({ calendarId }), 403, "rateLimitExceeded");
    await api.calendars.get({ calendarId, quotaUser: "other" });
    await api.calendars.get({ calendarId, quotaUser: "other" });
    await api.calendars.get({ calendarId, quotaUser: "other" }); // the project's 8 are spent
    await expectGoogleError(api.calendars.get({ calendarId, quotaUser: "third" }), 429, "rateLimitExceeded");
    expect(emulator.usage).toMatchObject({
      requests: 8,
      units: 8,
      usageLimitAnswers: 2,
      byMethod: { "events.get": 1, "events.insert": 1, "events.patch": 1, "calendars.get": 5 },
      byCalendar: { [calendarId]: 8 },
    });
    expect(emulator.usage.byUser).toEqual({ "anna@clinic.example": 4, other: 3, third: 1 });
    const overProject = await api.calendars.get({ calendarId, quotaUser: "fourth" }).then(
      () => undefined,
      (e: { response?: { data?: { error?: { message?: string } } } }) => e.response?.data?.error?.message,
    );
    expect(overProject).toContain(PER_PROJECT);
    emulator.resetUsage();
    expect(emulator.usage.requests).toBe(0);
  });

  it("charges a service account's requests to the service account under delegation, unless quotaUser is set", async () => {
    const c = clock();
    const { emulator } = await start({ clock: c, limits: { perUserPerMinute: 2 } });
    const key = emulator.registerServiceAccount({ clientEmail: "sync@clinic.iam.gserviceaccount.com" });
    emulator.createCalendar("ben@clinic.example", "ben@clinic.example");
    const as = (subject: string) =>
      new calendar_v3.Calendar({
        auth: new ServiceAccountCredentials({ key, subject, tokenUrl: emulator.tokenUrl }),
        rootUrl: emulator.rootUrl,
        retry: false,
      });
    const anna = as("anna@clinic.example");
    const ben = as("ben@clinic.example");
    await anna.calendars.get({ calendarId });
    await ben.calendars.get({ calendarId: "ben@clinic.example" });
    await expectGoogleError(anna.calendars.get({ calendarId }), 403, "rateLimitExceeded");
    expect((await ben.calendars.get({ calendarId: "ben@clinic.example", quotaUser: "th_ben" })).status).toBe(200);
    expect(emulator.usage.byUser).toMatchObject({ "sync@clinic.iam.gserviceaccount.com": 3, th_ben: 1 });
  });

  it("writing one calendar in quick succession (when set): 403 rateLimitExceeded, Google's plain 'Rate Limit Exceeded'", async () => {
    const c = clock();
    const { api, emulator } = await start({ clock: c, limits: { perCalendarWritesPerSecond: 2 } });
    emulator.createCalendar("anna.other@clinic.example", SUBJECT);
    const insert = (cal: string, id: string) =>
      api.events.insert({
        calendarId: cal,
        requestBody: { id, start: { dateTime: "2026-12-01T10:00:00Z" }, end: { dateTime: "2026-12-01T11:00:00Z" } },
      });
    await insert(calendarId, "burst00001");
    await insert(calendarId, "burst00002");
    const refused = await insert(calendarId, "burst00003").catch(
      (e: { response: { status: number; data: unknown } }) => e.response,
    );
    expect(refused.status).toBe(403);
    expect(refused.data).toMatchObject({
      error: { errors: [{ domain: "usageLimits", reason: "rateLimitExceeded", message: "Rate Limit Exceeded" }] },
    });
    // Reads of that calendar, and writes to another one, are not limited; a second later it takes writes again.
    expect((await api.events.list({ calendarId })).status).toBe(200);
    expect((await insert("anna.other@clinic.example", "burst00004")).status).toBe(200);
    await c.advance(1_001);
    expect((await insert(calendarId, "burst00003")).status).toBe(200);
  });

  it("lifts a quota with false, at construction or at run time", async () => {
    const { api, emulator } = await start({ limits: { perUserPerMinute: false, perProjectPerMinute: 1 } });
    await api.calendars.get({ calendarId });
    emulator.limits.perProjectPerMinute = undefined;
    await api.calendars.get({ calendarId });
    expect(emulator.usage.usageLimitAnswers).toBe(0);
  });
});

describe("answer delay", () => {
  it("delays every answer by latencyMs (plus jitter), settable at construction and at run time", async () => {
    const { api, emulator } = await start({ latencyMs: 150, latencyJitterMs: 50 });
    const timed = async () => {
      const t0 = performance.now();
      await api.calendars.get({ calendarId });
      return performance.now() - t0;
    };
    expect(await timed()).toBeGreaterThanOrEqual(145);
    emulator.faults.random = () => 1;
    expect(await timed()).toBeGreaterThanOrEqual(195);
    emulator.faults.latencyMs = 0;
    emulator.faults.latencyJitterMs = 0;
    expect(await timed()).toBeLessThan(140);
    emulator.faults.reset(); // back to the construction's values
    expect(emulator.faults.latencyMs).toBe(150);
  });
});
