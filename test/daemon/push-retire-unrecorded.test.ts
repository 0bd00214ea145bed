// A renewal through a reload's new gateway whose record could not be written (it withdraws its channel and keeps the
// old record) must not make the reload's retire of the old gateway take "a newer gateway opened one" and return early:
// the OLD channel was then neither stopped nor un-recorded, and for a re-point the renewal cannot see (calendar_id
// `primary` with another `impersonate`: both records say "primary"; a credentials-only change) nothing replaced it until
// it was due (~6 days): the old account's calendar notified as the therapist's, the new one had no channel.
import { afterEach, expect, it } from "vitest";
import type { App } from "../../src/daemon/app.ts";
import type { World } from "../../src/simulator/world.ts";
import { liveDaemon, openOn, sleep, until } from "./push-live.ts";

const DAY = 86_400_000;
let close: (() => Promise<void>) | undefined;
afterEach(async () => {
  await close?.();
  close = undefined;
});

/** Every therapist on calendar_id `primary` (another `impersonate` is another account's calendar, same id). */
async function primaryDaemon(n: number): Promise<{ world: World; app: App }> {
  const d = await liveDaemon(n, { primary: true });
  close = d.close;
  return d;
}

type SetMany = (
  entries: { key: string; value: { resourceId?: string; opening?: boolean; confirmed?: boolean } }[],
) => Promise<void>;

/** The next write of `therapistId`'s new channel record fails once (the store refused it). */
function failNextRecordOf(app: App, therapistId: string): { failed: number; restore(): void } {
  const proto = Object.getPrototypeOf(app.store.table<unknown>("channels")) as { setMany: SetMany };
  const setMany = proto.setMany;
  const state = {
    failed: 0,
    restore: () => {
      proto.setMany = setMany;
    },
  };
  proto.setMany = async function (this: unknown, entries) {
    const record = entries.some(
      (e) => e.key === therapistId && e.value?.resourceId && !e.value.opening && !e.value.confirmed,
    );
    if (state.failed > 0 || !record) return setMany.call(this, entries);
    state.failed++;
    throw new Error("simulated: store write failed");
  };
  return state;
}

it("a renewal whose record failed does not make a later retire leave the old account's channel", async () => {
  const { world, app } = await primaryDaemon(2);
  const oldCal = "th_2@clinic.test";
  const newAccount = "th_2-new@clinic.test";
  const next = structuredClone(world.config);
  next.therapists = next.therapists.map((t) => ({
    ...t,
    impersonate: t.therapist_id === "th_2" ? newAccount : `${t.therapist_id}-b@clinic.test`,
  }));

  let release!: () => void;
  const gate = new Promise<void>((r) => (release = r));
  let arrived = false;
  world.google.faults.holdNext(/channels\/stop/, () => {
    arrived = true;
    return gate;
  });
  const reloading = app.reload(next);
  expect(await until(() => arrived)).toBe(true); // th_1's retire: its stop is out
  // The hourly check meanwhile (every channel due): th_2's new channel is opened through the new gateway, its record
  // write fails, so it is withdrawn and the old record put back.
  const fail = failNextRecordOf(app, "th_2");
  const renewing = app.push.renew(Date.now() + 7 * DAY - 3_600_000);
  await until(() => fail.failed === 1, 3000); // (at 1ae4979 it is over before th_1's stop is released)
  release();
  await renewing;
  fail.restore();
  expect(fail.failed).toBe(1);
  await reloading; // th_2's retire runs now
  await sleep(300); // the reload's own renewal
  await world.google.settleNotifications();
  await app.push.renew(); // and the next hourly check
  await sleep(300);

  const open = (cal: string) => openOn(world, cal);
  const stored = await app.store.table<{ channelId: string; subject?: string }>("channels").get("th_2");
  expect
    .soft({ old: open(oldCal), new: open(newAccount).length, storedSubject: stored?.subject })
    .toEqual({ old: [], new: 1, storedSubject: newAccount });
  expect.soft(app.pushHealth.state("th_2", Date.now())).toBe("confirmed");
}, 60_000);
