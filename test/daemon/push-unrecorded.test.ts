// A channel's renewal: events.watch answered, then the store write that records the new channel failed (disk full, a
// lost connection). The renewal was logged as "push channel not opened", but the channel was open at Google, recorded
// nowhere and never stopped: it notified (each answered 404 unknown_channel) until it expired a week later, and every
// check that met the same store opened one more. It is now stopped at once; should the failed write have landed all
// the same, the record names the channel it replaced again.
import { afterEach, expect, it } from "vitest";
import { DAY, type Harness, harness } from "../sync/support.ts";

let h: Harness | undefined;
afterEach(async () => {
  h?.app.poller.stop();
  h?.app.push.stop();
  await h?.close();
  h = undefined;
});

interface Stored {
  channelId?: string;
  resourceId?: string;
  opening?: boolean;
  confirmed?: boolean;
}
type SetMany = (entries: { key: string; value: Stored }[]) => Promise<void>;

async function started(): Promise<Harness> {
  const x = await harness({
    therapists: 1,
    configure: (c) => {
      c.google.push = { public_url: "https://sync.example/webhooks/google", token: "channel-token-0123456789" };
    },
  });
  await x.app.start();
  x.world.config.google.push!.public_url = `${x.app.http!.url}/webhooks/google`;
  x.world.google.requireHttpsChannels = false;
  await x.app.push.start();
  await new Promise((r) => setTimeout(r, 300)); // the first channel's sync message answered and its confirmation stored
  expect(x.world.google.channels.size).toBe(1);
  return x;
}

/** The next write of a new channel's record fails (`landed`: after writing it all the same), once. */
function failNextRecord(x: Harness, landed: boolean): { failed: number; restore: () => void } {
  const proto = Object.getPrototypeOf(x.app.store.table<unknown>("channels")) as { setMany: SetMany };
  const setMany = proto.setMany;
  const state = {
    failed: 0,
    restore: () => {
      proto.setMany = setMany;
    },
  };
  proto.setMany = async function (this: unknown, entries) {
    const record = entries.some((e) => e.value?.resourceId && !e.value.opening && !e.value.confirmed);
    if (state.failed > 0 || !record) return setMany.call(this, entries);
    state.failed++;
    if (landed) await setMany.call(this, entries);
    throw new Error("simulated: store write failed");
  };
  return state;
}

for (const landed of [false, true]) {
  it(`a channel whose record failed to be stored is stopped at once${landed ? " (the write landed all the same)" : ""}`, async () => {
    h = await started();
    const channels = h.app.store.table<Stored>("channels");
    const before = (await channels.get("th_1"))?.channelId;
    expect(h.world.google.channels.has(String(before))).toBe(true);
    const fail = failNextRecord(h, landed);
    try {
      const due = Date.now() + 7 * DAY - 3_600_000; // the channel is due for renewal
      await h.app.push.renew(due);
      expect(fail.failed).toBe(1);
      // Only the channel still recorded is open at Google; it is the one the store names.
      expect([...h.world.google.channels.keys()]).toEqual([before]);
      expect((await channels.get("th_1"))?.channelId).toBe(before);
      await h.app.push.renew(due + 3_600_000); // the next hourly check renews it
      const after = (await channels.get("th_1"))?.channelId;
      expect(after).not.toBe(before);
      expect([...h.world.google.channels.keys()]).toEqual([after]);
    } finally {
      fail.restore();
    }
  });
}
