// A connected therapist (calendar_id primary) reconnects through a new link and picks another Google account (a new
// practice account, or the other account signed in on their phone). The confirmation page promises the appointments
// in that account's calendar within a few minutes: the backfill lists the new calendar in full instead of trusting the
// links (whose events are in the first account's calendar), and creates the events there. The first account's events
// are out of reach now: their absence from the new calendar is no deletion, so nothing is cancelled or written back.
import { afterEach, expect, it } from "vitest";
import { answerConsent } from "../support/consent.ts";
import { type ConnectWorld, startConnectWorld } from "./support.ts";

let cw: ConnectWorld | undefined;
afterEach(async () => {
  await cw?.close();
  cw = undefined;
});

const BEN2 = "ben.practice@personal.test";

async function connect(w: ConnectWorld): Promise<string> {
  const landing = await fetch(await w.invite());
  expect(landing.status).toBe(200);
  const google = (await landing.text()).match(/id="continue" href="([^"]+)"/)?.[1]?.replace(/&amp;/g, "&");
  expect(google).toBeTruthy();
  const page = await fetch(await answerConsent(google!, {}));
  expect(page.status).toBe(200);
  return page.text();
}

it("after a reconnect with another Google account, the backfill puts the appointments in that account's calendar", async () => {
  cw = await startConnectWorld();
  const w = cw;
  await connect(w);
  const expected = w.expected();
  await expect.poll(() => w.live().length, { timeout: 15_000 }).toBe(expected.length);
  await w.app.reconcile({ therapistId: "th_ben" });
  await w.app.poller.poll("th_ben"); // the poller has the first account's sync token: runs list no calendar now
  expect((await w.app.reconcile({ therapistId: "th_ben" })).calendarsListed).toBe(0);
  const booking = w.world.booking.requests.length;
  const statuses = () => w.world.booking.all().map((a) => `${a.id} ${a.status} ${a.start_time}`);
  const before = statuses();

  w.world.google.consent.subject = BEN2;
  expect(await connect(w)).toContain(`<strong id="count">${expected.length}</strong> appointments`);
  const inNewAccount = () => {
    try {
      return w.world.google.events(BEN2).filter((e) => e.status !== "cancelled");
    } catch {
      return []; // the account's primary calendar exists once it is first used
    }
  };
  // The backfill the callback started, with nothing else run.
  await expect.poll(() => inNewAccount().length, { timeout: 15_000 }).toBe(expected.length);
  // The poller's first read of the new calendar (the old token answers 410), and runs on top change nothing.
  await w.app.poller.poll("th_ben");
  await w.app.engine.idle();
  await w.app.reconcile({ therapistId: "th_ben" });
  await w.app.engine.idle();
  expect(inNewAccount()).toHaveLength(expected.length);
  expect(w.live()).toHaveLength(expected.length); // the first account's events stay as they were, out of reach
  const writes = w.world.booking.requests.slice(booking).filter((r) => r.method !== "GET");
  expect(writes).toEqual([]); // no cancellation, no move written back
  expect(statuses()).toEqual(before);
  expect((await w.app.status()).therapists[0]!.credentials.ok).toBe(true);
});
