// Injected faults in both APIs while bookings and therapists keep changing things: 10% 5xx on each side, latency and
// booking timeouts, 429 storms, Google rateLimitExceeded bursts, lost responses, token-endpoint errors and sync tokens
// invalidated twice. The daemon (in process, with its own timers) must stay up; once the faults stop, one
// reconciliation must bring every calendar to the booking service's state, with nothing duplicated and no
// cancellation the therapist did not ask for.
import { describe, expect, it } from "vitest";
import { eventIdFor } from "../../src/calendar/ids.ts";
import { startWorld, WORLD_WEBHOOK_SECRET, type World } from "../../src/simulator/world.ts";
import { type RunningApp, startApp, withOAuthTherapist } from "./app.ts";
import { removeWhenPassed } from "./dirs.ts";
import { appointmentIdOfEvent, eventually, explain, liveEvents, stateProblems } from "./expected.ts";
import { random } from "./random.ts";

const DAY = 86_400_000;
const HOUR = 3_600_000;
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

function slot(rnd: ReturnType<typeof random>): string {
  const d = new Date(Date.now() + (1 + rnd.int(40)) * DAY);
  d.setUTCHours(7 + rnd.int(12), 0, 0, 0);
  return d.toISOString();
}

const iso = (ms: number) => new Date(ms).toISOString();
const startOf = (ev: Record<string, unknown>) => Date.parse(String((ev.start as { dateTime: string }).dateTime));

/** The booking simulator's appointment ids behind event ids, for reading the emulator's request log. */
/** Event ids of every appointment, its later generations included (used where Google refused to restore one). */
function appointmentsByEventId(world: World): Map<string, string> {
  return new Map(
    world.booking.all().flatMap((a) => [0, 1, 2, 3].map((g) => [eventIdFor(String(a.id), g), String(a.id)] as const)),
  );
}

export function faultTests(seed: number): void {
  describe("faults injected into both APIs", () => {
    it("5xx, latency, timeouts, 429 storms, rateLimitExceeded bursts, lost responses, invalidated sync tokens: the daemon stays up, then one reconciliation converges with nothing duplicated and no cancellation the therapist did not make", async () => {
      const rnd = random(seed + 1);
      const world = await startWorld({
        therapists: 4,
        webhookTimeScale: 1 / 6000,
        seed: seed + 1,
        rateLimit: { limit: 10_000, windowMs: 1000 },
        configure: (c) => {
          c.booking = { ...c.booking, timeout_ms: 1500 };
          // Its own timers run (polling every 5 s); the cron is set far away so that the test decides when the
          // reconciliation after the faults runs.
          c.sync = {
            ...c.sync,
            calendar_poll_seconds: 5,
            reconcile_cron: "0 0 1 1 *",
            // Write-backs at once: the grace period has tests of its own.
            writeback: { cancel_grace_seconds: 0, reschedule_grace_seconds: 0 },
            // The therapists here make dozens of single changes on purpose; the guard that holds a burst of them
            // has tests of its own (test/sync/safety.test.ts, therapists.ts), so here every change is written back.
            writeback_guard: { window_minutes: 60, max_ratio: 1, floor: 1000 },
          };
        },
      });
      removeWhenPassed(world.dir);
      let running: RunningApp | undefined;
      try {
        for (let i = 0; i < 40; i++) {
          world.booking.create({ therapist_id: rnd.pick(world.therapists), start_time: slot(rnd) });
        }
        // th_4 uses OAuth (a client secret and a refresh token), the others the service account. The engine's
        // retries start at 0.5 s instead of 5 s to keep the run short.
        running = await startApp(world, "faults daemon", {
          edit: (c) => withOAuthTherapist(world, c, "th_4"),
          engine: { baseMs: 500 },
        });
        const { app } = running;
        expect(await eventually(() => stateProblems(world), 30_000)).toEqual([]);
        const endpoint = world.booking.addWebhookEndpoint({
          url: `${app.http!.url}${world.config.webhooks.path}`,
          secret: WORLD_WEBHOOK_SECRET,
          events: ["*"],
        });
        const bookingRequestsBefore = world.booking.requests.length;
        const googleRequestsBefore = world.google.requestLog.length;

        // ---- the fault phase ----
        const unhealthy: string[] = [];
        let faulting = true;
        const health = (async () => {
          while (faulting) {
            try {
              const res = await fetch(`${app.http!.url}/healthz`, { signal: AbortSignal.timeout(2000) });
              if (res.status !== 200) unhealthy.push(`healthz ${res.status}`);
              await res.body?.cancel();
            } catch (err) {
              unhealthy.push(`healthz: ${(err as Error).message}`);
            }
            await sleep(500);
          }
        })();

        const therapistCancelled = new Set<string>();
        const therapistMoved = new Set<string>();
        const bookingCancelled = new Set<string>();
        const activity = async (untilMs: number) => {
          while (Date.now() < untilMs) {
            const roll = rnd.next();
            const confirmed = world.booking.all().filter((a) => a.status === "confirmed");
            const live = liveEvents(world);
            if (roll < 0.3) {
              world.booking.create({ therapist_id: rnd.pick(world.therapists), start_time: slot(rnd) });
            } else if (roll < 0.45 && confirmed.length > 0) {
              world.booking.move(String(rnd.pick(confirmed).id), slot(rnd));
            } else if (roll < 0.52 && bookingCancelled.size < 5 && confirmed.length > 0) {
              const id = String(rnd.pick(confirmed).id);
              bookingCancelled.add(id);
              world.booking.cancel(id, "customer cancelled");
            } else if (roll < 0.75 && live.length > 0) {
              // The therapist drags an event 1 to 3 hours later.
              const { therapistId, event } = rnd.pick(live);
              const start = startOf(event) + (1 + rnd.int(3)) * HOUR;
              therapistMoved.add(appointmentIdOfEvent(event)!);
              world.google.userEdit(world.calendarOf(therapistId), String(event.id), {
                start: { dateTime: iso(start) },
                end: { dateTime: iso(start + HOUR) },
              });
            } else if (roll < 0.8 && therapistCancelled.size < 3 && live.length > 0) {
              const { therapistId, event } = rnd.pick(live);
              therapistCancelled.add(appointmentIdOfEvent(event)!);
              world.google.userDelete(world.calendarOf(therapistId), String(event.id));
            }
            await sleep(150);
          }
        };

        const b = world.booking;
        const g = world.google;
        const t0 = Date.now();
        const at = (ms: number) => sleep(Math.max(0, t0 + ms - Date.now()));
        const started: Promise<unknown>[] = [];
        const pollAll = () => {
          for (const t of world.therapists) started.push(app.poller.poll(t).catch((e: unknown) => e));
        };
        const reconcileNow = () => started.push(app.reconcile().catch((e: unknown) => e));
        // Booking traffic right when a fault is set, so that each fault meets requests: the follow-up read of an
        // appointment.updated webhook, for a few appointments.
        // Appointments made while the webhook endpoint is off: kept out of these reads, so that only a reconciliation
        // can bring them over.
        const unseen: string[] = [];
        const readSome = (n: number) => {
          const confirmed = b.all().filter((a) => a.status === "confirmed" && !unseen.includes(String(a.id)));
          for (let i = 0; i < n; i++) {
            const id = String(rnd.pick(confirmed).id);
            started.push(app.engine.syncAppointment(id, { reason: "appointment.updated", priority: "webhook" }));
          }
        };
        const changes = activity(t0 + 12_000);
        // All along: 10% of the requests on each side fail with 5xx, and every answer is a little late.
        b.faults.errorRate = 0.1;
        b.faults.latencyMs = 20;
        g.faults.errorRate = 0.1;
        g.faults.latencyMs = 20;
        // Google's rate limits, in bursts, and answers lost after the request was carried out.
        await at(1000);
        // The 10% error rate meets only the requests of the moment (a quiet phase may send few): two 503s for sure.
        b.faults.failNext(2, 503);
        readSome(2);
        g.faults.next(2, { status: 503, reason: "backendError" });
        g.faults.next(6, { status: 403, reason: "rateLimitExceeded" });
        g.faults.next(4, { status: 429, reason: "rateLimitExceeded", retryAfter: 1 });
        pollAll();
        await at(2500);
        g.faults.dropResponseNext(3);
        reconcileNow();
        pollAll();
        // A 429 storm at the booking service: two requests a second for two seconds, then bare 429s. Every sync token
        // issued so far is invalidated.
        await at(4000);
        b.rateLimit.limit = 2;
        readSome(3);
        g.invalidateSyncTokens();
        pollAll();
        await at(5000);
        b.faults.failNext(6, 429);
        readSome(2);
        await at(6000);
        b.rateLimit.limit = 10_000;
        // Every booking request times out (timeout_ms 1500) for 1.5 s; then answers lost after the change was made.
        await at(7000);
        b.faults.latencyMs = 2000;
        readSome(2);
        reconcileNow();
        // Until a request has met it: after the 429 storm the daemon may first wait out the rate-limit window.
        const timedOut = () => running!.log.find((l) => l.outcome === "timeout") !== undefined;
        await at(8500);
        for (let i = 0; !timedOut() && i < 80; i++) {
          if (i % 10 === 9) readSome(1);
          await sleep(500);
        }
        b.faults.latencyMs = 20;
        b.faults.dropResponseNext(4);
        readSome(3);
        // Access tokens revoked early while the token endpoint fails; Google 500s and per-user limits.
        await at(9000);
        g.expireAccessTokens();
        g.faults.next(2, { target: "token", status: 503, reason: "temporarily_unavailable" });
        g.faults.next(3, { status: 403, reason: "userRateLimitExceeded" });
        g.faults.next(3, { status: 500, reason: "backendError" });
        pollAll();
        // Booking 502s; the sync tokens invalidated again.
        await at(9500);
        b.faults.failNext(5, 502);
        readSome(2);
        reconcileNow();
        await at(10_000);
        g.invalidateSyncTokens();
        pollAll();
        // Webhooks lost: the endpoint is off for the last two seconds, so what changes then (at least two new
        // appointments and a move) reaches calbridge only through the reconciliation.
        b.setWebhookEndpointEnabled(endpoint.id, false);
        for (const i of [0, 1])
          unseen.push(String(b.create({ therapist_id: `th_${1 + i}`, start_time: slot(rnd) }).id));
        b.move(
          String(rnd.pick(b.all().filter((a) => a.status === "confirmed" && !unseen.includes(String(a.id)))).id),
          slot(rnd),
        );
        await changes;
        b.setWebhookEndpointEnabled(endpoint.id, true);

        // Planned faults meet requests whenever they come (after the 429 storm the daemon waits out the rate-limit
        // window the headers name, some 20 s): they are used up before the faults stop.
        for (let i = 0; (b.faults.planned > 0 || g.faults.pending > 0) && i < 120; i++) {
          if (i % 10 === 9) {
            readSome(1);
            pollAll();
          }
          await sleep(500);
        }
        expect([b.faults.planned, g.faults.pending]).toEqual([0, 0]);

        // ---- the faults stop ----
        b.faults.reset();
        g.faults.reset();
        // What was started under the faults finishes first (it may take a while: retries back off).
        await Promise.all(started);
        await b.webhooksIdle();
        faulting = false;
        await health;
        expect(unhealthy).toEqual([]);

        // The faults were real: both sides answered errors, the daemon saw a 410 and read the calendar again.
        const bookingStatuses = b.requests.slice(bookingRequestsBefore).map((r) => r.status ?? r.outcome);
        const googleStatuses = g.requestLog.slice(googleRequestsBefore).map((r) => (r.dropped ? "dropped" : r.status));
        for (const s of [503, 429, 502, "dropped"]) expect(bookingStatuses).toContain(s);
        for (const s of [503, 403, 429, 410, "dropped"]) expect(googleStatuses).toContain(s);
        expect(running.log.find((l) => l.outcome === "timeout")).toBeDefined();
        expect(running.log.find((l) => String(l.msg).includes("sync token expired"))).toBeDefined();

        // One reconciliation converges, from a state the webhooks alone did not bring over. The two appointments made
        // while webhooks were off are created by a reconciliation: this one, unless one started under the faults
        // (it may wait out a rate-limit window past that moment) listed them already.
        const shown = new Set(liveEvents(world).map(({ event }) => appointmentIdOfEvent(event)));
        const missing = unseen.filter((id) => !shown.has(id));
        // Held only while an appointment made with webhooks off is still missing: a run started under the faults may
        // have brought everything over already (CI met it once), and the state is then right, not a failure.
        if (missing.length > 0) expect(stateProblems(world).length).toBeGreaterThan(0);
        const report = await app.reconcile();
        await app.engine.idle();
        expect(report.guard.tripped).toBe(false);
        expect(report.failed).toBe(0);
        expect(report.counts.create ?? 0).toBeGreaterThanOrEqual(missing.length);
        const problems = stateProblems(world);
        expect(
          problems,
          explain(world, () => running!.log.raw, problems),
        ).toEqual([]);

        // Nothing cancelled in the booking service but what the therapist deleted; nothing moved but what they moved.
        const byEvent = appointmentsByEventId(world);
        const cancelRequests = b.requests
          .filter((r) => r.route === "POST /v1/appointments/:id/cancel")
          .map((r) => decodeURIComponent(r.path.split("/")[3]!));
        const unasked = cancelRequests.filter((id) => !therapistCancelled.has(id));
        expect(
          unasked,
          explain(world, () => running!.log.raw, [], unasked),
        ).toEqual([]);
        const patchRequests = b.requests
          .filter((r) => r.route === "PATCH /v1/appointments/:id")
          .map((r) => decodeURIComponent(r.path.split("/")[3]!));
        const unmoved = patchRequests.filter((id) => !therapistMoved.has(id));
        expect(
          unmoved,
          explain(world, () => running!.log.raw, [], unmoved),
        ).toEqual([]);
        // Every event calbridge deleted belongs to an appointment that is cancelled now.
        const deleted = g.requestLog
          .filter((r) => r.method === "DELETE" && r.path.includes("/events/"))
          .map((r) => byEvent.get(decodeURIComponent(r.path.split("/").at(-1)!)));
        for (const id of deleted) expect(world.booking.get(id!)?.status, `deleted event of ${id}`).toBe("cancelled");

        // And it stays converged: the next run plans nothing.
        const again = await app.reconcile();
        await app.engine.idle();
        expect(again.plan).toEqual([]);
        expect(stateProblems(world)).toEqual([]);
        console.log(
          `[chaos] faults: seed ${seed}, ${b.requests.length - bookingRequestsBefore} booking requests ` +
            `(${bookingStatuses.filter((s) => s !== 200 && s !== 201).length} failed), ` +
            `${g.requestLog.length - googleRequestsBefore} Google requests (${googleStatuses.filter((s) => s !== 200 && s !== 204).length} failed); ` +
            `therapist moved ${therapistMoved.size}, deleted ${therapistCancelled.size}; booking cancelled ${bookingCancelled.size}; ` +
            `final reconcile ${report.durationMs} ms, plan ${JSON.stringify(report.counts)}`,
        );
      } finally {
        await running?.stop();
        await world.close();
      }
    });
  });
}
