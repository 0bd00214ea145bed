// Owns the running-daemon harness of the reload tests: daemonHarness's app is one-shot, and only a running leader
// settles the watch ledger on a reload (watched.ts); this one is, and can be restarted on the same store.

import type { Clock, ManualClock } from "../../src/clock.ts";
import type { Config, ConfigInput } from "../../src/config/schema.ts";
import { type App, createApp } from "../../src/daemon/app.ts";
import { silentLogger } from "../../src/log.ts";
import { startWorld, WORLD_WEBHOOK_SECRET, type World } from "../../src/simulator/world.ts";

export interface H {
  world: World;
  app: App;
  close(): Promise<void>;
}

export async function startApp(world: World, config: Config, clock: Clock): Promise<App> {
  const app = await createApp(config, {
    clock,
    logger: silentLogger,
    listen: "127.0.0.1:0",
    adminListen: "127.0.0.1:0",
  });
  await app.start();
  world.booking.addWebhookEndpoint({
    url: `${app.http!.url}${config.webhooks.path}`,
    secret: WORLD_WEBHOOK_SECRET,
    events: ["*"],
  });
  return app;
}

export async function runningWorld(
  clock: ManualClock,
  writeback: NonNullable<NonNullable<ConfigInput["sync"]>["writeback"]> = {},
): Promise<{ world: World; app: App }> {
  const world = await startWorld({
    therapists: 2,
    clock,
    configure: (c) => {
      c.sync = { ...c.sync, writeback: { ...writeback } };
    },
  });
  const app = await startApp(world, world.config, clock);
  return { world, app };
}

export async function quietApp(world: World, app: App): Promise<void> {
  for (let i = 0; i < 2; i++) {
    await world.booking.webhooksIdle();
    await app.processor.idle();
    await app.engine.idle();
  }
}

export async function passApp(world: World, app: App, clock: ManualClock, ms: number, step = 5_000): Promise<void> {
  for (let t = 0; t < ms; t += step) {
    await clock.advance(Math.min(step, ms - t));
    await quietApp(world, app);
  }
}

export async function pollAllApp(world: World, app: App): Promise<void> {
  for (const t of world.therapists) if (app.sync.mapping.calendarIfAny(t)) await app.poller.poll(t);
  await quietApp(world, app);
}

export const DAY = 86_400_000;

export async function mirroredOne(world: World, app: App, clock: ManualClock): Promise<string> {
  const s = new Date(clock.now() + 3 * DAY);
  s.setUTCHours(10, 0, 0, 0);
  const id = String(world.booking.create({ therapist_id: "th_1", start_time: s.toISOString() }, { force: true }).id);
  await quietApp(world, app);
  await app.reconcile();
  await pollAllApp(world, app);
  return id;
}

export const without = (config: Config, therapistId: string): Config => {
  const next = structuredClone(config);
  next.therapists = next.therapists.filter((t) => t.therapist_id !== therapistId);
  return next;
};

export const cancels = (world: World): number =>
  world.booking.requests.filter((r) => r.route.endsWith("/cancel")).length;
