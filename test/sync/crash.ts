// Test support for crash consistency: a store write of a link that fails (the process dies there), and a new app on
// the same store and world, as a restart after a crash finds them.
import { createApp } from "../../src/daemon/app.ts";
import { silentLogger } from "../../src/log.ts";
import type { Link } from "../../src/sync/types.ts";
import type { Harness } from "./support.ts";

/**
 * The next links.save of a link matching `when` throws, once (`die`: and every save after it, as after a crash: nothing
 * of this app reaches the links any more). The flag is set when it fired.
 */
export function failLinkSaveOnce(
  x: Harness,
  when: (l: Link) => boolean,
  o: { die?: boolean } = {},
): { fired: boolean } {
  const links = x.app.sync.links;
  const save = links.save.bind(links);
  const flag = { fired: false };
  links.save = async (l: Link) => {
    if (flag.fired && o.die) throw new Error("simulated crash: the process is dead");
    if (!flag.fired && when(l)) {
      flag.fired = true;
      throw new Error(`simulated crash: links.save of ${l.appointmentId} failed`);
    }
    return save(l);
  };
  return flag;
}

/** Stops the app (what was written stays, as after a crash) and starts a new one on the same store and world. */
export async function restart(x: Harness): Promise<Harness> {
  await x.app.stop(2000).catch(() => {});
  const app = await createApp(x.world.config, { logger: silentLogger, oneShot: true, listen: "127.0.0.1:0" });
  await app.start();
  return {
    ...x,
    app,
    async close() {
      await app.stop(2000).catch(() => {});
      await x.world.close();
    },
  };
}

/** Polls the calendars and lets webhooks in until `f` fired, never waiting for the engine to be idle (it may retry). */
export async function untilFired(x: Harness, f: { fired: boolean }, ms = 10_000): Promise<void> {
  for (const end = Date.now() + ms; !f.fired && Date.now() < end; ) {
    await x.world.booking.webhooksIdle();
    for (const t of x.world.therapists) if (x.app.sync.mapping.calendarIfAny(t)) await x.app.poller.poll(t);
    await new Promise((r) => setTimeout(r, 50));
  }
  if (!f.fired) throw new Error("the simulated crash point was never reached");
}
