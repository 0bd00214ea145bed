// A reload removes a therapist while their channel's renewal (the hourly check, or a suspect channel's replacement)
// has its events.watch call out. The reload's retire() stops the channel it finds; the renewal's answer then arrived
// and recorded the NEW channel under the removed therapist, where no check walks: Google notified for that calendar
// until the channel expired (a week), and only the next start stopped it. The renewal now stops what it opened for a
// calendar the reload took from its therapist.
import { afterEach, expect, it } from "vitest";
import { liveDaemon, sleep, until } from "./push-live.ts";

let d: Awaited<ReturnType<typeof liveDaemon>> | undefined;
afterEach(async () => {
  await d?.close();
  d = undefined;
});

const DAY = 86_400_000;

it("a therapist removed by a reload while their channel's renewal is out keeps no channel open at Google", async () => {
  d = await liveDaemon(2);
  const { world, app } = d;
  const cal2 = world.calendarOf("th_2")!;
  let release!: () => void;
  const gate = new Promise<void>((r) => (release = r));
  let arrived = false;
  world.google.faults.holdNext(new RegExp(`${encodeURIComponent(cal2).replace(/[.]/g, "\\.")}/events/watch`), () => {
    arrived = true;
    return gate;
  });
  const renewing = app.push.renew(Date.now() + 7 * DAY); // the check, with every channel due for renewal
  expect(await until(() => arrived)).toBe(true);

  const next = structuredClone(world.config);
  next.therapists = next.therapists.filter((t) => t.therapist_id !== "th_2");
  await app.reload(next);
  release();
  await renewing;
  await world.google.settleNotifications();
  await app.push.renew(); // and the next check
  await sleep(200);
  const open = [...world.google.channels.values()].filter((c) => c.calendarId === cal2).map((c) => c.id);
  expect(open).toEqual([]);
  expect(await app.store.table<{ channelId: string }>("channels").get("th_2")).toBeUndefined();
  // th_1's channel, renewed by the same check, is open and recorded.
  const cal1 = world.calendarOf("th_1")!;
  expect([...world.google.channels.values()].filter((c) => c.calendarId === cal1)).toHaveLength(1);
  expect(await app.store.table<{ channelId: string }>("channels").get("th_1")).toBeDefined();
});
