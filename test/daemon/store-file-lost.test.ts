// Tests a SQLite store file deleted under a running daemon (an `rm` of the volume's content, a cleanup script). SQLite
// reads and writes through its open descriptors, so every ping and write went on succeeding into an inode nobody
// opens again: webhooks were acknowledged into it, /readyz stayed green, nothing was logged, and a daemon started on
// the path (a rolling update) created a new file and led beside this one. Now, within a second: /readyz fails naming
// the file, one error line says what happened and what to do, webhooks are answered 503 (the sender retries), and the
// lease ends, so a daemon on the new file leads alone.
import { rmSync } from "node:fs";
import { join } from "node:path";
import { afterEach, expect, it } from "vitest";
import type { Config } from "../../src/config/schema.ts";
import { type App, createApp } from "../../src/daemon/app.ts";
import type { Logger } from "../../src/log.ts";
import { startWorld, WORLD_WEBHOOK_SECRET } from "../../src/simulator/world.ts";
import { captureLog } from "../support/log-capture.ts";
import { waitFor } from "../support/wait-for.ts";

const DAY = 86_400_000;
const cleanups: (() => Promise<unknown>)[] = [];
afterEach(async () => {
  for (const c of cleanups.splice(0).reverse()) await c().catch(() => {});
});

async function started(config: Config, logger: Logger): Promise<App> {
  const app = await createApp(structuredClone(config), { logger, listen: "127.0.0.1:0", adminListen: "127.0.0.1:0" });
  cleanups.push(() => app.stop(3000));
  await app.start();
  return app;
}

const readyz = async (app: App) => {
  const res = await fetch(`${app.admin!.url}/readyz`);
  return { status: res.status, body: JSON.stringify(await res.json()) };
};

it("a deleted store file is told within a second: not ready, one error line, webhooks refused, the lease given up", async () => {
  const world = await startWorld({ therapists: ["th_anna"], webhookTimeScale: 1 / 500 });
  cleanups.push(() => world.close());
  const file = join(world.dir, "data", "calbridge.sqlite");
  world.config.store = { ...world.config.store, url: `sqlite://${file}`, lease_seconds: 3 };
  const log = captureLog("info");
  const a = await started(world.config, log.logger);
  world.booking.addWebhookEndpoint({
    url: `${a.http!.url}/webhooks/booking`,
    secret: WORLD_WEBHOOK_SECRET,
    events: ["*"],
  });
  await waitFor("leading", () => a.lease.isLeader);
  await waitFor("ready", async () => (await readyz(a)).status === 200);

  for (const suffix of ["", "-wal", "-shm"]) rmSync(`${file}${suffix}`, { force: true });
  await new Promise((r) => setTimeout(r, 1100)); // the path is looked at at most once a second

  const ready = await readyz(a);
  expect(ready.status).toBe(503);
  expect(ready.body).toContain(`the SQLite file ${file} was deleted while calbridge ran`);
  const start = new Date(Date.now() + 2 * DAY);
  start.setUTCHours(9, 0, 0, 0);
  const before = world.booking.deliveries.length;
  world.booking.create({ therapist_id: "th_anna", start_time: start.toISOString() });
  await waitFor("a delivery attempt", () => world.booking.deliveries.slice(before).some((d) => d.attempts.length > 0));
  await world.booking.webhooksIdle().catch(() => {});
  const answers = world.booking.deliveries.slice(before).flatMap((d) => d.attempts.map((t) => t.status));
  expect(answers.length).toBeGreaterThan(0);
  expect(answers.every((s) => s === 503)).toBe(true); // never acknowledged into the deleted file

  const lost = log.lines.filter((l) => l.level === 50 && String(l.msg).includes("was deleted while calbridge ran"));
  expect(lost).toHaveLength(1); // said once, however many queries meet it
  expect(lost[0]).toMatchObject({ store: file, msg: expect.stringContaining("then restart calbridge") });
  await waitFor("leadership given up", () => !a.lease.isLeader, 5000);

  // A daemon started on the path (a rolling update) creates a new file and leads alone.
  const b = await started(world.config, captureLog("info").logger);
  await waitFor("the new daemon leading", () => b.lease.isLeader);
  await new Promise((r) => setTimeout(r, 2000));
  expect([a.lease.isLeader, b.lease.isLeader]).toEqual([false, true]);
}, 60_000);
