// Tests the gateway where an earlier attempt's fate is unknown: conditional writes resent after a lost answer, a
// quota pause met while other calls were already in flight, and attempts that outlive their time limit.
import { createServer } from "node:http";
import type { AddressInfo } from "node:net";
import { afterEach, describe, expect, it } from "vitest";
import { OAuthCredentials } from "../../src/calendar/auth.ts";
import type { CalendarError } from "../../src/calendar/errors.ts";
import type { CalendarEvent } from "../../src/calendar/gateway.ts";
import { eventIdFor } from "../../src/calendar/ids.ts";
import { type OwnedLike, ownedPatch } from "../../src/calendar/render.ts";
import { type Clock, ManualClock } from "../../src/clock.ts";
import { body, CALENDAR_ID, type Fixture, metricValue, rejection, setup } from "./helpers.ts";

let f: Fixture | undefined;
afterEach(async () => {
  await f?.close();
  f = undefined;
});

/** A clock whose backoff sleeps return at once, after running the hook set for the next one (what happens meanwhile). */
class HookClock implements Clock {
  onSleep: (() => unknown) | undefined;
  now(): number {
    return Date.now();
  }
  async sleep(): Promise<void> {
    const hook = this.onSleep;
    this.onSleep = undefined;
    await hook?.();
  }
}

/** "METHOD status" of the API requests since `from`, "dropped" marking a withheld answer. */
function requests(fx: Fixture, from = 0): string[] {
  return fx.emulator.requestLog
    .filter((r) => r.path.startsWith("/calendar/v3/"))
    .slice(from)
    .map((r) => `${r.method} ${r.status}${r.dropped ? " dropped" : ""}`);
}

const apiCount = (fx: Fixture) => requests(fx).length;

describe("conditional writes resent after an attempt that may have been applied", () => {
  it("update: a 412 on its own applied write returns the stored event; a therapist's change stays a 412", async () => {
    const clock = new HookClock();
    f = await setup({ clock });
    const id = eventIdFor("apt_lost_put");
    const { event } = await f.gateway.upsert(id, body("v1"));

    f.emulator.faults.dropResponseNext(1);
    let from = apiCount(f);
    const updated = await f.gateway.update(id, body("v2"), { ifMatch: event.etag! });
    expect(requests(f, from)).toEqual(["PUT 200 dropped", "PUT 412", "GET 200"]);
    expect(updated.summary).toBe("v2");
    expect(updated.etag).toBe(f.emulator.event(CALENDAR_ID, id)?.etag);
    expect(updated.etag).not.toBe(event.etag);
    expect(f.emulator.counters.updates).toBe(1);

    // Applied, but the therapist moved the event before the resend: that 412 is theirs.
    f.emulator.faults.dropResponseNext(1);
    clock.onSleep = () => f!.emulator.userEdit(CALENDAR_ID, id, { summary: "renamed by therapist" });
    const err = await rejection(f.gateway.update(id, body("v3"), { ifMatch: updated.etag! }));
    expect(err).toMatchObject({ kind: "precondition", status: 412, reason: "conditionNotMet" });
    expect(f.emulator.event(CALENDAR_ID, id)?.summary).toBe("renamed by therapist");

    // A 412 on a first attempt is a precondition failure even when the event already looks like the body: nothing
    // of ours can have changed the etag, and no read is spent on it.
    f.emulator.userEdit(CALENDAR_ID, id, { summary: "v4" });
    from = apiCount(f);
    const first = await rejection(f.gateway.update(id, body("v4"), { ifMatch: updated.etag! }));
    expect(first.kind).toBe("precondition");
    expect(requests(f, from)).toEqual(["PUT 412"]);
  });

  it("patch: a 412 on its own applied write returns the stored event; a different stored value stays a 412", async () => {
    const clock = new HookClock();
    f = await setup({ clock });
    const id = eventIdFor("apt_lost_patch");
    const { event } = await f.gateway.upsert(id, body("v1"));
    const partial: CalendarEvent = {
      summary: "patched",
      start: { dateTime: "2026-11-23T11:00:00Z" },
      end: { dateTime: "2026-11-23T12:00:00Z" },
      extendedProperties: { private: { note: "n1" } },
    };

    f.emulator.faults.dropResponseNext(1);
    const from = apiCount(f);
    const patched = await f.gateway.patch(id, partial, { ifMatch: event.etag! });
    expect(requests(f, from)).toEqual(["PATCH 200 dropped", "PATCH 412", "GET 200"]);
    expect(patched).toMatchObject({
      summary: "patched",
      extendedProperties: { private: { calbridge_managed: "1", note: "n1" } },
    });
    expect(Date.parse(patched.start?.dateTime ?? "")).toBe(Date.parse("2026-11-23T11:00:00Z"));
    expect(patched.etag).toBe(f.emulator.event(CALENDAR_ID, id)?.etag);
    expect(f.emulator.counters.patches).toBe(1);

    // The therapist changed a field the patch sets (the extended property) before the resend.
    f.emulator.faults.dropResponseNext(1);
    clock.onSleep = () =>
      f!.emulator.userEdit(CALENDAR_ID, id, { extendedProperties: { private: { note: "theirs" } } });
    const err = await rejection(
      f.gateway.patch(id, { extendedProperties: { private: { note: "n2" } } }, { ifMatch: patched.etag! }),
    );
    expect(err).toMatchObject({ kind: "precondition", status: 412 });
  });

  it("upsert's restore: a 5xx may have been applied, so the 412 of the resend is checked against the event", async () => {
    const clock = new HookClock();
    f = await setup({ clock });
    const id = eventIdFor("apt_restore_5xx");
    await f.gateway.upsert(id, body("v1"));
    await f.api.events.delete({ calendarId: CALENDAR_ID, eventId: id }); // an API deletion: Google restores those
    // Google answers 503 to the restoring PATCH, yet carried it out (here: the same PATCH applied during the backoff).
    f.emulator.faults.next(1, { status: 503, reason: "backendError", match: /^PATCH / });
    clock.onSleep = () =>
      f!.api.events.patch({
        calendarId: CALENDAR_ID,
        eventId: id,
        sendUpdates: "none",
        requestBody: ownedPatch(body("v2") as OwnedLike, "confirmed"),
      });
    const from = apiCount(f);
    const result = await f.gateway.upsert(id, body("v2"));
    expect(requests(f, from)).toEqual(["POST 409", "GET 200", "PATCH 503", "PATCH 200", "PATCH 412", "GET 200"]);
    expect(result.action).toBe("restored");
    expect(result.event).toMatchObject({ status: "confirmed", summary: "v2" });
    expect(result.event.etag).toBe(f.emulator.event(CALENDAR_ID, id)?.etag);
  });
});

describe("quota pause with calls in flight", () => {
  it("is not lifted by a call sent before the pause began, only by one sent after it", async () => {
    const clock = new ManualClock(Date.now());
    f = await setup({ clock, quotaPauseMs: 3_600_000 });
    await f.gateway.get(eventIdFor("warmup")); // token
    f.emulator.faults.latencyMs = 200;
    f.emulator.faults.next(1, { status: 403, reason: "quotaExceeded", match: /aaaaa/ });
    const outcomes = await Promise.allSettled([
      // quotaExceeded comes at once; the other call, sent alongside, is answered 200 ms later: it was sent before the
      // pause began and says nothing about the quota now.
      f.gateway.get("aaaaa00000"),
      f.gateway.get("bbbbb00000"),
    ]);
    expect(outcomes.map((o) => (o.status === "rejected" ? (o.reason as CalendarError).kind : "ok"))).toEqual([
      "quota",
      "ok",
    ]);
    f.emulator.faults.latencyMs = 0;
    expect(f.gateway.health().pausedUntil).toBe(clock.now() + 3_600_000);
    expect(await metricValue(f.registry, "calbridge_google_paused", { therapist: "th_anna" })).toBe(1);
    const sent = apiCount(f);
    const err = await rejection(f.gateway.get("ccccc00000"));
    expect(err.message).toMatch(/paused until .*nothing was sent/);
    expect(apiCount(f)).toBe(sent);

    await clock.advance(3_600_001);
    expect(await f.gateway.get("ccccc00000")).toBeNull();
    expect(f.gateway.health().pausedUntil).toBeUndefined();
    expect(await metricValue(f.registry, "calbridge_google_paused", { therapist: "th_anna" })).toBe(0);
  });
});

describe("time limit of an attempt", () => {
  it("aborts an attempt whose answer does not come in time, retries it, and reports a timeout that may have applied", async () => {
    f = await setup({ clock: new HookClock(), timeoutMs: 200, maxAttempts: 2 });
    const id = eventIdFor("apt_slow");
    await f.gateway.upsert(id, body("v1"));
    f.emulator.faults.latencyMs = 3_000;
    const started = performance.now();
    const err = await rejection(f.gateway.get(id));
    // Two attempts of 200 ms each (the backoff sleeps return at once), not two answers 3 s late.
    expect(performance.now() - started).toBeLessThan(2_500);
    expect(err).toMatchObject({ kind: "transient", ambiguous: true });
    expect(err.message).toMatch(/^events\.get .*timed out.*200 ms/);
    expect(
      await metricValue(f.registry, "calbridge_google_requests_total", { method: "events.get", status: "network" }),
    ).toBe(2);
    // The limit is the attempt's, not the gateway's: once Google answers in time again, so does the gateway.
    f.emulator.faults.latencyMs = 0;
    expect((await f.gateway.get(id))?.summary).toBe("v1");
  });

  it("reports a token endpoint that does not answer as such, even when the attempt's limit ran out first", async () => {
    // A token endpoint that takes the connection and never answers.
    const silent = createServer(() => {});
    await new Promise<void>((resolve) => silent.listen(0, "127.0.0.1", resolve));
    try {
      const { port } = silent.address() as AddressInfo;
      const auth = new OAuthCredentials({
        clientId: "client",
        clientSecret: "secret",
        refreshToken: "refresh",
        tokenUrl: `http://127.0.0.1:${port}/token`,
        timeoutMs: 300,
      });
      f = await setup({ auth, clock: new HookClock(), timeoutMs: 100, maxAttempts: 1 });
      const err = await rejection(f.gateway.get(eventIdFor("apt_token")));
      expect(err).toMatchObject({ tokenEndpoint: true, ambiguous: false });
      expect(err.message).toMatch(/token endpoint .* unreachable: request timed out: no complete answer within 300 ms/);
    } finally {
      silent.closeAllConnections();
      await new Promise((resolve) => silent.close(resolve));
    }
  });

  it("limits every kind of call: none waits for an answer that does not come", async () => {
    f = await setup({ clock: new HookClock(), timeoutMs: 150, maxAttempts: 1 });
    const gateway = f.gateway;
    const id = eventIdFor("apt_every");
    await gateway.upsert(id, body("v1"));
    const { resourceId } = await gateway.watch({ channelId: "ch-every", address: "https://example.org/hook" });
    f.emulator.faults.latencyMs = 5_000;
    const calls: [string, () => Promise<unknown>][] = [
      ["upsert", () => gateway.upsert(eventIdFor("apt_every_2"), body("v2"))],
      ["update", () => gateway.update(id, body("v3"))],
      ["patch", () => gateway.patch(id, { summary: "v4" })],
      ["delete", () => gateway.delete(id)],
      ["move", () => gateway.move(id, "other@clinic.example")],
      ["get", () => gateway.get(id)],
      [
        "listManaged",
        async () => {
          for await (const _ of gateway.listManaged({ timeMin: "2026-11-01", timeMax: "2026-12-01" })) break;
        },
      ],
      ["incrementalChanges", () => gateway.incrementalChanges(undefined)],
      ["watch", () => gateway.watch({ channelId: "ch-every-2", address: "https://example.org/hook" })],
      ["stopChannel", () => gateway.stopChannel("ch-every", resourceId)],
    ];
    for (const [name, call] of calls) {
      const started = performance.now();
      const err = await rejection(call());
      expect({ name, message: err.message }).toMatchObject({ name, message: expect.stringMatching(/timed out/) });
      expect(performance.now() - started).toBeLessThan(2_500);
    }
    const started = performance.now();
    expect((await gateway.checkAccess()).detail).toMatch(/timed out/);
    expect(await gateway.sharing()).toMatchObject({ error: expect.stringMatching(/timed out/) });
    expect(performance.now() - started).toBeLessThan(4_000);
  });
});
