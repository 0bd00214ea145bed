// A reload re-points two therapists; while it stops the first one's old channel (retire), a renewal (the hourly
// check, a suspect channel's replacement) opened the first one's channel on the new calendar, and the retire, going on,
// removed its record: open at Google and recorded nowhere, it notified for a week beside the one the next check opened.
// A retire after such a renewal took the new channel for the old one (its health wiped, stopped with the old
// calendar's gateway). retire() now leaves a channel a newer gateway opened, and its record.
import { afterEach, expect, it } from "vitest";
import { liveDaemon, openOn, repointed, sleep, until } from "./push-live.ts";

let d: Awaited<ReturnType<typeof liveDaemon>> | undefined;
afterEach(async () => {
  await d?.close();
  d = undefined;
});

it("a renewal during a reload's retires keeps the re-pointed therapists' new channels open, recorded and healthy", async () => {
  d = await liveDaemon(2);
  const { world, app } = d;
  const moved = new Map(["th_1", "th_2"].map((id) => [id, `${id}-new@clinic.test`]));
  const old = new Map([...moved.keys()].map((id) => [id, world.calendarOf(id)!]));
  for (const [id, cal] of moved) world.google.createCalendar(cal, old.get(id)!, { timeZone: "Europe/Berlin" });
  const next = structuredClone(world.config);
  next.therapists = next.therapists.map((t) => ({ ...t, calendar_id: moved.get(t.therapist_id) ?? t.calendar_id }));

  let release!: () => void;
  const gate = new Promise<void>((r) => (release = r));
  let arrived = false;
  world.google.faults.holdNext(/channels\/stop/, () => {
    arrived = true;
    return gate;
  });
  const reloading = app.reload(next);
  expect(await until(() => arrived)).toBe(true); // the first retire's stop is out
  // A renewal meanwhile: it opens channels on the therapists' new calendars and stops the old ones itself.
  const renewing = app.push.renew();
  await sleep(300);
  release();
  await reloading;
  await renewing;
  await sleep(300); // the reload's own renewal
  await world.google.settleNotifications();
  await app.push.renew();
  await sleep(200);

  const open = (cal: string) => openOn(world, cal);
  const now = Date.now();
  for (const [id, cal] of moved) {
    const stored = await app.store.table<{ channelId: string; calendarId: string }>("channels").get(id);
    expect.soft({ id, old: open(old.get(id)!), open: open(cal).length }).toEqual({ id, old: [], open: 1 });
    expect.soft({ id, stored: stored?.channelId }).toEqual({ id, stored: open(cal)[0] });
    expect.soft({ id, health: app.pushHealth.state(id, now) }).toEqual({ id, health: "confirmed" });
  }
});

it("a retire that comes after the therapist's renewal leaves the channel the newer gateway opened", async () => {
  d = await liveDaemon(1);
  const { world, app } = d;
  const { oldCal, newCal, next } = repointed(world);
  const retired = app.calendars.get("th_1")!;
  await app.reload(next);
  const open = (cal: string) => openOn(world, cal);
  expect(await until(() => open(newCal).length === 1)).toBe(true);
  await world.google.settleNotifications();
  // The reload's retire, had it been late (its turn after the renewal): the new calendar's channel stays.
  await app.push.retire("th_1", retired);
  const stored = await app.store.table<{ channelId: string }>("channels").get("th_1");
  expect({ old: open(oldCal), open: open(newCal), stored: stored?.channelId }).toEqual({
    old: [],
    open: [stored?.channelId],
    stored: open(newCal)[0],
  });
  expect(app.pushHealth.state("th_1", Date.now())).toBe("confirmed");
});
