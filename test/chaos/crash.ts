// Crash safety (principle 6): the daemon runs as a child process and is killed with SIGKILL at random moments during
// a burst of 1,000 webhooks, then started again on the same SQLite store. The booking simulator delivers every
// webhook and retries what was not answered 2xx. Reconciliation is kept from listing the booking service for the
// whole run, so whatever reaches the calendars came through the webhook inbox.
import { describe, expect, it } from "vitest";
import type { Delivery } from "../../src/simulator/booking/index.ts";
import { startWorld, WORLD_WEBHOOK_SECRET, type World } from "../../src/simulator/world.ts";
import { openStore } from "../../src/store/store.ts";
import { type Daemon, daemonFor } from "./daemon.ts";
import { removeWhenPassed } from "./dirs.ts";
import { eventually, explain, liveEvents, stateProblems } from "./expected.ts";
import { random } from "./random.ts";

const DAY = 86_400_000;
const BURST = 1_000;

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/** A random whole hour between 07:00 and 20:00 UTC, 1 to 60 days ahead. */
function slot(rnd: ReturnType<typeof random>): string {
  const d = new Date(Date.now() + (1 + rnd.int(60)) * DAY);
  d.setUTCHours(7 + rnd.int(13), 0, 0, 0);
  return d.toISOString();
}

/** Emits at least `total` booking events (creates, moves, cancels; a new customer adds customer.created) over about `durationMs`, in small batches. */
async function burst(world: World, rnd: ReturnType<typeof random>, total: number, durationMs: number) {
  const confirmed: string[] = [];
  const ticks = Math.ceil(durationMs / 100);
  const perTick = Math.ceil(total / ticks);
  while (world.booking.events.length < total) {
    for (let i = 0; i < perTick && world.booking.events.length < total; i++) {
      const roll = rnd.next();
      if (confirmed.length < 20 || roll < 0.6) {
        const a = world.booking.create({ therapist_id: rnd.pick(world.therapists), start_time: slot(rnd) });
        confirmed.push(String(a.id));
      } else if (roll < 0.85) {
        world.booking.move(rnd.pick(confirmed), slot(rnd));
      } else {
        const [id] = confirmed.splice(rnd.int(confirmed.length), 1);
        world.booking.cancel(id!, "customer cancelled");
      }
    }
    await sleep(100);
  }
}

/** Some attempt of the delivery was answered 2xx. */
const isAcknowledged = (d: Delivery) =>
  d.attempts.some((a) => a.status !== undefined && a.status >= 200 && a.status < 300);

/** Resolves in the loop turn that sees `count()` grow, or after `maxMs`. */
async function nextAcknowledgment(count: () => number, maxMs: number): Promise<void> {
  const before = count();
  const until = Date.now() + maxMs;
  while (count() === before && Date.now() < until) await new Promise((r) => setImmediate(r));
}

async function status(d: Daemon): Promise<{ queues: { sync: number; webhooks: number } } | undefined> {
  try {
    const res = await fetch(`${d.adminUrl}/status`, { headers: { accept: "application/json" } });
    return (await res.json()) as { queues: { sync: number; webhooks: number } };
  } catch {
    return undefined;
  }
}

export function crashTests(seed: number): void {
  describe("crash safety (daemon as a child process)", () => {
    it("SIGKILL at random moments during 1,000 webhooks: every acknowledged event is applied once, no event is duplicated", async () => {
      const rnd = random(seed);
      // Retry delays scaled 1/2000: a delivery that met a dead daemon is tried again after 30 ms, 150 ms, 900 ms,
      // 3.6 s, 14.4 s and 43.2 s (a minute of tries), so the sender loses nothing even when every restart takes
      // several seconds (a loaded machine: a start there has taken 7 s, and 1/6000 then ran out of tries and the
      // simulated booking service disabled the endpoint, as the real one does after the last retry).
      const world = await startWorld({ therapists: 4, webhookTimeScale: 1 / 2000, seed });
      removeWhenPassed(world.dir);
      let daemon: Daemon | undefined;
      try {
        // The reconciliation may not list the booking service: only the inbox can bring appointments over.
        world.booking.faults.failNext(1e9, 503, { method: "GET", path: "/v1/appointments" });
        daemon = await daemonFor(world, { name: "crash daemon" });
        await daemon.start();
        world.booking.addWebhookEndpoint({ url: daemon.webhookUrl, secret: WORLD_WEBHOOK_SECRET, events: ["*"] });

        const t0 = Date.now();
        const phases: string[] = [];
        const phase = (name: string) => phases.push(`${name} ${((Date.now() - t0) / 1000).toFixed(1)}s`);
        const emitting = burst(world, rnd, BURST, 12_000);
        let done = false;
        void emitting.finally(() => (done = true));
        const kills: { at: number; eventsSoFar: number; acknowledged: number }[] = [];
        const acknowledged = () => world.booking.deliveries.filter(isAcknowledged).length;
        const killCount = 3 + rnd.int(3); // 3 to 5
        for (let k = 0; k < killCount; k++) {
          // A random moment while webhooks are still arriving (or, past the burst, while they are processed)...
          await sleep(300 + rnd.int(done ? 800 : 2200));
          // ...then the next acknowledgment: applying that event needs answers from the simulators in this process,
          // which cannot come before the kill, so the kill lands while an acknowledged event is still unapplied
          // (the processor keeps up with the burst, so a kill at a plain random moment often finds nothing to replay).
          if (!done) await nextAcknowledgment(acknowledged, 2_000);
          await daemon.kill9();
          kills.push({ at: Date.now(), eventsSoFar: world.booking.events.length, acknowledged: acknowledged() });
          await sleep(rnd.int(400));
          await daemon.start();
        }
        await emitting;
        phase("burst+kills");
        expect(kills.length).toBeGreaterThanOrEqual(3);
        // At least the first kills hit the daemon while the sender was still sending.
        expect(kills[0]!.eventsSoFar).toBeLessThan(BURST);

        // The sender's side settles: every delivery answered 2xx at last, none given up, the endpoint still enabled.
        const pending = await eventually(
          () => world.booking.deliveries.filter((d) => d.state === "pending").map((d) => d.id),
          120_000,
        );
        expect(pending).toEqual([]);
        phase("deliveries settled");
        const events = world.booking.events.length;
        expect(events).toBeGreaterThanOrEqual(BURST);
        const undelivered = world.booking.deliveries.filter((d) => d.state !== "delivered");
        expect(undelivered.map((d) => `${d.eventId}: ${d.state} ${JSON.stringify(d.attempts.at(-1))}`)).toEqual([]);
        expect(world.booking.webhookEndpoints()[0]?.enabled).toBe(true);
        const ackedEvents = new Set(world.booking.deliveries.filter(isAcknowledged).map((d) => d.eventId!));
        expect(ackedEvents.size).toBe(events);
        // Deliveries retried across the kills: the same event acknowledged more than once is possible and harmless.
        const retried = world.booking.deliveries.filter((d) => d.attempts.length > 1).length;

        // The daemon's side: every acknowledged event applied, each appointment exactly once in the calendars.
        const problems = await eventually(async () => {
          const s = await status(daemon!);
          const busy = !s || s.queues.webhooks > 0 || s.queues.sync > 0 ? ["daemon still busy"] : [];
          return [...busy, ...stateProblems(world)];
        }, 90_000);
        expect(
          problems.slice(0, 20),
          explain(world, () => daemon!.lines(), problems),
        ).toEqual([]);
        phase("calendars converged");
        const confirmed = world.booking.all().filter((a) => a.status === "confirmed").length;
        const replays = daemon
          .lines()
          .filter((l) => l.includes("replaying webhook events left in the inbox"))
          .map((l) => (JSON.parse(l) as { count: number }).count);
        // The kills caught acknowledged events not yet processed: the restarts replayed them from the inbox.
        expect(replays.length).toBeGreaterThan(0);
        expect(liveEvents(world)).toHaveLength(confirmed);
        expect(daemon.unexpectedExits).toEqual([]);

        // An orderly stop, then the store: nothing left in the inbox, nothing dead-lettered, every event remembered.
        const stopping = Date.now();
        expect(await daemon.stop()).toBe(0);
        // Within a container's grace period (docker stop waits 10 s before SIGKILL).
        expect(Date.now() - stopping).toBeLessThan(10_000);
        const store = await openStore(world.config.store.url);
        try {
          const left: string[] = [];
          for await (const [id, record] of store.table<object>("inbox").entries())
            if (!("doneAt" in record)) left.push(id);
          expect(left).toEqual([]);
          const dead: string[] = [];
          for await (const [key, value] of store.table("dead").entries()) dead.push(`${key}: ${JSON.stringify(value)}`);
          expect(dead).toEqual([]);
          // Every acknowledged event is remembered as done (a redelivery would be a duplicate).
          const marks = await store.table<object>("inbox").getMany([...ackedEvents]);
          expect(marks.filter((m) => m === undefined || !("doneAt" in m))).toHaveLength(0);
        } finally {
          await store.close();
        }
        console.log(
          `[chaos] crash: seed ${seed}, ${kills.length} kills at ${kills.map((k) => `${k.eventsSoFar} events/${k.acknowledged} acked`).join(", ")}; ` +
            `${world.booking.deliveries.reduce((n, d) => n + d.attempts.length, 0)} delivery attempts, ${retried} deliveries retried; ` +
            `${confirmed} confirmed appointments mirrored, ${world.google.writes} calendar writes; ` +
            `inbox replays at restart ${JSON.stringify(replays)}; ${phases.join(", ")}`,
        );
      } finally {
        await daemon?.kill9();
        await world.close();
      }
    });
  });
}
