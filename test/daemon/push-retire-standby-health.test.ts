// A reload's retire that finds the lease lost leaves the channel to the next leader, but it left what this replica
// knew of it in the push health too: leading again, its start takes the therapist's recorded channel (on the calendar
// they no longer have) for one left behind and stops it without touching the health, and when the renewal on the new
// calendar then failed, /status said the old channel was confirmed and the poller, trusting it, polled the new
// calendar at the slow interval, with no channel on it.
import { afterEach, expect, it } from "vitest";
import { type Harness, harness } from "../sync/support.ts";
import { openOn, repointed } from "./push-live.ts";

let h: Harness | undefined;
afterEach(async () => {
  h?.app.push.stop();
  await h?.close();
  h = undefined;
});

it("a retire that finds the lease lost forgets the old channel's health: leading again with the renewal refused, th_1 shows no channel", async () => {
  const x = await harness({
    therapists: 1,
    configure: (c) => {
      c.google.push = { public_url: "https://sync.example/webhooks/google" };
    },
  });
  h = x;
  await x.app.start();
  x.world.config.google.push!.public_url = `${x.app.http!.url}/webhooks/google`;
  x.world.google.requireHttpsChannels = false;
  await x.app.push.start();
  await x.world.google.settleNotifications();
  const state = async () => (await x.app.status()).therapists.find((t) => t.therapistId === "th_1")?.push?.state;
  expect(await state()).toBe("confirmed");

  // The lease is lost as a reload re-points th_1: its retire of the old calendar's gateway finds this replica a standby.
  const oldGw = x.app.calendars.get("th_1")!;
  x.app.push.stop();
  await x.app.lease.stop({ release: true });
  expect(x.app.lease.isLeader).toBe(false);
  const { oldCal, newCal, next } = repointed(x.world);
  await x.app.reload(next);
  await x.app.push.retire("th_1", oldGw);

  // Leading again; Google refuses the watch on the new calendar.
  await x.app.lease.start();
  expect(x.app.lease.isLeader).toBe(true);
  x.world.google.faults.next(1, { status: 403, reason: "forbidden", match: /\/watch$/ });
  await x.app.push.start();
  await x.world.google.settleNotifications();
  expect({ old: openOn(x.world, oldCal), new: openOn(x.world, newCal) }).toEqual({ old: [], new: [] });
  expect({
    state: await state(),
    trusted: x.app.pushHealth.healthyUntil("th_1", Date.now()),
  }).toEqual({ state: "none", trusted: undefined });
});
