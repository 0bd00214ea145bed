// The engine as the one owner of sync retries, through the real daemon on the manual clock: a failing webhook ends as
// exactly one dead letter under one policy; a calendar that is unavailable for a while loses nothing.
import { afterEach, describe, expect, it } from "vitest";
import { eventIdFor } from "../../src/calendar/ids.ts";
import { ManualClock } from "../../src/clock.ts";
import { DAY, daemonHarness, type Harness, iso } from "./support.ts";

let h: Harness | undefined;
afterEach(async () => {
  await h?.close();
  h = undefined;
});

/** A daemon on the manual clock that receives the simulator's webhooks. */
function daemon(clock: ManualClock, retry: { maxAttempts?: number; baseMs?: number; unavailableGraceMs?: number }) {
  return daemonHarness({ therapists: 2, clock, engine: retry });
}

/** Moves the manual clock on in steps, letting real I/O (HTTP to the simulators) finish between them. */
async function pass(x: Harness, clock: ManualClock, ms: number, step = 1_000): Promise<void> {
  for (let t = 0; t < ms; t += step) {
    await clock.advance(Math.min(step, ms - t));
    await x.world.booking.webhooksIdle();
    await x.app.engine.idle();
  }
}

const deadLetters = async (x: Harness) => {
  const out: [string, Record<string, unknown>][] = [];
  for await (const e of x.app.store.table<Record<string, unknown>>("dead").entries()) out.push(e);
  return out;
};

describe("one owner of sync retries", () => {
  it("a webhook whose sync keeps failing is retried under one policy and ends as exactly one dead letter", async () => {
    const clock = new ManualClock(Date.now());
    h = await daemon(clock, { maxAttempts: 4, baseMs: 5_000 });
    const cal = h.world.calendarOf("th_1");
    // Google refuses every insert into th_1's calendar (403 forbidden: an answer, not an outage).
    h.world.google.faults.next(1000, {
      status: 403,
      reason: "forbidden",
      match: /POST .*th_1%40clinic\.test\/events$/,
    });
    const appt = h.world.booking.create(
      { therapist_id: "th_1", start_time: iso(clock.now() + 3 * DAY) },
      { force: true },
    );
    const id = String(appt.id);
    await pass(h, clock, 10 * 60_000, 5_000);
    await h.app.processor.idle();

    const inserts = h.world.google.requestLog.filter((r) => r.method === "POST" && r.path.endsWith("/events"));
    expect(inserts).toHaveLength(4);
    const dead = await deadLetters(h);
    expect(dead.map(([k]) => k)).toEqual([`appt:${id}`]);
    expect(dead[0]![1]).toMatchObject({
      attempts: 4,
      final: true,
      reason: expect.stringMatching(/appointment\.created/),
    });
    expect(String(dead[0]![1].error)).toMatch(/403/);
    expect(h.app.sync.dead.count).toBe(1);
    // The webhook itself is done (the dead letter is the engine's one record of the failure).
    const created = h.world.booking.events.find((e) => e.type === "appointment.created")!;
    expect(await h.app.inbox.get(String(created.id))).toBeUndefined();
    expect(h.world.google.event(cal, eventIdFor(id))).toBeUndefined();
    // A later success clears it.
    h.world.google.faults.reset();
    await h.app.reconcile();
    expect(h.world.google.event(cal, eventIdFor(id))?.status).toBe("confirmed");
    expect(await deadLetters(h)).toEqual([]);
  });

  it("a therapist whose calendar is unreachable for a few minutes loses no appointment to the dead letters", async () => {
    const clock = new ManualClock(Date.now());
    h = await daemon(clock, { maxAttempts: 2, baseMs: 5_000 });
    const cal = h.world.calendarOf("th_1");
    // Domain-wide delegation for th_1 is withdrawn: every token request for that subject fails.
    h.world.google.revokeTokens(cal);
    const ids = [1, 2, 3].map((i) =>
      String(
        h!.world.booking.create({ therapist_id: "th_1", start_time: iso(clock.now() + i * DAY) }, { force: true }).id,
      ),
    );
    const other = h.world.booking.create({ therapist_id: "th_2", start_time: iso(clock.now() + DAY) }, { force: true });
    await pass(h, clock, 8 * 60_000, 5_000);
    // Far more time than two attempts take; none of them is a dead letter, th_2 is unaffected.
    expect(await deadLetters(h)).toEqual([]);
    expect(h.world.google.event(h.world.calendarOf("th_2"), eventIdFor(String(other.id)))?.status).toBe("confirmed");
    for (const id of ids) expect(h.world.google.event(cal, eventIdFor(id))).toBeUndefined();

    // Access comes back; within the credential probe interval (10 min) and a retry, every appointment appears.
    h.world.google.restoreAccess(cal);
    await pass(h, clock, 16 * 60_000, 5_000);
    for (const id of ids) expect(h.world.google.event(cal, eventIdFor(id))?.status).toBe("confirmed");
    expect(await deadLetters(h)).toEqual([]);
    await h.app.processor.idle();
    for (const e of h.world.booking.events) expect(await h.app.inbox.get(String(e.id))).toBeUndefined();
  });

  it("a calendar unavailable for longer than the grace period ends in one dead letter per appointment", async () => {
    const clock = new ManualClock(Date.now());
    h = await daemon(clock, { maxAttempts: 2, baseMs: 5_000, unavailableGraceMs: 30 * 60_000 });
    const cal = h.world.calendarOf("th_1");
    h.world.google.revokeTokens(cal);
    const appt = h.world.booking.create({ therapist_id: "th_1", start_time: iso(clock.now() + DAY) }, { force: true });
    await pass(h, clock, 20 * 60_000, 30_000);
    expect(await deadLetters(h)).toEqual([]);
    await pass(h, clock, 20 * 60_000, 30_000);
    const dead = await deadLetters(h);
    expect(dead.map(([k]) => k)).toEqual([`appt:${appt.id}`]);
    expect(String(dead[0]![1].error)).toMatch(/credentials|invalid_grant|unauthorized/i);
  });
});
