// Through the real daemon on the manual clock: a therapist whose token requests are refused with 403 (an egress proxy
// or allow-list, a Workspace admin blocking the app) has a calendar that cannot be used, not an appointment Google
// refused: its syncs wait (no dead letter, no tries spent), /status says the credentials are broken by the token
// endpoint's 403, and once the endpoint answers again the credentials probe notices and every appointment appears.
import { afterEach, expect, it } from "vitest";
import { eventIdFor } from "../../src/calendar/ids.ts";
import { ManualClock } from "../../src/clock.ts";
import { DAY, daemonHarness, type Harness, iso } from "./support.ts";

let h: Harness | undefined;
afterEach(async () => {
  await h?.close();
  h = undefined;
});

async function pass(x: Harness, clock: ManualClock, ms: number, step = 5_000): Promise<void> {
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

it("a booking change for a therapist whose token endpoint answers 403 waits, and is synced once it answers again", async () => {
  const clock = new ManualClock(Date.now());
  h = await daemonHarness({ therapists: 2, clock, engine: { maxAttempts: 2, baseMs: 5_000 } });
  const cal = h.world.calendarOf("th_1");
  // th_1's access token stops working and every token request meets the proxy's 403 while `blocked`.
  let blocked = true;
  h.world.google.expireAccessTokens(cal);
  h.world.google.faults.next(100_000, {
    target: "token",
    status: 403,
    reason: "access_blocked",
    when: () => blocked,
  });
  const ids = [1, 2].map((i) =>
    String(
      h!.world.booking.create({ therapist_id: "th_1", start_time: iso(clock.now() + i * DAY) }, { force: true }).id,
    ),
  );
  await pass(h, clock, 8 * 60_000);
  // Far more time than two attempts take: nothing is a dead letter, nothing reached th_1's calendar.
  expect(await deadLetters(h)).toEqual([]);
  for (const id of ids) expect(h.world.google.event(cal, eventIdFor(id))).toBeUndefined();
  const status = (await (await fetch(`${h.app.admin!.url}/status`)).json()) as {
    therapists: { therapistId: string; credentials: Record<string, unknown> }[];
  };
  const th1 = status.therapists.find((t) => t.therapistId === "th_1")!;
  expect(th1.credentials).toMatchObject({ ok: false, reason: "access_blocked" });
  expect(String(th1.credentials.detail)).toMatch(/token endpoint answered 403 access_blocked/);

  // The proxy lets the token requests through again: within the probe interval (10 min) and a retry, all appear.
  blocked = false;
  await pass(h, clock, 16 * 60_000);
  for (const id of ids) expect(h.world.google.event(cal, eventIdFor(id))?.status).toBe("confirmed");
  expect(await deadLetters(h)).toEqual([]);
});
