// Therapists in a strict Google Calendar while both APIs misbehave (issue #14): a calendar wiped in one go is held by
// the write-back guard (at most its floor of cancellations reach the booking service) and put back whole by an
// administrator; deletions the booking service refuses, of events Google will not restore, end with one live event
// each and their cancel sent once, however often Google and the booking service fail in between.
import { describe, expect, it } from "vitest";
import { eventIdFor } from "../../src/calendar/ids.ts";
import { writebackHeld } from "../../src/cli/writeback-held.ts";
import type { ConfigInput } from "../../src/config/schema.ts";
import { startWorld, WORLD_WEBHOOK_SECRET, type World } from "../../src/simulator/world.ts";
import { type RunningApp, startApp } from "./app.ts";
import { removeWhenPassed } from "./dirs.ts";
import { eventually, explain, stateProblems } from "./expected.ts";
import { random } from "./random.ts";

const DAY = 86_400_000;
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/** A short grace period (the daemon runs in real time here) and frequent polls. */
const configure = (c: ConfigInput) => {
  c.sync = {
    ...c.sync,
    calendar_poll_seconds: 5,
    reconcile_cron: "0 0 1 1 *",
    writeback: { cancel_grace_seconds: 2, reschedule_grace_seconds: 2 },
  };
};

const cancels = (world: World) => world.booking.requests.filter((r) => r.route === "POST /v1/appointments/:id/cancel");
/** Cancels the booking service carried out (not those a fault answered before processing). */
const carriedOut = (world: World) => cancels(world).filter((r) => r.status !== undefined && r.status < 300);

function shuffle<T>(rnd: ReturnType<typeof random>, xs: T[]): T[] {
  for (let i = xs.length - 1; i > 0; i--) {
    const j = rnd.int(i + 1);
    [xs[i], xs[j]] = [xs[j]!, xs[i]!];
  }
  return xs;
}

async function mirrored(world: World, running: RunningApp, rnd: ReturnType<typeof random>, n: number) {
  const ids: string[] = [];
  for (let i = 0; i < n; i++) {
    const start = new Date(Date.now() + (1 + rnd.int(40)) * DAY);
    start.setUTCHours(7 + rnd.int(12), 0, 0, 0);
    const t = world.therapists[i % world.therapists.length]!;
    ids.push(String(world.booking.create({ therapist_id: t, start_time: start.toISOString() }, { force: true }).id));
  }
  expect(await eventually(() => stateProblems(world), 30_000)).toEqual([]);
  await running.app.reconcile(); // counts each calendar's events for the guard
  return ids;
}

export function therapistTests(seed: number): void {
  describe("therapists in a strict Google Calendar, with faults in both APIs", () => {
    it("a calendar wiped at once is held, not cancelled (at most the floor), and an administrator puts it back", async () => {
      const rnd = random(seed + 11);
      const world = await startWorld({ therapists: 3, seed: seed + 11, webhookTimeScale: 1 / 6000, configure });
      removeWhenPassed(world.dir);
      let running: RunningApp | undefined;
      try {
        running = await startApp(world, "bulk deletion daemon");
        world.booking.addWebhookEndpoint({
          url: `${running.app.http!.url}${world.config.webhooks.path}`,
          secret: WORLD_WEBHOOK_SECRET,
          events: ["*"],
        });
        const ids = await mirrored(world, running, rnd, 36);
        const victim = world.therapists[rnd.int(world.therapists.length)]!;
        const cal = world.calendarOf(victim);
        const wiped = ids.filter((id) => world.booking.get(id)?.therapist_id === victim);
        // Both APIs misbehave while the calendar is wiped, in random order, over about a second.
        world.google.faults.errorRate = 0.1;
        world.booking.faults.errorRate = 0.1;
        for (const id of shuffle(rnd, [...wiped])) {
          world.google.userDelete(cal, eventIdFor(id));
          await sleep(rnd.int(60));
        }
        const guard = world.config.sync.writeback_guard;
        const held = await eventually(async () => {
          const n = (await running!.app.sync.guard.held(victim)).length + carriedOut(world).length;
          return n >= wiped.length ? [] : [`${n} of ${wiped.length} deletions held or sent`];
        }, 60_000);
        expect(held).toEqual([]);
        world.google.faults.errorRate = 0;
        world.booking.faults.errorRate = 0;
        // Nothing beyond the guard's floor reached the booking service; every other appointment is untouched.
        expect(carriedOut(world).length).toBeLessThanOrEqual(guard.floor);
        const sent = new Set(carriedOut(world).map((r) => /apt_[a-z0-9]+/.exec(r.path)?.[0]));
        const heldIds = (await running.app.sync.guard.held(victim)).map((h) => h.appointmentId);
        expect(heldIds.length + sent.size).toBe(wiped.length);
        for (const id of ids) {
          if (!sent.has(id)) expect(world.booking.get(id)?.status, id).toBe("confirmed");
        }

        // The administrator puts them back: every held appointment has its one event again, nothing more is sent.
        const restored = await writebackHeld(running.app, { therapistId: victim, decision: "restore" });
        expect(restored.decided.filter((d) => !d.ok)).toEqual([]);
        const problems = await eventually(() => stateProblems(world), 30_000);
        expect(
          problems,
          explain(world, () => running!.log.lines.map((l) => JSON.stringify(l)), problems),
        ).toEqual([]);
        expect(carriedOut(world).length).toBe(sent.size);
        expect(await running.app.sync.guard.held()).toEqual([]);
        console.log(
          `[chaos] bulk deletion: ${wiped.length} events of ${victim} wiped, ${sent.size} cancels sent (floor ${guard.floor}), ${heldIds.length} held and restored`,
        );
      } finally {
        await running?.stop();
        await world.close();
      }
    });

    it("refused deletions of events Google will not restore end with one live event each, the cancel sent once", async () => {
      const rnd = random(seed + 12);
      const world = await startWorld({ therapists: 2, seed: seed + 12, webhookTimeScale: 1 / 6000, configure });
      removeWhenPassed(world.dir);
      let running: RunningApp | undefined;
      try {
        running = await startApp(world, "refused restore daemon");
        world.booking.addWebhookEndpoint({
          url: `${running.app.http!.url}${world.config.webhooks.path}`,
          secret: WORLD_WEBHOOK_SECRET,
          events: ["*"],
        });
        const ids = await mirrored(world, running, rnd, 24);
        const deleted = shuffle(rnd, [...ids]).slice(0, 3); // under the guard's floor: each is written back
        for (const id of deleted) {
          world.booking.faults.refuseNext(1000, "past_booking", { match: { path: `/v1/appointments/${id}/cancel` } });
        }
        world.google.faults.errorRate = 0.15;
        world.booking.faults.errorRate = 0.1;
        for (const id of deleted) {
          const t = String(world.booking.get(id)!.therapist_id);
          world.google.userDelete(world.calendarOf(t), eventIdFor(id));
        }
        await sleep(15_000); // grace periods, refusals, restores under faults, retries
        world.google.faults.errorRate = 0;
        world.booking.faults.errorRate = 0;
        await running.app.reconcile();
        const problems = await eventually(() => stateProblems(world), 60_000);
        expect(
          problems,
          explain(world, () => running!.log.lines.map((l) => JSON.stringify(l)), problems),
        ).toEqual([]);
        for (const id of deleted) {
          expect(world.booking.get(id)?.status, id).toBe("confirmed");
          const answered = cancels(world).filter((r) => r.path.includes(id) && r.status === 422);
          expect(answered.length, id).toBe(1);
        }
        console.log(
          `[chaos] refused restore: ${deleted.length} deletions refused, ${cancels(world).length} cancel requests (${cancels(world).filter((r) => r.status !== 422).length} failed by faults)`,
        );
      } finally {
        await running?.stop();
        await world.close();
      }
    });
  });
}
