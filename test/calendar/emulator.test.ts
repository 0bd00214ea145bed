// Tests the Calendar emulator's fidelity through the real googleapis client: ids, deletion, etags, listing, sync, push.
import { createServer, type IncomingHttpHeaders } from "node:http";
import type { AddressInfo } from "node:net";
import { calendar_v3 } from "googleapis/build/src/apis/calendar/v3.js";
import { afterEach, beforeEach, describe, expect, it } from "vitest";
import { ManualClock } from "../../src/clock.ts";
import { NOTIFICATION_RETRIES, RETRY_FIRST_MS } from "../../src/simulator/calendar/push.ts";
import { body, CALENDAR_ID, expectGoogleError, type Fixture, SUBJECT, setup } from "./helpers.ts";

let f: Fixture;
beforeEach(async () => {
  f = await setup();
});
afterEach(async () => {
  await f.close();
});

const calendarId = CALENDAR_ID;

describe("event ids and deletion", () => {
  it("rejects ids that are not base32hex of 5 to 1024 characters", async () => {
    for (const id of ["abc", "has-dash", "UPPERCASE", "wxyz0", "a".repeat(1025)]) {
      await expectGoogleError(f.api.events.insert({ calendarId, requestBody: { ...body("x"), id } }), 400, "invalid");
    }
  });

  it("answers 409 duplicate for an existing id, also after deletion; deleted events stay readable", async () => {
    const id = "abcde12345";
    const first = await f.api.events.insert({ calendarId, requestBody: { ...body("x"), id } });
    expect(first.data.id).toBe(id);
    await expectGoogleError(f.api.events.insert({ calendarId, requestBody: { ...body("y"), id } }), 409, "duplicate");
    const del = await f.api.events.delete({ calendarId, eventId: id });
    expect(del.status).toBe(204);
    const got = await f.api.events.get({ calendarId, eventId: id });
    expect(got.status).toBe(200);
    expect(got.data.status).toBe("cancelled");
    await expectGoogleError(f.api.events.insert({ calendarId, requestBody: { ...body("z"), id } }), 409, "duplicate");
    await expectGoogleError(f.api.events.delete({ calendarId, eventId: id }), 410, "deleted");
    await expectGoogleError(f.api.events.get({ calendarId, eventId: "neverexisted" }), 404, "notFound");
    const restored = await f.api.events.update({
      calendarId,
      eventId: id,
      requestBody: { ...body("back"), status: "confirmed" },
    });
    expect(restored.data.status).toBe("confirmed");
    expect(f.emulator.counters.restores).toBe(1);
  });

  it("makes ids free again only after deleted events are purged", async () => {
    const id = "purge12345";
    await f.api.events.insert({ calendarId, requestBody: { ...body("x"), id } });
    await f.api.events.delete({ calendarId, eventId: id });
    expect(f.emulator.purgeDeleted(calendarId)).toBe(1);
    await expectGoogleError(f.api.events.get({ calendarId, eventId: id }), 404, "notFound");
    expect((await f.api.events.insert({ calendarId, requestBody: { ...body("x"), id } })).status).toBe(200);
  });
});

describe("etags, update and patch", () => {
  it("bumps etag and updated on every change and enforces If-Match", async () => {
    const { data: a } = await f.api.events.insert({ calendarId, requestBody: { ...body("x"), id: "etag000001" } });
    await new Promise((r) => setTimeout(r, 5));
    const { data: b } = await f.api.events.patch({ calendarId, eventId: "etag000001", requestBody: { summary: "y" } });
    expect(b.etag).not.toBe(a.etag);
    expect(Date.parse(b.updated!)).toBeGreaterThan(Date.parse(a.updated!));
    await expectGoogleError(
      f.api.events.patch(
        { calendarId, eventId: "etag000001", requestBody: { summary: "z" } },
        { headers: { "If-Match": a.etag! } },
      ),
      412,
      "conditionNotMet",
    );
    const ok = await f.api.events.patch(
      { calendarId, eventId: "etag000001", requestBody: { summary: "z" } },
      { headers: { "If-Match": b.etag! } },
    );
    expect(ok.data.summary).toBe("z");
    const edited = f.emulator.userEdit(calendarId, "etag000001", { summary: "therapist" });
    expect(edited.etag).not.toBe(ok.data.etag);
    await expectGoogleError(
      f.api.events.delete({ calendarId, eventId: "etag000001" }, { headers: { "If-Match": ok.data.etag! } }),
      412,
      "conditionNotMet",
    );
  });

  it("replaces on update and merges private extended properties per key on patch", async () => {
    const id = "merge00001";
    await f.api.events.insert({
      calendarId,
      requestBody: { ...body("x", undefined, undefined, { a: "1", b: "2" }), id, description: "d", colorId: "2" },
    });
    const patched = await f.api.events.patch({
      calendarId,
      eventId: id,
      requestBody: { extendedProperties: { private: { b: "3", c: "4" } } },
    });
    expect(patched.data.extendedProperties?.private).toEqual({ a: "1", b: "3", c: "4" });
    expect(patched.data.description).toBe("d");
    const put = await f.api.events.update({ calendarId, eventId: id, requestBody: body("only") });
    expect(put.data.description).toBeUndefined();
    expect(put.data.colorId).toBeUndefined();
    expect(put.data.extendedProperties?.private).toEqual({ calbridge_managed: "1" });
  });

  it("echoes times in the event's zone, drops over-long property keys and truncates values", async () => {
    const { data } = await f.api.events.insert({
      calendarId,
      requestBody: { ...body("x", undefined, undefined, { ["k".repeat(45)]: "v", long: "v".repeat(2000) }) },
    });
    expect(data.start).toEqual({ dateTime: "2026-11-23T10:00:00+01:00", timeZone: "Europe/Berlin" });
    expect(data.transparency).toBeUndefined();
    expect(data.visibility).toBe("private");
    expect(data.extendedProperties?.private).toEqual({ long: "v".repeat(1024) });
    await expectGoogleError(
      f.api.events.insert({ calendarId, requestBody: { ...body("x"), end: { dateTime: "2026-11-23T08:00:00Z" } } }),
      400,
      "timeRangeEmpty",
    ); // Zero length is refused too (ridafkih/keeper.sh #614): calbridge never writes one (render.ts refuses it first).
    await expectGoogleError(
      f.api.events.insert({ calendarId, requestBody: { ...body("x"), end: data.start! } }),
      400,
      "timeRangeEmpty",
    );
  });

  it("stores a description as written, and refuses one over about 8,192 characters", async () => {
    const html = "<b>Booking</b> &lt;a href=&quot;x&quot;&gt; it&#39;s\n\tend";
    const { data } = await f.api.events.insert({ calendarId, requestBody: { ...body("x"), description: html } });
    expect((await f.api.events.get({ calendarId, eventId: data.id! })).data.description).toBe(html);
    const limit = "d".repeat(8192);
    expect((await f.api.events.insert({ calendarId, requestBody: { ...body("x"), description: limit } })).status).toBe(
      200,
    );
    await expectGoogleError(
      f.api.events.insert({ calendarId, requestBody: { ...body("x"), description: `${limit}d` } }),
      400,
      "invalid",
    );
    await expectGoogleError(
      f.api.events.patch({ calendarId, eventId: data.id!, requestBody: { description: "d".repeat(20_000) } }),
      400,
      "invalid",
    );
  });
});

describe("listing", () => {
  async function seed() {
    await f.api.events.insert({
      calendarId,
      requestBody: { ...body("A", "2026-11-23T09:00:00Z", "2026-11-23T10:00:00Z"), id: "aaaaa00001" },
    });
    await f.api.events.insert({
      calendarId,
      requestBody: { ...body("B", "2026-11-23T10:00:00Z", "2026-11-23T11:00:00Z"), id: "bbbbb00001" },
    });
    await f.api.events.insert({
      calendarId,
      requestBody: { ...body("C", "2026-11-23T11:00:00Z", "2026-11-23T12:00:00Z", { other: "1" }), id: "ccccc00001" },
    });
  }
  const summaries = (r: { data: calendar_v3.Schema$Events }) => (r.data.items ?? []).map((e) => e.summary).sort();

  it("treats timeMin as exclusive bound on the end and timeMax as exclusive bound on the start", async () => {
    await seed();
    expect(summaries(await f.api.events.list({ calendarId, timeMin: "2026-11-23T10:00:00Z" }))).toEqual(["B", "C"]);
    expect(summaries(await f.api.events.list({ calendarId, timeMax: "2026-11-23T11:00:00Z" }))).toEqual(["A", "B"]);
    expect(
      summaries(
        await f.api.events.list({
          calendarId,
          timeMin: "2026-11-23T11:00:00+01:00",
          timeMax: "2026-11-23T12:00:00+01:00",
        }),
      ),
    ).toEqual(["B"]);
    await expectGoogleError(f.api.events.list({ calendarId, timeMin: "2026-11-23T10:00:00" }), 400, "badRequest");
  });

  it("filters by privateExtendedProperty (repeatable, all must match) and hides deleted events unless asked", async () => {
    await seed();
    expect(
      summaries(await f.api.events.list({ calendarId, privateExtendedProperty: ["calbridge_managed=1"] })),
    ).toEqual(["A", "B"]);
    expect(
      summaries(await f.api.events.list({ calendarId, privateExtendedProperty: ["calbridge_managed=1", "other=1"] })),
    ).toEqual([]);
    await f.api.events.delete({ calendarId, eventId: "aaaaa00001" });
    expect(summaries(await f.api.events.list({ calendarId }))).toEqual(["B", "C"]);
    const withDeleted = await f.api.events.list({ calendarId, showDeleted: true });
    expect(withDeleted.data.items?.find((e) => e.id === "aaaaa00001")?.status).toBe("cancelled");
  });

  it("pages with opaque tokens; nextSyncToken only on the last page", async () => {
    for (let i = 0; i < 5; i++) await f.api.events.insert({ calendarId, requestBody: body(`E${i}`) });
    f.emulator.faults.emptyPagesNext(1);
    const seen: string[] = [];
    let pageToken: string | undefined;
    let pages = 0;
    let syncToken: string | undefined;
    do {
      const { data } = await f.api.events.list({ calendarId, maxResults: 2, pageToken });
      pages += 1;
      expect(data.nextPageToken && data.nextSyncToken).toBeFalsy();
      seen.push(...(data.items ?? []).map((e) => e.summary!));
      pageToken = data.nextPageToken ?? undefined;
      syncToken = data.nextSyncToken ?? undefined;
    } while (pageToken);
    expect(pages).toBe(4); // one empty page first
    expect(seen.sort()).toEqual(["E0", "E1", "E2", "E3", "E4"]);
    expect(syncToken).toBeTruthy();
    await expectGoogleError(f.api.events.list({ calendarId, maxResults: 0 }), 400, "invalid");
    await expectGoogleError(f.api.events.list({ calendarId, pageToken: "bogus" }), 400, "invalid");
  });
});

describe("incremental sync", () => {
  it("returns changes since the token, deletions as cancelled with their id", async () => {
    await f.api.events.insert({ calendarId, requestBody: { ...body("keep"), id: "keep000001" } });
    await f.api.events.insert({ calendarId, requestBody: { ...body("gone"), id: "gone000001" } });
    const full = await f.api.events.list({ calendarId });
    const token = full.data.nextSyncToken!;
    expect((await f.api.events.list({ calendarId, syncToken: token })).data.items).toEqual([]);
    f.emulator.userDelete(calendarId, "gone000001");
    f.emulator.userEdit(calendarId, "keep000001", {
      start: { dateTime: "2026-11-24T09:00:00Z" },
      end: { dateTime: "2026-11-24T10:00:00Z" },
    });
    const inc = await f.api.events.list({ calendarId, syncToken: token });
    const byId = new Map((inc.data.items ?? []).map((e) => [e.id, e]));
    expect(byId.get("gone000001")).toMatchObject({ id: "gone000001", status: "cancelled" });
    expect(byId.get("gone000001")?.extendedProperties).toBeUndefined();
    expect(byId.get("keep000001")?.start?.dateTime).toBe("2026-11-24T10:00:00+01:00");
    expect(inc.data.nextSyncToken).toBeTruthy();
  });

  it("refuses filters together with syncToken and answers 410 for invalidated tokens", async () => {
    const token = (await f.api.events.list({ calendarId })).data.nextSyncToken!;
    for (const extra of [
      { timeMin: "2026-11-23T00:00:00Z" },
      { timeMax: "2026-11-23T00:00:00Z" },
      { privateExtendedProperty: ["calbridge_managed=1"] },
      { q: "x" },
      { orderBy: "updated" },
      { updatedMin: "2026-11-23T00:00:00Z" },
    ]) {
      await expectGoogleError(f.api.events.list({ calendarId, syncToken: token, ...extra }), 400, "invalid");
    }
    f.emulator.invalidateSyncTokens(calendarId);
    await expectGoogleError(f.api.events.list({ calendarId, syncToken: token }), 410, "fullSyncRequired");
  });
});

describe("access, request log and faults", () => {
  it("answers 401 without a valid token and 404 for calendars the subject cannot see", async () => {
    const anonymous = new calendar_v3.Calendar({ rootUrl: f.emulator.rootUrl, retry: false });
    await expectGoogleError(anonymous.events.list({ calendarId }), 401, "required");
    f.emulator.createCalendar("ben@clinic.example", "ben@clinic.example");
    await expectGoogleError(f.api.events.list({ calendarId: "ben@clinic.example" }), 404, "notFound");
    const primary = await f.api.calendars.get({ calendarId: "primary" });
    expect(primary.data.id).toBe(SUBJECT);
    const entry = await f.api.calendarList.get({ calendarId });
    expect(entry.data.accessRole).toBe("owner");
  });

  it("records quotaUser, sendUpdates and If-Match per request", async () => {
    await f.api.events.insert({ calendarId, quotaUser: "th_anna", sendUpdates: "none", requestBody: body("x") });
    const last = f.emulator.requestLog.at(-1)!;
    expect(last).toMatchObject({
      method: "POST",
      status: 200,
      quotaUser: "th_anna",
      sendUpdates: "none",
      subject: SUBJECT,
    });
    expect(last.path).toBe(`/calendar/v3/calendars/${encodeURIComponent(calendarId)}/events`);
  });

  it("injects error bursts in Google's error shape, then recovers", async () => {
    f.emulator.faults
      .next(1, { status: 503, reason: "backendError" })
      .next(1, { status: 403, reason: "quotaExceeded" });
    await expectGoogleError(f.api.events.list({ calendarId }), 503, "backendError");
    const err = await f.api.events.list({ calendarId }).catch((e: { response: { data: unknown } }) => e.response.data);
    expect(err).toEqual({
      error: {
        errors: [{ domain: "usageLimits", reason: "quotaExceeded", message: "Calendar usage limits exceeded." }],
        code: 403,
        message: "Calendar usage limits exceeded.",
      },
    });
    expect((await f.api.events.list({ calendarId })).status).toBe(200);
  });

  it("applies a write and then loses the answer", async () => {
    f.emulator.faults.dropResponseNext(1);
    await expect(
      f.api.events.insert({ calendarId, requestBody: { ...body("x"), id: "lost000001" } }),
    ).rejects.toThrow();
    expect(f.emulator.event(calendarId, "lost000001")?.summary).toBe("x");
    expect(f.emulator.requestLog.at(-1)?.dropped).toBe(true);
  });

  it("enforces per-user rate limits in a sliding minute", async () => {
    f.emulator.limits.perUserPerMinute = 2;
    await f.api.events.list({ calendarId, quotaUser: "u1" });
    await f.api.events.list({ calendarId, quotaUser: "u1" });
    await expectGoogleError(f.api.events.list({ calendarId, quotaUser: "u1" }), 403, "rateLimitExceeded");
    expect((await f.api.events.list({ calendarId, quotaUser: "u2" })).status).toBe(200);
  });
});

describe("push notifications", () => {
  it("sends sync then exists notifications with Google's headers, and stops channels", async () => {
    const received: IncomingHttpHeaders[] = [];
    const server = createServer((req, res) => {
      received.push(req.headers);
      req.resume();
      res.end();
    });
    await new Promise<void>((r) => server.listen(0, "127.0.0.1", r));
    const address = `http://127.0.0.1:${(server.address() as AddressInfo).port}/webhooks/google`;
    try {
      const { data } = await f.api.events.watch({
        calendarId,
        requestBody: { id: "chan-1", type: "web_hook", address, token: "tok-123", params: { ttl: "3600" } },
      });
      expect(data.resourceId).toBeTruthy();
      expect(Number(data.expiration)).toBeGreaterThan(Date.now());
      await expectGoogleError(
        f.api.events.watch({ calendarId, requestBody: { id: "chan-1", type: "web_hook", address } }),
        400,
        "channelIdNotUnique",
      );
      await f.emulator.settleNotifications();
      await f.emulator.notify(calendarId);
      expect(received.map((h) => h["x-goog-resource-state"])).toEqual(["sync", "exists"]);
      expect(received[1]).toMatchObject({
        "x-goog-channel-id": "chan-1",
        "x-goog-channel-token": "tok-123",
        "x-goog-resource-id": data.resourceId,
        "x-goog-message-number": "2",
        "content-length": "0",
      });
      await f.api.channels.stop({ requestBody: { id: "chan-1", resourceId: data.resourceId } });
      expect(await f.emulator.notify(calendarId)).toEqual([]);
      await expectGoogleError(
        f.api.channels.stop({ requestBody: { id: "chan-1", resourceId: data.resourceId } }),
        404,
        "notFound",
      );
    } finally {
      server.close();
    }
  });

  it("answers events.watch only once the channel's sync message was answered (the order Google leaves open)", async () => {
    const order: string[] = [];
    let answerSync: (() => void) | undefined;
    const server = createServer((req, res) => {
      order.push(`notification ${String(req.headers["x-goog-resource-state"])}`);
      req.resume();
      // The receiver holds its answer a while: the watch call must still be waiting when it comes.
      answerSync = () => res.end();
      setTimeout(() => answerSync?.(), 100);
    });
    await new Promise<void>((r) => server.listen(0, "127.0.0.1", r));
    const address = `http://127.0.0.1:${(server.address() as AddressInfo).port}/webhooks/google`;
    try {
      const watch = (id: string) =>
        f.api.events.watch({ calendarId, requestBody: { id, type: "web_hook", address } }).then(() => {
          order.push(`answer ${id}`);
        });
      await watch("chan-first");
      expect(order).toEqual(["notification sync", "answer chan-first"]);
      expect(f.emulator.deliveries.at(-1)).toMatchObject({ channelId: "chan-first", state: "sync", status: 200 });

      // Concurrently, when asked: the answer no longer waits for the receiver.
      f.emulator.syncBeforeWatchAnswer = false;
      order.length = 0;
      await watch("chan-concurrent");
      expect(order[0]).toBe("answer chan-concurrent");
      await f.emulator.settleNotifications();
      expect(order).toEqual(["answer chan-concurrent", "notification sync"]);
    } finally {
      server.close();
    }
  });

  it("sends a notification answered 500/502/503/504 again with exponential backoff, a bounded number of times; not one answered 404 or 429", async () => {
    const clock = new ManualClock(Date.now());
    await f.close();
    f = await setup({ clock }, { clock });
    const answers: number[] = [];
    const received: IncomingHttpHeaders[] = [];
    const server = createServer((req, res) => {
      received.push(req.headers);
      req.resume();
      res.writeHead(answers.shift() ?? 200).end();
    });
    await new Promise<void>((r) => server.listen(0, "127.0.0.1", r));
    const address = `http://127.0.0.1:${(server.address() as AddressInfo).port}/webhooks/google`;
    /** Moves the emulator's clock on, and lets the retries due by then be sent and answered. */
    const advance = async (ms: number) => {
      await clock.advance(ms);
      await new Promise((r) => setTimeout(r, 20));
      await f.emulator.settleNotifications();
    };
    try {
      await f.api.events.watch({ calendarId, requestBody: { id: "chan-r", type: "web_hook", address } });
      await f.emulator.settleNotifications();
      // Longer than every retry's wait together (1 + 2 + 4 + 8 + 16 s).
      const LATER = 2 ** (NOTIFICATION_RETRIES + 1) * RETRY_FIRST_MS;
      let from = 0;
      const attempts = () =>
        f.emulator.deliveries
          .slice(from)
          .filter((d) => d.state === "exists")
          .map((d) => [d.attempt, d.status]);

      // 503 then 502: sent again 1 s, then 2 s later, with the same message number; taken the third time.
      answers.push(503, 502);
      expect((await f.emulator.notify(calendarId)).map((d) => d.status)).toEqual([503]);
      await advance(RETRY_FIRST_MS - 1);
      expect(attempts()).toEqual([[1, 503]]);
      await advance(1);
      expect(attempts()).toEqual([
        [1, 503],
        [2, 502],
      ]);
      await advance(2 * RETRY_FIRST_MS);
      expect(attempts()).toEqual([
        [1, 503],
        [2, 502],
        [3, 200],
      ]);
      expect(new Set(received.slice(1).map((h) => h["x-goog-message-number"]))).toEqual(new Set(["2"]));
      await advance(LATER);
      expect(attempts()).toHaveLength(3);

      // Always 500: the first try and NOTIFICATION_RETRIES more, then no more.
      from = f.emulator.deliveries.length;
      answers.push(...Array<number>(NOTIFICATION_RETRIES + 5).fill(500));
      await f.emulator.notify(calendarId);
      for (let i = 0; i < NOTIFICATION_RETRIES + 3; i++) await advance(RETRY_FIRST_MS * 2 ** i);
      expect(attempts()).toHaveLength(NOTIFICATION_RETRIES + 1);
      answers.length = 0;

      // 404 and 429 are failures Google does not retry; nor does it retry to a channel stopped meanwhile.
      for (const status of [404, 429]) {
        from = f.emulator.deliveries.length;
        answers.push(status);
        await f.emulator.notify(calendarId);
        await advance(LATER);
        expect(attempts()).toEqual([[1, status]]);
      }
      from = f.emulator.deliveries.length;
      answers.push(503);
      await f.emulator.notify(calendarId);
      const resourceId = [...f.emulator.channels.values()][0] as unknown as { resourceId: string };
      await f.api.channels.stop({ requestBody: { id: "chan-r", resourceId: resourceId.resourceId } });
      await advance(LATER);
      expect(attempts()).toEqual([[1, 503]]);
    } finally {
      server.close();
    }
  });
});
