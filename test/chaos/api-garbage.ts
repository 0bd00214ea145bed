// Malformed answers from both APIs: HTML error pages, truncated JSON, garbage bytes, wrong shapes and empty listings,
// from the booking service (the simulator's malformedNext) and from Google (a proxy in front of the emulator). Each
// gives a clear error or is recognised for what it is; nothing is deleted or cancelled because of one, and once the
// answers are sane again one reconciliation leaves every calendar as the booking service says.
import { describe, expect, it } from "vitest";
import { eventIdFor } from "../../src/calendar/ids.ts";
import type { ConfigInput } from "../../src/config/schema.ts";
import { startWorld } from "../../src/simulator/world.ts";
import { type RunningApp, startApp } from "./app.ts";
import { removeWhenPassed } from "./dirs.ts";
import { eventually, stateProblems } from "./expected.ts";
import { type GarbleProxy, startGarbleProxy } from "./garble-proxy.ts";
import { random } from "./random.ts";

/** Write-backs at once: the grace period before one is sent has tests of its own. */
const noGrace = (c: ConfigInput) => {
  c.sync = { ...c.sync, writeback: { cancel_grace_seconds: 0, reschedule_grace_seconds: 0 } };
};

const DAY = 86_400_000;
const HOUR = 3_600_000;

const HTML = "<html><head><title>502 Bad Gateway</title></head><body><h1>Bad Gateway</h1></body></html>";

export function apiGarbageTests(seed: number): void {
  describe("malformed API responses", () => {
    it("garbage from the booking service and from Google: clear errors, nothing deleted or cancelled, and one reconciliation converges afterwards", async () => {
      const r = random(seed + 9);
      const world = await startWorld({ therapists: 2, seed: seed + 9, configure: noGrace });
      removeWhenPassed(world.dir);
      let proxy: GarbleProxy | undefined;
      let running: RunningApp | undefined;
      try {
        proxy = await startGarbleProxy(world.google.rootUrl);
        const px = proxy;
        running = await startApp(world, "garbage daemon", {
          oneShot: true,
          edit: (c) => {
            c.google.api_root = px.url;
          },
          engine: { baseMs: 100, maxAttempts: 4 },
        });
        const { app, log } = running;
        const b = world.booking;
        const g = world.google;
        const ids: string[] = [];
        for (let i = 0; i < 12; i++) {
          const start = new Date(Date.now() + (2 + i) * DAY);
          start.setUTCHours(8 + (i % 9), 0, 0, 0);
          ids.push(String(b.create({ therapist_id: `th_${1 + (i % 2)}`, start_time: start.toISOString() }).id));
        }
        expect((await app.reconcile()).ok).toBe(true);
        for (const t of world.therapists) await app.poller.poll(t);
        expect(stateProblems(world)).toEqual([]);
        const deletesBefore = g.counters.deletes;
        const failure = (p: Promise<unknown>) =>
          p.then(
            () => "no error",
            (e: unknown) => String((e as Error).message),
          );

        // ---- the booking service ----
        const LIST = { method: "GET", path: "/v1/appointments" };
        const listCases: [string, RegExp][] = [
          [HTML, /invalid_response: response body is not JSON/],
          ['{"data":[{"id":"apt_', /invalid_response: response body is not JSON/],
          [r.bytes(300).toString("latin1"), /invalid_response: response body is not JSON/],
          ["", /invalid_response: response body is not JSON/],
          ['{"data":"nope","meta":{}}', /invalid_response: unexpected response shape: data/],
          ['{"error":{"code":"internal_error","message":"boom"}}', /invalid_response: unexpected response shape/],
          ['{"data":[{"id":5,"start_time":[]}]}', /invalid_response: unexpected response shape/],
          ["null", /invalid_response: unexpected response shape/],
        ];
        for (const [body, expected] of listCases) {
          b.faults.malformedNext(1, { body, match: LIST });
          expect(await failure(app.reconcile()), body.slice(0, 60)).toMatch(expected);
        }
        // A well-formed but empty listing, and one of bare ids: every managed event looks orphaned. The
        // mass-deletion guard holds the run; nothing is deleted.
        const meta = { page: 1, per_page: 100, total: 0, total_pages: 1 };
        for (const body of [
          JSON.stringify({ data: [], meta }),
          JSON.stringify({ data: ids.slice(0, 2).map((id) => ({ id })), meta: { ...meta, total: 2 } }),
        ]) {
          b.faults.malformedNext(1, { body, match: LIST });
          const report = await app.reconcile();
          expect(report.guard.tripped, body.slice(0, 60)).toBe(true);
          expect(report.ok).toBe(false);
        }
        expect(log.find((l) => String(l.msg).startsWith("mass-deletion guard"))).toBeDefined();

        // A webhook's follow-up read answered with garbage: the sync fails with the reason and is retried.
        const moved = new Date(Date.now() + 30 * DAY);
        moved.setUTCHours(15, 0, 0, 0);
        b.move(ids[1]!, moved);
        b.faults.malformedNext(2, { body: HTML, match: { method: "GET", path: `/v1/appointments/${ids[1]}` } });
        const outcome = await app.engine.syncAppointment(ids[1]!, {
          reason: "appointment.updated",
          priority: "webhook",
        });
        expect(outcome).toMatchObject({ ok: false, final: false });
        expect(String((outcome as { error: string }).error)).toMatch(/invalid_response: response body is not JSON/);
        expect(await eventually(() => stateProblems(world), 10_000)).toEqual([]);

        // A therapist's move whose PATCH was applied but answered with garbage: checked, not sent twice.
        const cal1 = world.calendarOf("th_1");
        const movedEvent = g.event(cal1, eventIdFor(ids[0]!))!;
        const newStart = Date.parse(String((movedEvent.start as { dateTime: string }).dateTime)) + 2 * HOUR;
        b.faults.malformedNext(1, { body: HTML, match: { method: "PATCH" } });
        g.userEdit(cal1, eventIdFor(ids[0]!), {
          start: { dateTime: new Date(newStart).toISOString() },
          end: { dateTime: new Date(newStart + HOUR).toISOString() },
        });
        await app.poller.poll("th_1");
        await app.engine.idle();
        expect(Date.parse(String(b.get(ids[0]!)?.start_time))).toBe(newStart);
        expect(b.requests.filter((q) => q.method === "PATCH")).toHaveLength(1);

        // ---- Google ----
        const LISTING = /^GET \/calendar\/v3\/calendars\/[^/]+\/events\?.*timeMin=/;
        const CHANGES = /^GET \/calendar\/v3\/calendars\/[^/]+\/events\?/;
        // Not JSON, or no object: read again (the answer was no answer), and the run goes on.
        for (const body of [
          HTML,
          '{"kind":"calendar#events","items":[{"id":"cb',
          r.bytes(200).toString("latin1"),
          "[]",
        ]) {
          proxy.garbleNext(1, LISTING, body);
          const report = await app.reconcile();
          expect(report.plan, `listing answered ${body.slice(0, 40)}`).toEqual([]);
          expect(report.ok).toBe(true);
        }
        expect(
          log.find((l) => l.reason === "invalidResponse" && l.msg === "Google call failed, retrying"),
        ).toBeDefined();
        // JSON of the wrong shape: that calendar is left alone this run, with the reason.
        for (const body of ['{"items":"x"}', '{"items":[42,null,"x"]}']) {
          proxy.garbleNext(1, LISTING, body);
          const report = await app.reconcile();
          expect(report.plan, `listing answered ${body}`).toEqual([]);
          expect(Object.values(report.calendarErrors)).toEqual([
            expect.stringMatching(/the answer's items are not a list of events/),
          ]);
        }
        // A valid but empty listing: each linked event is looked up before anything is decided about it.
        proxy.garbleNext(1, LISTING, '{"kind":"calendar#events","items":[]}');
        const emptyListing = await app.reconcile();
        expect(emptyListing.plan).toEqual([]);
        // The change feed answered with garbage: the poll fails, no write-back is made from it.
        for (const body of [
          HTML,
          '{"items":[{"id":"x","status":"cancelled"}]',
          '{"items":[{"status":"cancelled"}],"nextSyncToken":"forged"}',
        ]) {
          proxy.garbleNext(1, CHANGES, body);
          await app.poller.poll("th_2").catch(() => {});
          await app.poller.poll("th_2").catch(() => {});
          await app.engine.idle();
        }
        // Writes whose answers are garbage (the write happened): retried without duplicating anything.
        const created = new Date(Date.now() + 40 * DAY);
        created.setUTCHours(10, 0, 0, 0);
        const fresh = String(b.create({ therapist_id: "th_2", start_time: created.toISOString() }).id);
        proxy.garbleNext(1, /^POST \/calendar\/v3\/calendars\/[^/]+\/events/, HTML);
        await app.engine.syncAppointment(fresh, { reason: "appointment.created", priority: "webhook" });
        b.move(ids[3]!, new Date(created.getTime() + DAY));
        proxy.garbleNext(1, /^PATCH \/calendar\/v3\/calendars\/[^/]+\/events\//, '{"id":');
        await app.engine.syncAppointment(ids[3]!, { reason: "appointment.updated", priority: "webhook" });
        expect(await eventually(() => stateProblems(world), 10_000)).toEqual([]);
        expect(proxy.pending).toBe(0);

        // Sane answers again: one reconciliation converges; nothing was deleted or cancelled along the way.
        const final = await app.reconcile();
        expect(final.ok).toBe(true);
        expect(final.plan).toEqual([]);
        expect(stateProblems(world)).toEqual([]);
        expect(g.counters.deletes).toBe(deletesBefore);
        expect(b.requests.filter((q) => q.route.endsWith("/cancel"))).toEqual([]);
        expect(b.all().filter((a) => a.status !== "confirmed")).toEqual([]);
        console.log(
          `[chaos] api garbage: Google answers garbled ${proxy.garbled.length}, booking ${b.stats().malformed}`,
        );
      } finally {
        await running?.stop();
        await proxy?.close();
        await world.close();
      }
    });
  });
}
