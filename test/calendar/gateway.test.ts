// Tests the CalendarGateway against the emulator: idempotent upserts, retries, quota pause, broken credentials, sync.
import { afterEach, describe, expect, it } from "vitest";
import { type CalendarEvent, CalendarGateway } from "../../src/calendar/gateway.ts";
import { eventIdFor } from "../../src/calendar/ids.ts";
import { renderEvent } from "../../src/calendar/render.ts";
import { markOf, stampWrite } from "../../src/calendar/times-mark.ts";
import { type Clock, ManualClock } from "../../src/clock.ts";
import { captureLog } from "../support/log-capture.ts";
import {
  body,
  CALENDAR_ID,
  expectGoogleError,
  type Fixture,
  metricValue,
  rejection,
  SUBJECT,
  setup,
} from "./helpers.ts";

let f: Fixture | undefined;
afterEach(async () => {
  await f?.close();
  f = undefined;
});

const mapping = { therapist_id: "th_anna", timezone: "Europe/Berlin", calendar_id: CALENDAR_ID };
const config = {
  title: "{service_name}: {customer_name}",
  description: "Booking {id}",
  include_customer_contact: false,
  colors: { completed: "2" },
  cancelled_events: "delete" as const,
};
function rendered(id: string, status = "confirmed", start = "2026-11-23T09:00:00Z"): CalendarEvent {
  const end = new Date(Date.parse(start) + 3_600_000).toISOString();
  return renderEvent(
    { id, service_name: "Massage", customer_name: "Max", start_time: start, end_time: end, status },
    mapping,
    config,
  )!;
}
const apiRequests = (fx: Fixture) => fx.emulator.requestLog.filter((r) => r.path.startsWith("/calendar/v3/"));

/** A clock whose sleeps return at once but are recorded. */
class RecordingClock implements Clock {
  readonly sleeps: number[] = [];
  now(): number {
    return Date.now();
  }
  async sleep(ms: number): Promise<void> {
    this.sleeps.push(ms);
  }
}

describe("upsert", () => {
  it("inserts, then reports unchanged, then updates", async () => {
    f = await setup();
    const id = eventIdFor("apt_1");
    const first = await f.gateway.upsert(id, rendered("apt_1"));
    expect(first.action).toBe("inserted");
    expect(first.event.id).toBe(id);
    expect((await f.gateway.upsert(id, rendered("apt_1"))).action).toBe("unchanged");
    const moved = await f.gateway.upsert(id, rendered("apt_1", "completed", "2026-11-24T09:00:00Z"));
    expect(moved.action).toBe("updated");
    expect(moved.event.colorId).toBe("2");
    expect(f.emulator.events(CALENDAR_ID)).toHaveLength(1);
  });

  it("a body differing only in its times mark's stamp (another write of the same event) is unchanged, not written", async () => {
    f = await setup();
    const id = eventIdFor("apt_mark");
    const first = stampWrite(rendered("apt_mark"), Date.UTC(2026, 10, 1));
    expect((await f.gateway.upsert(id, first)).action).toBe("inserted");
    const again = await f.gateway.upsert(id, stampWrite(rendered("apt_mark"), Date.UTC(2026, 10, 2)));
    expect(again.action).toBe("unchanged");
    expect(markOf(again.event)).toBe(markOf(first)); // the event keeps the mark of the write that put it there
    expect(f.emulator.counters).toMatchObject({ inserts: 1, patches: 0 });
  });

  it("compares reminders where they are configured: a body differing only in them is written, not unchanged", async () => {
    f = await setup();
    const id = eventIdFor("apt_rem");
    const withReminders = (minutes: number): CalendarEvent =>
      renderEvent(
        {
          id: "apt_rem",
          service_name: "Massage",
          customer_name: "Max",
          start_time: "2026-11-23T09:00:00Z",
          end_time: "2026-11-23T10:00:00Z",
        },
        mapping,
        { ...config, reminders: [{ method: "popup", minutes }] },
      )!;
    expect((await f.gateway.upsert(id, withReminders(30))).action).toBe("inserted");
    expect((await f.gateway.upsert(id, withReminders(30))).action).toBe("unchanged");
    const changed = await f.gateway.upsert(id, withReminders(10));
    expect(changed.action).toBe("updated");
    expect(f.emulator.event(CALENDAR_ID, id)?.reminders).toEqual({
      useDefault: false,
      overrides: [{ method: "popup", minutes: 10 }],
    });
  });

  it("does not duplicate an insert retried after a lost response", async () => {
    f = await setup();
    f.emulator.faults.dropResponseNext(1);
    const id = eventIdFor("apt_lost");
    const result = await f.gateway.upsert(id, rendered("apt_lost"));
    expect(result.action).toBe("inserted");
    expect(f.emulator.events(CALENDAR_ID)).toHaveLength(1);
    expect(f.emulator.counters).toMatchObject({ inserts: 1, updates: 0 });
    expect(await metricValue(f.registry, "calbridge_google_retries_total", { reason: "network" })).toBe(1);
  });

  it("restores a deleted event instead of duplicating it", async () => {
    f = await setup();
    const id = eventIdFor("apt_back");
    await f.gateway.upsert(id, rendered("apt_back"));
    await f.gateway.delete(id); // deleted through the API: Google restores those (not what a person deleted in the UI)
    const again = await f.gateway.upsert(id, rendered("apt_back"));
    expect(again.action).toBe("restored");
    expect(again.event.status).toBe("confirmed");
    expect(f.emulator.events(CALENDAR_ID)).toHaveLength(1);
    expect(f.emulator.counters.restores).toBe(1);
  });

  it("reports clearly when Google refuses to restore", async () => {
    f = await setup();
    const id = eventIdFor("apt_refused");
    await f.gateway.upsert(id, rendered("apt_refused"));
    await f.gateway.delete(id);
    f.emulator.faults.refuseRestore = true;
    const err = await rejection(f.gateway.upsert(id, rendered("apt_refused")));
    expect(err.kind).toBe("forbidden");
    expect(err.message).toMatch(/refused to restore the deleted event/);
  });

  it("honours ifMatch: a therapist's change since then is a precondition failure", async () => {
    f = await setup();
    const id = eventIdFor("apt_if");
    const { event } = await f.gateway.upsert(id, rendered("apt_if"));
    f.emulator.userEdit(CALENDAR_ID, id, { summary: "moved by therapist" });
    const stale = await rejection(f.gateway.update(id, rendered("apt_if"), { ifMatch: event.etag! }));
    expect(stale).toMatchObject({ kind: "precondition", status: 412, reason: "conditionNotMet" });
    f.emulator.userDelete(CALENDAR_ID, id);
    const deleted = await rejection(f.gateway.upsert(id, rendered("apt_if"), { ifMatch: event.etag! }));
    expect(deleted.kind).toBe("precondition");
    expect(f.emulator.event(CALENDAR_ID, id)?.status).toBe("cancelled");
  });

  it("writes an event a person made all-day back as a timed one: the patch clears start.date and end.date", async () => {
    // events.patch merges start and end field by field: without `date: null` the event's date stays beside calbridge's
    // dateTime and Google refuses the write 400 "Invalid start time." (emulator-patch-times.test.ts).
    f = await setup();
    const id = eventIdFor("apt_allday");
    await f.gateway.upsert(id, rendered("apt_allday"));
    f.emulator.userEdit(CALENDAR_ID, id, { start: { date: "2026-11-23" }, end: { date: "2026-11-24" } });
    const restored = await f.gateway.upsert(id, rendered("apt_allday"));
    expect(restored.action).toBe("updated");
    expect(f.emulator.event(CALENDAR_ID, id)).toMatchObject({
      start: { dateTime: "2026-11-23T10:00:00+01:00", timeZone: "Europe/Berlin" },
      end: { dateTime: "2026-11-23T11:00:00+01:00", timeZone: "Europe/Berlin" },
    });
    expect(f.emulator.event(CALENDAR_ID, id)?.start).not.toHaveProperty("date");
  });
});

/** Ben's calendar, shared with anna (whose credentials the fixture holds), and a gateway on it. */
function sharedCalendarOf(fx: Fixture) {
  const other = "ben@clinic.example";
  fx.emulator.createCalendar(other, other, { timeZone: "Europe/Berlin" });
  fx.emulator.shareCalendar(other, SUBJECT, "writer");
  const gateway = new CalendarGateway({
    therapistId: "th_ben",
    calendarId: other,
    apiRoot: fx.emulator.rootUrl,
    auth: fx.auth,
    random: () => 0,
  });
  return { other, gateway };
}

describe("delete, get, list", () => {
  it("treats gone as success and returns deleted events from get", async () => {
    f = await setup();
    const id = eventIdFor("apt_del");
    await f.gateway.upsert(id, rendered("apt_del"));
    expect(await f.gateway.delete(id)).toBe("deleted");
    expect(await f.gateway.delete(id)).toBe("already_gone");
    expect(await f.gateway.delete(eventIdFor("never"))).toBe("already_gone");
    expect((await f.gateway.get(id))?.status).toBe("cancelled");
    expect(await f.gateway.get(eventIdFor("never"))).toBeNull();
  });

  it("confirms a 404 on delete with the calendar itself: a calendar no longer shared is missing, not the event gone", async () => {
    f = await setup();
    const { other, gateway } = sharedCalendarOf(f);
    try {
      const id = eventIdFor("apt_unshared");
      await gateway.upsert(id, rendered("apt_unshared"));
      f.emulator.unshareCalendar(other, SUBJECT);
      const err = await rejection(gateway.delete(id));
      expect(err.kind).toBe("calendar_not_found");
      expect(f.emulator.event(other, id)?.status).toBe("confirmed");
      expect(gateway.health().lastError).toMatch(/calendars\.get/);

      // Shared again: the delete goes through; an id the calendar never had is gone after one calendars.get.
      f.emulator.shareCalendar(other, SUBJECT, "writer");
      expect(await gateway.delete(id)).toBe("deleted");
      const before = apiRequests(f).length;
      expect(await gateway.delete(eventIdFor("never_there"))).toBe("already_gone");
      expect(
        apiRequests(f)
          .slice(before)
          .map((r) => r.method),
      ).toEqual(["DELETE", "GET"]);
    } finally {
      gateway.close();
    }
  });

  it("get with confirmMissing: a 404 is 'no such event' only once the calendar itself answers", async () => {
    f = await setup();
    const { other, gateway } = sharedCalendarOf(f);
    try {
      expect(await gateway.get(eventIdFor("never"), { confirmMissing: true })).toBeNull();
      f.emulator.unshareCalendar(other, SUBJECT);
      // Without the option a calendar no longer shared reads as an unknown event; with it, as a missing calendar.
      expect(await gateway.get(eventIdFor("never"))).toBeNull();
      const err = await rejection(gateway.get(eventIdFor("never"), { confirmMissing: true }));
      expect(err.kind).toBe("calendar_not_found");
    } finally {
      gateway.close();
    }
  });

  it("sends a therapist id longer than Google's 40 characters for quotaUser as a digest of 40, the same each time", async () => {
    const longId = `th_${"x".repeat(60)}`;
    f = await setup({ therapistId: longId });
    await expectGoogleError(f.api.calendars.get({ calendarId: CALENDAR_ID, quotaUser: longId }), 400, "invalid");
    await f.gateway.upsert(eventIdFor("apt_q1"), rendered("apt_q1"));
    await f.gateway.get(eventIdFor("apt_q1"));
    const sent = apiRequests(f)
      .map((r) => r.quotaUser)
      .filter((q) => q !== longId);
    expect(sent.length).toBeGreaterThanOrEqual(2);
    expect(new Set(sent).size).toBe(1);
    expect(sent[0]!.length).toBeLessThanOrEqual(40);
  });

  it("lists managed events in a window over all pages", async () => {
    f = await setup({ pageSize: 2 });
    for (let i = 0; i < 5; i++)
      await f.gateway.upsert(eventIdFor(`apt_${i}`), rendered(`apt_${i}`, "confirmed", `2026-11-2${i}T09:00:00Z`));
    f.emulator.userInsert(CALENDAR_ID, body("private", "2026-11-21T12:00:00Z", "2026-11-21T13:00:00Z", {}));
    await f.gateway.delete(eventIdFor("apt_1"));
    const seen: string[] = [];
    for await (const e of f.gateway.listManaged({
      timeMin: "2026-11-21T00:00:00Z",
      timeMax: new Date("2026-11-24T00:00:00Z"),
    })) {
      seen.push(e.extendedProperties?.private?.calbridge_appointment_id ?? "?");
    }
    expect(seen.sort()).toEqual(["apt_2", "apt_3"]);
  });

  it("sends quotaUser on every request and sendUpdates=none on every write", async () => {
    f = await setup();
    const id = eventIdFor("apt_q");
    await f.gateway.upsert(id, rendered("apt_q"));
    await f.gateway.upsert(id, rendered("apt_q", "completed"));
    await f.gateway.patch(id, { summary: "x" });
    await f.gateway.delete(id);
    await f.gateway.incrementalChanges(undefined);
    const requests = apiRequests(f);
    expect(requests.length).toBeGreaterThan(4);
    for (const r of requests) {
      expect(r.quotaUser).toBe("th_anna");
      if (r.method !== "GET") expect(r.sendUpdates).toBe("none");
    }
  });
});

describe("retries", () => {
  for (const fault of [
    { status: 403, reason: "rateLimitExceeded" },
    { status: 403, reason: "userRateLimitExceeded" },
    { status: 429, reason: "rateLimitExceeded" },
    { status: 503, reason: "backendError" },
    { status: 500, reason: "backendError" },
  ]) {
    it(`survives a burst of ${fault.status} ${fault.reason} on insert and patch`, async () => {
      f = await setup();
      const id = eventIdFor("apt_burst");
      f.emulator.faults.next(3, fault);
      expect((await f.gateway.upsert(id, rendered("apt_burst"))).action).toBe("inserted");
      f.emulator.faults.next(2, fault);
      expect((await f.gateway.patch(id, { summary: "patched" })).summary).toBe("patched");
      expect(f.emulator.events(CALENDAR_ID)).toHaveLength(1);
      expect(await metricValue(f.registry, "calbridge_google_retries_total", { reason: fault.reason })).toBe(5);
      expect(
        await metricValue(f.registry, "calbridge_google_requests_total", {
          method: "events.insert",
          status: String(fault.status),
        }),
      ).toBe(3);
    });
  }

  it("waits with truncated exponential backoff and full jitter", async () => {
    const clock = new RecordingClock();
    f = await setup({ clock, random: () => 0.5, backoff: { baseMs: 1000, maxMs: 3000 }, maxAttempts: 6 });
    f.emulator.faults.next(5, { status: 503, reason: "backendError" });
    await f.gateway.get(eventIdFor("x"));
    expect(clock.sleeps).toEqual([500, 1000, 1500, 1500, 1500]);
  });

  it("waits at least a server's Retry-After, truncated at the maximum delay", async () => {
    const clock = new RecordingClock();
    f = await setup({ clock, backoff: { baseMs: 100, maxMs: 5000 } });
    f.emulator.faults.next(1, { status: 429, reason: "rateLimitExceeded", retryAfter: 2 });
    f.emulator.faults.next(1, { status: 429, reason: "rateLimitExceeded", retryAfter: 3600 });
    await f.gateway.get(eventIdFor("x"));
    expect(clock.sleeps).toEqual([2000, 5000]);
  });

  it("gives up after maxAttempts with a transient error and never turns it into a deletion", async () => {
    f = await setup({ maxAttempts: 3 });
    f.emulator.faults.next(3, { status: 503, reason: "backendError" });
    const err = await rejection(f.gateway.delete(eventIdFor("x")));
    expect(err).toMatchObject({ kind: "transient", status: 503, retryable: true });
    expect(f.emulator.faults.pending).toBe(0);
  });

  it("does not retry client errors", async () => {
    f = await setup();
    const err = await rejection(f.gateway.upsert("bad-id", rendered("apt")));
    expect(err).toMatchObject({ kind: "invalid", status: 400, reason: "invalid" });
    expect(apiRequests(f)).toHaveLength(1);
  });
});

describe("quota pause", () => {
  it("pauses the calendar on quotaExceeded, fails fast with one log line, resumes after the pause", async () => {
    const clock = new ManualClock(Date.now());
    const log = captureLog();
    f = await setup({ clock, logger: log.logger, quotaPauseMs: 3_600_000 });
    f.emulator.faults.next(1, { status: 403, reason: "quotaExceeded" });
    const first = await rejection(f.gateway.get(eventIdFor("a")));
    expect(first.kind).toBe("quota");
    const sent = apiRequests(f).length;
    for (let i = 0; i < 3; i++) {
      const err = await rejection(f.gateway.upsert(eventIdFor("b"), rendered("b")));
      expect(err.kind).toBe("quota");
      expect(err.message).toMatch(/paused until .* quotaExceeded; nothing was sent/);
    }
    expect(apiRequests(f)).toHaveLength(sent);
    expect(log.lines.filter((l) => String(l.msg).includes("quota exhausted"))).toHaveLength(1);
    expect(f.gateway.health().pausedUntil).toBe(clock.now() + 3_600_000);
    expect(await metricValue(f.registry, "calbridge_google_paused", { therapist: "th_anna" })).toBe(1);
    await clock.advance(3_600_001);
    expect(await f.gateway.get(eventIdFor("a"))).toBeNull();
    expect(f.gateway.health().pausedUntil).toBeUndefined();
    expect(await metricValue(f.registry, "calbridge_google_paused", { therapist: "th_anna" })).toBe(0);
  });
});

describe("credentials and mapping errors", () => {
  it("reports revoked credentials per therapist via health(), metrics and one error log, then fails fast", async () => {
    const log = captureLog();
    f = await setup({ logger: log.logger });
    await f.gateway.get(eventIdFor("warmup"));
    expect(f.gateway.health().credentials).toBe("ok");
    expect(await metricValue(f.registry, "calbridge_google_credentials_ok", { therapist: "th_anna" })).toBe(1);
    f.emulator.revokeTokens(SUBJECT);
    const err = await rejection(f.gateway.get(eventIdFor("a")));
    expect(err).toMatchObject({ kind: "auth", reason: "invalid_grant" });
    expect(f.gateway.health()).toMatchObject({ credentials: "broken" });
    expect(await metricValue(f.registry, "calbridge_google_credentials_ok", { therapist: "th_anna" })).toBe(0);
    const sent = f.emulator.requestLog.length;
    const again = await rejection(f.gateway.upsert(eventIdFor("b"), rendered("b")));
    expect(again.kind).toBe("auth");
    expect(again.message).toMatch(/calbridge authorize --therapist th_anna/);
    expect(f.emulator.requestLog).toHaveLength(sent);
    const errors = log.lines.filter((l) => l.level === 50);
    expect(errors).toHaveLength(1);
    expect(errors[0]).toMatchObject({ therapist_id: "th_anna" });

    // Re-authorized: a new refresh token, then resetCredentials().
    f.emulator.restoreAccess(SUBJECT);
    f.auth.setCredentials({ refresh_token: f.emulator.issueRefreshToken(SUBJECT, f.client.client_id) });
    f.gateway.resetCredentials();
    expect(await f.gateway.get(eventIdFor("a"))).toBeNull();
    expect(f.gateway.health().credentials).toBe("ok");
    expect(await metricValue(f.registry, "calbridge_google_credentials_ok", { therapist: "th_anna" })).toBe(1);
  });

  it("fetches a new token once when the API rejects an access token early, without declaring it broken", async () => {
    f = await setup();
    await f.gateway.get(eventIdFor("warmup"));
    const tokens = () => f!.emulator.requestLog.filter((r) => r.path === "/token").length;
    expect(tokens()).toBe(1);
    f.emulator.expireAccessTokens(SUBJECT);
    expect(await f.gateway.get(eventIdFor("a"))).toBeNull();
    expect(tokens()).toBe(2);
    expect(f.gateway.health().credentials).toBe("ok");
  });

  it("names the calendar and therapist when the calendar does not exist", async () => {
    const log = captureLog();
    f = await setup({ logger: log.logger, calendarId: "nobody@clinic.example" });
    const err = await rejection(f.gateway.incrementalChanges(undefined));
    expect(err.kind).toBe("calendar_not_found");
    await rejection(f.gateway.upsert(eventIdFor("a"), rendered("a")));
    const errors = log.lines.filter((l) => l.level === 50);
    expect(errors).toHaveLength(1);
    expect(String(errors[0]?.msg)).toMatch(/calendar nobody@clinic.example of therapist th_anna/);
    const access = await f.gateway.checkAccess();
    expect(access.ok).toBe(false);
  });

  it("checkAccess reports write access", async () => {
    f = await setup();
    expect(await f.gateway.checkAccess()).toMatchObject({ ok: true });
    f.emulator.createCalendar("shared@clinic.example", "boss@clinic.example");
    f.emulator.shareCalendar("shared@clinic.example", SUBJECT, "reader");
    const { CalendarGateway } = await import("../../src/calendar/gateway.ts");
    const reader = new CalendarGateway({
      therapistId: "th_x",
      calendarId: "shared@clinic.example",
      apiRoot: f.emulator.rootUrl,
      auth: f.auth,
    });
    const result = await reader.checkAccess();
    reader.close();
    expect(result.ok).toBe(false);
    expect(result.detail).toMatch(/access reader/);
  });
});

describe("incrementalChanges", () => {
  it("does a full listing without a token, then pages through changes with one sync token", async () => {
    f = await setup({ pageSize: 2 });
    for (let i = 0; i < 4; i++) await f.gateway.upsert(eventIdFor(`apt_${i}`), rendered(`apt_${i}`));
    const full = await f.gateway.incrementalChanges(undefined);
    expect(full.fullSync).toBe(true);
    expect(full.events).toHaveLength(4);

    f.emulator.userDelete(CALENDAR_ID, eventIdFor("apt_0"));
    f.emulator.userEdit(CALENDAR_ID, eventIdFor("apt_1"), {
      start: { dateTime: "2026-11-23T12:00:00Z" },
      end: { dateTime: "2026-11-23T13:00:00Z" },
    });
    f.emulator.userInsert(CALENDAR_ID, body("own event", undefined, undefined, {}));
    const before = apiRequests(f).length;
    const changes = await f.gateway.incrementalChanges(full.nextSyncToken);
    expect(changes.fullSync).toBe(false);
    expect(changes.events).toHaveLength(3);
    const deleted = changes.events.find((e) => e.id === eventIdFor("apt_0"));
    expect(deleted).toMatchObject({ status: "cancelled" });
    expect(changes.nextSyncToken).not.toBe(full.nextSyncToken);
    const pages = apiRequests(f).slice(before);
    expect(pages).toHaveLength(2);
    expect(pages.every((p) => p.query.syncToken === full.nextSyncToken)).toBe(true);
    expect(pages[1]?.query.pageToken).toBeTruthy();

    const none = await f.gateway.incrementalChanges(changes.nextSyncToken);
    expect(none).toMatchObject({ events: [], fullSync: false });
  });

  it("survives 410 fullSyncRequired with a full listing that includes deletions", async () => {
    const log = captureLog();
    f = await setup({ logger: log.logger });
    await f.gateway.upsert(eventIdFor("a"), rendered("a"));
    await f.gateway.upsert(eventIdFor("b"), rendered("b"));
    const { nextSyncToken } = await f.gateway.incrementalChanges(undefined);
    await f.gateway.delete(eventIdFor("b"));
    f.emulator.invalidateSyncTokens(CALENDAR_ID);
    const result = await f.gateway.incrementalChanges(nextSyncToken);
    expect(result.fullSync).toBe(true);
    expect(result.events.map((e) => [e.id, e.status]).sort()).toEqual(
      [
        [eventIdFor("a"), "confirmed"],
        [eventIdFor("b"), "cancelled"],
      ].sort(),
    );
    expect(log.find((l) => String(l.msg).includes("full sync"))).toBeTruthy();
  });
});

describe("push channels", () => {
  it("opens and stops a channel", async () => {
    f = await setup();
    const { resourceId, expiration } = await f.gateway.watch({
      channelId: "calbridge-th_anna-1",
      address: "http://127.0.0.1:9/unused",
      token: "secret-channel-token",
      ttlSeconds: 3600,
    });
    expect(resourceId).toBeTruthy();
    expect(expiration).toBeGreaterThan(Date.now());
    expect(f.emulator.channels.has("calbridge-th_anna-1")).toBe(true);
    await f.gateway.stopChannel("calbridge-th_anna-1", resourceId);
    await f.gateway.stopChannel("calbridge-th_anna-1", resourceId);
    expect(f.emulator.channels.size).toBe(0);
  });
});
